"""Model mode's parts that need no framework: the stage cuts, GPipe's figures, the
record, the command line and the report."""
import itertools

import pytest

from common import models
from common.reports import runs as report
from common.core.contract import NotApplicable
from common.core.modes import MODES
from common.core.pipeline import bytes_between_stages, gpipe_bubble, stages
from common.core.plan import RunConfig
from common.results.record import RECORD_KEYS, new_record
from tests.conftest import usage_error


@pytest.mark.parametrize("name", models.NAMES)
def test_stages_hold_every_parameter_once_in_order(name):
    model = models.get(name)
    for k in range(1, len(model.UNITS) + 1):
        cut = stages(name, k)
        assert [s.units for s in cut][0][0] == 0 and cut[-1].units[1] == len(model.UNITS)
        assert all(a.units[1] == b.units[0] for a, b in zip(cut, cut[1:])), "stages not contiguous"
        assert [p for s in cut for p in s.params] == list(range(len(model.PARAM_NAMES)))
        assert [j for s in cut for j in s.state] == list(range(len(model.STATE_NAMES)))
    with pytest.raises(NotApplicable):
        stages(name, len(model.UNITS) + 1)


def test_lenet_cuts_into_its_conv_and_dense_blocks():
    conv, dense = stages("lenet", 2)
    names = models.get("lenet").PARAM_NAMES
    assert [names[i] for i in conv.params] == ["W1", "b1", "W2", "b2"]
    assert [names[i] for i in dense.params] == ["W3", "b3", "W4", "b4"]
    assert conv.out_shape == (50, 4, 4)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_resnet18_cuts_are_balanced_on_unit_cost(k):
    """No other contiguous cut has a smaller largest stage (brute force over the cuts)."""
    model = models.get("resnet18")
    cost = model.UNIT_COST
    best = min(max(sum(cost[a:b]) for a, b in zip((0, *c), (*c, len(cost))))
               for c in itertools.combinations(range(1, len(cost)), k - 1))
    got = max(sum(cost[lo:hi]) for lo, hi in models.stage_cuts(model, k))
    assert got == best
    if k == 2:     # between the residual stages 2 and 3
        assert [s.describe() for s in stages("resnet18", 2)] == ["stem..stage2.block2", "stage3.block1..head"]


def test_gpipe_figures():
    assert gpipe_bubble(2, 1) == 0.5 and gpipe_bubble(2, 4) == 0.2 and gpipe_bubble(4, 8) == 3 / 11
    # LeNet: 50x4x4 features per image, forward and their gradients back, float32
    assert bytes_between_stages(stages("lenet", 2), 256) == [2 * 4 * 256 * 800]


def test_model_mode_is_registered_and_recorded():
    mode = MODES["model"]
    assert not mode.default and mode.every_rank_predicts
    assert RunConfig("pytorch", "model", 2).micro_batches == 1
    record = new_record(RunConfig("pytorch", "model", 2, micro_batches=4))
    assert record["micro_batches"] == 4
    assert {"stages", "stage_devices", "stage_sec", "handover_sec", "bytes_between_stages",
            "bubble", "bubble_gpipe"} <= set(RECORD_KEYS)


@pytest.mark.parametrize("args,message", [
    (["--micro-batches", "0"], "must be at least 1"),
    (["--micro-batches", "300"], "--micro-batches 300 is more than the batch of 256"),
])
def test_micro_batches_are_checked(args, message):
    assert message in usage_error(["-m", "benchmarks.compare", *args, "--dataset", "synthetic"])


def _record(mode, devices, sec, **extra):
    r = new_record(RunConfig("pytorch", mode, devices, micro_batches=4))
    r.update(status="ok", sec_per_epoch=[sec], steps_per_epoch=[10], device_kind="cpu",
             device_names=["cpu:0"] * devices, processes=devices if mode == "model" else 1, **extra)
    return r


def test_report_shows_the_pipeline_against_native_one_device():
    native = _record("native", 1, 2.0)
    model = _record("model", 2, 4.0, stages=["conv block", "dense block"], stage_sec=[0.3, 0.05],
                    handover_sec=0.01, bytes_between_stages=[1_638_400], bubble=0.45,
                    bubble_gpipe=0.2)
    rows = report.summarize([native, model])
    assert rows[1]["speed-up"] == 0.5 and rows[1]["step s"] == 0.4
    text = report.markdown_report(rows, [native, model], "cmd")
    section = text[text.index("## Model mode (pipeline)"):]
    assert "0.300 / 0.050" in section and "1.64" in section and "0.45" in section and "0.20" in section
    assert "ideal speed-up is 1" in section
    assert "## Model mode" not in report.markdown_report(rows[:1], [native], "cmd")


def test_model_mode_runs_eagerly():
    """Its stages hand over between Python calls: eager by default in every framework (the
    record says so), another execution is not-applicable before anything starts."""
    from types import SimpleNamespace
    from common.facts import registry
    for name in registry.NAMES:
        assert new_record(RunConfig(name, "model", 2))["execution"] == "eager"
        backend = SimpleNamespace(name=name)
        MODES["model"].precheck(backend, RunConfig(name, "model", 2), ["cpu:0", "cpu:1"])
        with pytest.raises(NotApplicable, match="eagerly"):
            MODES["model"].precheck(backend, RunConfig(name, "model", 2, execution="compiled"),
                                    ["cpu:0", "cpu:1"])
