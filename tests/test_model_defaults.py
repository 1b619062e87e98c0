"""Each model owns the defaults of every command that runs it (issue: a new model needs
no edit in benchmarks/): its COMMANDS table, read by the commands."""
import pytest

from common import models
from common.models.spec import COMMAND_KEYS


@pytest.mark.parametrize("name", models.NAMES)
def test_each_model_owns_every_commands_defaults(name):
    """A model brings its own defaults for every command (benchmarks/ holds none), and
    the commands read them from it (planted: a model's links rates changed show up in
    benchmarks.links' plan, its pipeline shape in benchmarks.pipeline's)."""
    from benchmarks import links, pipeline
    own = models.get(name).COMMANDS
    assert {k: set(v) for k, v in own.items()} == COMMAND_KEYS
    assert links.DEFAULTS[name] is own["links"]
    assert pipeline.SHAPE[name] == (own["pipeline"]["batch"], own["pipeline"]["steps"])
