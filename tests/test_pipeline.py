"""Model mode's parts that need no framework: the stage cuts, GPipe's figures, the
schedules (GPipe, 1F1B) and the loop run on a NumPy toy backend (tapes watched, spans,
the 1F1B check and its planted bugs), the record, the command line and the report."""
import itertools
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

from common import models
from common.reports import comparison, plots, runs as report
from common.core.contract import NotApplicable
from common.core.modes import MODES
from common.core import pipeline
from common.core import schedules
from common.core.pipeline import PipelineTrainer
from common.core.schedules import (SCHEDULES, activation_bytes_calculated, bytes_between_stages,
                                   check_order, check_rendezvous, gpipe_bubble,
                                   in_flight_predicted, rank_ops, serial_order, stage_ops, stages,
                                   with_handovers)
from common.core.plan import RunConfig
from common.results.record import RECORD_KEYS, new_record, record_filename
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
    (["--schedule", "interleaved"], "unknown schedule 'interleaved'; choose from: gpipe, 1f1b"),
])
def test_micro_batches_are_checked(args, message):
    assert message in usage_error(["-m", "benchmarks.compare", *args, "--dataset", "synthetic"])


def test_the_pipeline_benchmark_takes_its_schedules_as_compare_does(capsys):
    from benchmarks import pipeline as benchmark
    assert benchmark.build_parser().parse_args(["--schedule", "1f1b"]).schedule == "1f1b"
    assert benchmark.main(["--schedule", "gpipe,interleaved"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "python -m benchmarks.pipeline: error: unknown schedule 'interleaved'; choose from: "
        "gpipe, 1f1b (or all)"]


def _plan(*argv):
    from benchmarks.compare import Plan, build_parser, resolve
    args = build_parser().parse_args(["--framework", "pytorch", "--dataset", "synthetic", *argv])
    return Plan.from_args(args, *resolve(args))


def test_a_schedule_list_runs_model_mode_once_per_schedule_and_the_rest_once():
    """--schedule takes a list as --mode and --execution do: model mode runs once per
    schedule, each in a file of its own (GPipe's keeps the name it had before the list);
    a mode without a schedule runs once, its record keeping the default it does not use."""
    configs = _plan("--mode", "native,model", "--schedule", "1f1b,gpipe", "--devices", "1,2").configs()
    assert [(c.mode, c.schedule, c.devices) for c in configs] == [
        ("native", "gpipe", 1), ("native", "gpipe", 2), ("model", "1f1b", 1), ("model", "1f1b", 2),
        ("model", "gpipe", 1), ("model", "gpipe", 2)]
    assert [record_filename(new_record(c)) for c in configs] == [
        "pytorch-native-1dev.json", "pytorch-native-2dev.json", "pytorch-model-1f1b-1dev.json",
        "pytorch-model-1f1b-2dev.json", "pytorch-model-1dev.json", "pytorch-model-2dev.json"]
    assert [c.schedule for c in _plan("--mode", "model", "--schedule", "all").configs()] == list(SCHEDULES)
    assert [c.schedule for c in _plan("--mode", "model").configs()] == ["gpipe"]


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


def test_each_schedule_is_a_row_of_its_own_named_in_the_table():
    """Two schedules of one configuration are two rows, each named by its schedule
    (a record from before the schedule was recorded ran GPipe), each timed against native
    x1 and compared between folders with its own schedule's row."""
    native, gpipe = _record("native", 1, 2.0), _record("model", 2, 4.0)
    onef = _record("model", 2, 5.0, schedule="1f1b")
    rows = report.summarize([native, gpipe, onef])
    assert [row["mode"] for row in rows] == ["native", "model gpipe", "model 1f1b"]
    assert [row["speed-up"] for row in rows[1:]] == [0.5, 0.4]
    assert [row["schedule"] for row in rows[1:]] == ["gpipe", "1f1b"]
    # without native x1, each schedule's rows are timed against its own 1-stage row
    alone = [_record("model", k, sec, schedule=schedule)
             for schedule, secs in (("gpipe", (1.0, 2.0)), ("1f1b", (4.0, 2.0)))
             for k, sec in zip((1, 2), secs)]
    assert [row["speed-up"] for row in report.summarize(alone)] == [1.0, 0.5, 1.0, 2.0]
    old = {k: v for k, v in gpipe.items() if k != "schedule"}
    assert report.summarize([old])[0]["mode"] == "model gpipe"
    text = report.markdown_report(rows, [native, gpipe, onef], "cmd")
    assert re.search(r"\| model gpipe +\|", text) and re.search(r"\| model 1f1b +\|", text)
    after = [_record("model", 2, 4.0), _record("model", 2, 10.0, schedule="1f1b")]
    # each schedule against its own (one repeat a side: too few for a verdict, so the
    # ratios tell the pairing: 4.0 / 4.0 and 10.0 / 5.0)
    assert [(r["mode"], round(r["ratio"], 9), r["verdict"])
            for r in comparison.compare_folders([gpipe, onef], after)] == [
        ("model gpipe eager", 1.0, "too few repeats"), ("model 1f1b eager", 2.0, "too few repeats")]


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


# --- the schedules ---

def _peak(ops) -> int:
    held = most = 0
    for kind, _ in ops:
        held += 1 if kind == "F" else -1
        most = max(most, held)
    return most


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_schedules_run_every_micro_batch_and_hold_what_the_formula_says(schedule):
    """Each stage runs every micro-batch's forward and then its backward, once; its
    tapes held at once peak at the formula's count (GPipe M, 1F1B min(k-s, M)); one
    process finds an order for every stage count and M."""
    for k in range(1, 6):
        for M in range(1, 10):
            for s in range(k):
                ops = stage_ops(schedule, k, s, M)
                assert sorted(ops) == sorted([("F", m) for m in range(M)] + [("B", m) for m in range(M)])
                assert all(ops.index(("F", m)) < ops.index(("B", m)) for m in range(M))
                assert _peak(ops) == in_flight_predicted(schedule, k, s, M)
            check_order(serial_order(schedule, k, M), schedule, k, M)
    assert stage_ops("1f1b", 2, 0, 4) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1),
                                          ("F", 3), ("B", 2), ("B", 3)]
    assert [in_flight_predicted("1f1b", 4, s, 8) for s in range(4)] == [4, 3, 2, 1]


