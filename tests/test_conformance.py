"""The contract's checks (tests/conformance.py), one test per framework, check and
model, each framework in a process of its own. A check whose capability the
framework lists as a known gap shows as skipped with the gap's reason."""
import pytest

from common import models
from tests.conformance import check_ids
from tests.conftest import covered


@pytest.mark.parametrize("check", check_ids(models.NAMES))
@pytest.mark.parametrize("framework", covered())
def test_conformance(conformance, framework, check):
    result = conformance(framework)[check]
    if result["status"] == "skipped":
        pytest.skip(result["detail"])
    assert result["status"] == "passed", result["detail"]