def test_check_order_fails_on_planted_orders():
    """The order a process runs is checked when the trainer is built: one that runs a
    backward before the next stage handed its gradient back (each stage's ops one stage
    after another), or a stage's ops out of its schedule's order, is refused."""
    k, M = 2, 4
    stage_by_stage = [(s, *op) for s in range(k) for op in stage_ops("1f1b", k, s, M)]
    with pytest.raises(ValueError, match="stage 0 runs B0 before stage 1's B0 handed it over"):
        check_order(stage_by_stage, "1f1b", k, M)
    swapped = serial_order("1f1b", k, M)
    swapped[2], swapped[3] = swapped[3], swapped[2]      # stage 1's F0 and B0
    with pytest.raises(ValueError, match="stage 1 runs"):
        check_order(swapped, "1f1b", k, M)
    with pytest.raises(ValueError, match="not its gpipe ops"):
        check_order(serial_order("1f1b", k, M), "gpipe", k, M)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_process_per_stage_never_waits_forever(schedule):
    """Each stage's process runs its ops and hand-overs (rank_ops) with sends that wait
    for their receive, as Paddle's gloo send does: every process finishes, and every
    receive gets the micro-batch it names, for 1 to 6 stages and M = 1 to 9."""
    for k in range(1, 7):
        for M in range(1, 10):
            lists = [rank_ops(schedule, k, s, M) for s in range(k)]
            check_rendezvous(lists)
            for s, ops in enumerate(lists):
                assert [op[1:] for op in ops if op[1] in ("F", "B")] == stage_ops(schedule, k, s, M)


def test_rendezvous_check_fails_on_planted_hand_overs():
    """Planted: 1F1B's forward sends its activation before it receives the gradient the
    next backward takes (what Paddle's run did before rank_ops, and timed out: each stage
    waits in a send for the other's receive); a stage that receives its micro-batches in
    another order than its peer sends them."""
    k, M = 2, 4
    eager = [with_handovers([(s, *op) for op in stage_ops("1f1b", k, s, M)], k) for s in range(k)]
    with pytest.raises(ValueError, match="stage 0 at send act 1; stage 1 at send grad 0"):
        check_rendezvous(eager)
    lists = [rank_ops("gpipe", k, s, M) for s in range(k)]
    lists[1][0], lists[1][3] = lists[1][3], lists[1][0]     # stage 1 receives act 1 first
    with pytest.raises(ValueError, match="stage 1 receives act 1 where stage 0 sends act 0"):
        check_rendezvous(lists)


# --- the loop on a toy backend ---

class Toy:
    """A framework-free backend for the pipeline loop (NumPy, float64): stage s scales
    the mean of each image's input by c = 1 + the sum of its parameters' means; the last
    stage's loss is sum((y + 1) x output). Its gradients add up in buffers of its own,
    started by `first`, as TensorFlow's, MXNet's and JAX's do."""
    name, tape_bytes_by = "toy", None

    def devices(self, n):
        return [f"cpu:{i}" for i in range(n)]

    def synchronize(self):
        pass

    def tensor(self, value, device):
        return np.asarray(value, np.float64)

    def to_device(self, x, device):
        return x

    def to_numpy(self, x):
        return np.asarray(x)

    def measure_tape(self, replica, forward):
        return forward(), None

    def stage_replica(self, params, state, device, model, stage):
        own = [np.array(params[i], np.float64) for i in stage.params]
        return SimpleNamespace(device=device, stage=stage, params=own,
                               grads=[np.zeros_like(p) for p in own])

    def stage_forward(self, replica, X, y=None, training=True):
        c = 1 + sum(p.mean() for p in replica.params)
        h = X.reshape(len(X), -1).mean(axis=1)
        return (c * h if y is None else ((y + 1) * c * h).sum()), (X, h, c, y)

    def stage_backward(self, replica, tape, grad, first):
        X, h, c, y = tape
        g_out = y + 1 if grad is None else grad
        g_c = (g_out * h).sum()
        for i, p in enumerate(replica.params):
            g = np.full_like(p, g_c / p.size)
            replica.grads[i] = g if first else replica.grads[i] + g
        return None if replica.stage.index == 0 else g_out * c

    def stage_sgd(self, replica, scale):
        for p, g in zip(replica.params, replica.grads):
            p -= scale * g

    def read_stage(self, replica):
        return [p.astype(np.float32) for p in replica.params], []


def _toy_trainer(model, k, M, schedule):
    m = models.get(model)
    params = [np.full(3, 0.1 * i) for i in range(len(m.PARAM_NAMES))]   # the toy's: any shape
    return PipelineTrainer(Toy(), model, params, m.init_state(), Toy().devices(k), 0.1, M,
                           schedule=schedule)


def _images(n, seed=0):
    r = np.random.default_rng(seed)
    return r.random((n, 1, 28, 28), dtype=np.float32), r.integers(0, 10, n)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_loop_counts_tapes_and_keeps_the_last_steps_spans(schedule):
    """ResNet-18's cut into 4 stages, M = 8 (uneven micro-batches of a batch of 30): each
    stage's tapes alive at once, watched as the steps run, equal the formula, and their
    bytes are the calculation's for the micro-batches held (the largest first); the
    spans are the last step's only, each stage's forwards and backwards in its
    schedule's order, with their hand-overs and SGD; the record's copy is compact JSON."""
    k, M, X_y = 4, 8, _images(30)
    trainer = _toy_trainer("resnet18", k, M, schedule)
    for _ in range(3):
        trainer.step(*X_y)
    f = trainer.figures()
    assert f["schedule"] == schedule and f["bubble_gpipe"] == gpipe_bubble(k, M)
    want = [in_flight_predicted(schedule, k, s, M) for s in range(k)]
    assert f["stage_peak_micro_batches"] == f["stage_peak_micro_batches_predicted"] == want
    rows = [hi - lo for lo, hi in trainer.bounds]
    assert rows == [4] * 6 + [3] * 2
    calc = [sum(activation_bytes_calculated("resnet18", trainer.stages[s], r) for r in rows[:n])
            for s, n in enumerate(want)]
    assert f["stage_activation_bytes"] == f["stage_activation_bytes_predicted"] == calc
    assert f["activation_bytes_source"].startswith("calculation")
    assert {x["step"] for x in trainer.spans} == {2}, "only the last step's spans are kept"
    assert set(trainer.spans[0]) == {"lane", "name", "cat", "start", "end", "micro_batch", "step"}
    for s in range(k):
        mine = [x for x in trainer.spans if x["lane"] == f"stage {s} (cpu:{s})"]
        assert [x["name"] for x in mine if x["cat"] in ("forward", "backward")] == [
            f"{kind}{m}" for kind, m in stage_ops(schedule, k, s, M)]
        sends = [f"send act {m}" if kind == "F" else f"send grad {m}"
                 for kind, m in stage_ops(schedule, k, s, M)
                 if (kind == "F" and s < k - 1) or (kind == "B" and s > 0)]
        assert [x["name"] for x in mine if x["cat"] == "handover"] == sends
        assert mine[-1]["name"] == "sgd" and mine[-1]["micro_batch"] is None
        assert all(a["end"] <= b["start"] for a, b in zip(mine, mine[1:]))
    record = json.loads(json.dumps(f["pipeline_spans"]))
    assert record["lanes"] == [f"stage {s} (cpu:{s})" for s in range(k)] and record["step"] == 2
    assert len(record["spans"]) == len(trainer.spans) and record["spans"][0][:4] == [0, "F0", "forward", 0]
    assert 0 <= record["spans"][0][4] <= record["spans"][-1][5] <= record["wall"]


# --- every stage's spans, held to its schedule ---

def stage_spans_want(schedule: str, k: int, s: int, M: int) -> list[str]:
    """Stage s's spans of one step, in order, as its schedule runs them: its forwards,
    backwards and sends (rank_ops: a send that a process per stage holds back waits for a
    receive, which is no span, so one process's order gives the same spans) and the SGD
    step last."""
    return [f"{kind}{m}" if kind in ("F", "B") else f"{kind} {m}"
            for _, kind, m in rank_ops(schedule, k, s, M) if not kind.startswith("recv")] + ["sgd"]


def check_every_stage(ran: dict[int, list[str]], schedule: str, k: int, M: int,
                      stages=None, what: str = "") -> None:
    """Each stage's spans of the last step (`ran`: stage -> span names in time order) are
    exactly its schedule's (stage_spans_want), for every stage of `stages` (all k) and no
    other; and, independent of the schedule's own functions, every micro-batch's forward,
    backward and send once each and one SGD step."""
    stages = list(range(k)) if stages is None else list(stages)
    assert sorted(ran) == stages, f"{what}: spans of stages {sorted(ran)}, expected {stages}"
    for s in stages:
        got, want = ran[s], stage_spans_want(schedule, k, s, M)
        if got != want:
            raise AssertionError(
                f"{what}: stage {s}'s spans are not its {schedule} schedule's: missing "
                f"{[n for n in want if n not in got]}, extra {[n for n in got if n not in want]}, "
                f"ran {got}")
        each = [f"{kind}{m}" for kind in "FB" for m in range(M)] + [
            f"send {kind} {m}" for kind, mine in (("act", s < k - 1), ("grad", s > 0)) if mine
            for m in range(M)] + ["sgd"]
        assert sorted(got) == sorted(each), f"{what}: stage {s} ran {got}, not {each} once each"


def _stage_of(lane: str) -> int:
    return int(lane.split()[1])          # "stage 1 (cpu:0)"


def spans_by_stage(spans: list[dict]) -> dict[int, list[str]]:
    """A trainer's spans (trainer.spans, in the order kept) by stage."""
    out = {}
    for x in spans:
        out.setdefault(_stage_of(x["lane"]), []).append(x["name"])
    return out


def record_spans_by_stage(record: dict) -> dict[int, list[str]]:
    """A record's pipeline_spans (every rank's, gathered: lane index = stage) by stage."""
    out = {}
    for lane, name, *_ in record["spans"]:
        out.setdefault(lane, []).append(name)
    return out


def trace_spans_by_stage(t: dict) -> dict[int, list[str]]:
    """A timeline's (common/results/trace.py) stage spans by stage, in time order: the
    events of the lanes named "stage S (...)", of whichever process."""
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in t["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    out = {}
    for e in sorted((e for e in t["traceEvents"] if e["ph"] == "X"), key=lambda e: e["ts"]):
        lane = lanes[e["pid"], e["tid"]]
        if lane.startswith("stage "):
            out.setdefault(_stage_of(lane), []).append(e["name"])
    return out


# Planted bugs for check_every_stage, each planted in this process (every rank of a run,
# tests/helpers/pipeline_ranks.py) and returning what undoes it.
def plant_last_backward_unspanned(stage: int = 1):
    """Stage `stage` (its rank) runs its last backward but keeps no span of it."""
    step = pipeline.PipelineTrainer.step

    def planted(self, X, y):
        out = step(self, X, y)
        mine = [x for x in self.spans if x["cat"] == "backward" and _stage_of(x["lane"]) == stage]
        if mine:
            self.spans.remove(mine[-1])
        return out
    pipeline.PipelineTrainer.step = planted
    return lambda: setattr(pipeline.PipelineTrainer, "step", step)


def plant_gathered_part_cut():
    """Rank 0 reads the last rank's part of the gathered spans without its last event."""
    rows = pipeline.rank_rows

    def cut(gathered, counts):
        parts = rows(gathered, counts)
        return [*parts[:-1], parts[-1][:-1]]
    pipeline.rank_rows = cut
    return lambda: setattr(pipeline, "rank_rows", rows)


def trace_part_cut(t: dict, pid: int = 1) -> dict:
    """A timeline with process `pid`'s part read without its last stage event (the
    planted reading, applied to a real run's merged timeline)."""
    lanes = {(e["pid"], e["tid"]) for e in t["traceEvents"] if e["ph"] == "M"
             and e["name"] == "thread_name" and e["args"]["name"].startswith("stage ")}
    last = max((e for e in t["traceEvents"] if e["ph"] == "X" and (e["pid"], e["tid"]) in lanes
                and e["pid"] == pid), key=lambda e: e["ts"])
    return {**t, "traceEvents": [e for e in t["traceEvents"] if e is not last]}


PLANTED_SPANS = {"last backward unspanned": plant_last_backward_unspanned,
                 "gathered part cut": plant_gathered_part_cut}
# what check_every_stage says on each, of stage 1 (the last rank)
PLANTED_SPANS_FAILS = {"last backward unspanned": r"stage 1's spans are not its 1f1b schedule's: "
                                                  r"missing \['B3'\]",
                       "gathered part cut": r"stage 1's spans are not its 1f1b schedule's: "
                                            r"missing \['sgd'\]"}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_stage_check_holds_and_fails_without_a_last_backward(schedule):
    """check_every_stage on the toy's stages in one process (2 and 4 stages): it holds as
    the loop is, fails with a stage's last backward missing from its spans, and fails on
    an order that is another schedule's, or with a stage's spans missing whole."""
    for k, M in ((2, 4), (4, 8)):
        trainer = _toy_trainer("resnet18", k, M, schedule)
        for _ in range(2):
            trainer.step(*_images(30))
        check_every_stage(spans_by_stage(trainer.spans), schedule, k, M)
        record = trainer.figures()["pipeline_spans"]
        check_every_stage(record_spans_by_stage(record), schedule, k, M)
        with pytest.raises(AssertionError, match="not its"):
            check_every_stage(spans_by_stage(trainer.spans), "1f1b" if schedule == "gpipe"
                              else "gpipe", k, M)
        with pytest.raises(AssertionError, match="spans of stages"):
            check_every_stage({s: v for s, v in spans_by_stage(trainer.spans).items() if s},
                              schedule, k, M)
        undo = plant_last_backward_unspanned()
        try:
            trainer.step(*_images(30))
        finally:
            undo()
        with pytest.raises(AssertionError, match=rf"stage 1's spans are not its {schedule} "
                                                 rf"schedule's: missing \['B{M - 1 if schedule == '1f1b' else 0}'\]"):
            check_every_stage(spans_by_stage(trainer.spans), schedule, k, M)


# Planted bugs for the 1F1B check (conformance's model_mode_1f1b_equals_gpipe), each a
# function that plants it in this process and returns what undoes it: here on the toy
# backend, in tests/test_conformance.py on a framework's (stages in one process, and in
# a process each: tests/helpers/pipeline_ranks.py).
def plant_dropped_backward():
    """A 1F1B whose stages never run micro-batch M-1's backward."""
    ops = schedules.stage_ops
    schedules.stage_ops = lambda schedule, k, s, M: [
        op for op in ops(schedule, k, s, M) if schedule == "gpipe" or op != ("B", M - 1)]
    return lambda: setattr(schedules, "stage_ops", ops)


def _plant_in_1f1b_steps(calls):
    """Replace backend calls in 1F1B's steps (GPipe's run as they are): calls(trainer)
    returns {name: function} for one step, made afresh each step. Returns the undo."""
    step = pipeline.PipelineTrainer.step

    def planted(self, X, y):
        if self.schedule == "gpipe":
            return step(self, X, y)
        replaced = calls(self)
        for name, fn in replaced.items():
            setattr(self.backend, name, fn)
        try:
            return step(self, X, y)
        finally:
            for name in replaced:
                delattr(self.backend, name)
    pipeline.PipelineTrainer.step = planted
    return lambda: setattr(pipeline.PipelineTrainer, "step", step)


def plant_first_at_gpipes():
    """1F1B telling stage_backward that its first backward is GPipe's, micro-batch M-1
    (1F1B's last), where the gradient sums start from zero."""
    def calls(trainer):
        backward, seen = trainer.backend.stage_backward, {}

        def at_gpipes_first(replica, tape, grad, first):
            n = seen[id(replica)] = seen.get(id(replica), -1) + 1
            return backward(replica, tape, grad, n == trainer.M - 1)
        return {"stage_backward": at_gpipes_first}
    return _plant_in_1f1b_steps(calls)


def plant_tapes_kept():
    """1F1B keeping every micro-batch's tape alive to the end of the step (each tape a
    backward took, held in a list the step drops at its end): GPipe's memory."""
    def calls(trainer):
        backward, kept = trainer.backend.stage_backward, []

        def keeping(replica, tape, grad, first):
            kept.append(tape)
            return backward(replica, tape, grad, first)
        return {"stage_backward": keeping}
    return _plant_in_1f1b_steps(calls)


def plant_tape_stack():
    """1F1B's backwards each taking their stage's last tape made (a stack, right for
    GPipe's backwards in reverse) instead of their own micro-batch's: a gradient paired
    with another micro-batch's activations (stage 0 of 2; stage 1's F0 B0 F1 B1 pair
    right)."""
    def calls(trainer):
        b = trainer.backend
        forward, backward, stacks = b.stage_forward, b.stage_backward, {}

        def pushing(replica, X, y=None, training=True):
            out, tape = forward(replica, X, y, training)
            if training:
                stacks.setdefault(id(replica), []).append(tape)
            return out, tape

        def popping(replica, tape, grad, first):
            return backward(replica, stacks[id(replica)].pop(), grad, first)
        return {"stage_forward": pushing, "stage_backward": popping}
    return _plant_in_1f1b_steps(calls)


PLANTED_1F1B = {"dropped backward": plant_dropped_backward,
                "first at GPipe's": plant_first_at_gpipes, "tapes kept": plant_tapes_kept,
                "tape stack": plant_tape_stack}
# what the check says when it fails on each (a regular expression)
PLANTED_1F1B_FAILS = {"dropped backward": "1F1B vs GPipe", "first at GPipe's": "1F1B vs GPipe",
                      "tapes kept": r"1f1b: tapes alive at once peaked at \[4, 4\], not the "
                                    r"formula's \[2, 1\]",
                      "tape stack": "1F1B vs GPipe"}


@pytest.mark.parametrize("plant", PLANTED_1F1B)
def test_1f1b_check_holds_and_fails_on_planted_bugs(plant):
    """The conformance check model_mode_1f1b_equals_gpipe, run on the toy backend (whose
    gradient sums start at `first`): it holds as the loop is, and fails with the bug
    planted."""
    from tests.helpers.conformance import model_mode_1f1b_equals_gpipe
    model_mode_1f1b_equals_gpipe(Toy(), "lenet")
    undo = PLANTED_1F1B[plant]()
    try:
        with pytest.raises(AssertionError, match=PLANTED_1F1B_FAILS[plant]):
            model_mode_1f1b_equals_gpipe(Toy(), "lenet")
    finally:
        undo()


def test_1f1b_run_stage_after_stage_is_refused(monkeypatch):
    """A 1F1B run in one process stage after stage (a backward before the next stage
    handed its gradient back) is refused when the trainer is built."""
    from tests.helpers.conformance import model_mode_1f1b_equals_gpipe
    monkeypatch.setattr(pipeline, "serial_order", lambda schedule, k, M: [
        (s, *op) for s in range(k) for op in stage_ops(schedule, k, s, M)])
    with pytest.raises(ValueError, match=r"stage 0 runs B\d before stage 1's B\d handed it over"):
        model_mode_1f1b_equals_gpipe(Toy(), "lenet")


def test_report_draws_the_schedule_from_the_spans(tmp_path):
    """A model-mode record carries its last step's spans: the report's pipeline table
    shows the schedule, the tapes held against the formula and their bytes, and
    plots() draws each stage's spans (one file per framework, model and stage count)."""
    records = []
    for schedule in SCHEDULES:
        trainer = _toy_trainer("lenet", 2, 4, schedule)
        trainer.step(*_images(16))
        r = _record("model", 2, 4.0, **trainer.figures())
        r["step_losses"] = [1.0]
        records.append(r)
    assert records[1]["stage_peak_micro_batches"] == [2, 1]
    rows = report.summarize([_record("native", 1, 2.0), *records])
    text = report.markdown_report(rows, records, "cmd")
    section = text[text.index("## Model mode (pipeline)"):]
    assert re.search(r"\|\s+1f1b\s+\|", section) and "2/1 (2/1)" in section and "4/4 (4/4)" in section
    assert "calc." in section
    written = plots.plots(records, tmp_path)
    assert tmp_path / "schedule-lenet-pytorch-2stages.png" in written
    assert (tmp_path / "schedule-lenet-pytorch-2stages.png").stat().st_size > 10_000
    assert plots.step_bubble(records[0]["pipeline_spans"]) == pytest.approx(
        1 - sum(x[5] - x[4] for x in records[0]["pipeline_spans"]["spans"] if x[2] != "handover")
        / (2 * records[0]["pipeline_spans"]["wall"]))
