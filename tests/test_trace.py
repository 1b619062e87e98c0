"""The timeline of a traced run (compare --trace, common/results/trace.py): the epoch
loop's spans and a trainer's own (a pipeline's stages) as Chrome trace events, the
checker that every written trace passes, seen rejecting the faults it exists for,
ranks merged on a common mark, and one real traced comparison."""
from __future__ import annotations

import copy
import json
import time

import numpy as np
import pytest

from common.core.contract import Trainer
from common.core.loop import LANE, train
from common.core.plan import RunConfig
from common.facts import data
from common.results import trace
from tests.conftest import run_python


class Clock:
    """A backend that only counts how often the loop synchronises the device."""

    def __init__(self):
        self.syncs = 0

    def synchronize(self):
        self.syncs += 1


class FakePipeline(Trainer):
    """Two stages, two micro-batches: GPipe's order of spans in one process, shown as
    `spans` the way common/core/pipeline.py's PipelineTrainer shows them."""

    def __init__(self):
        self.spans, self.steps = [], 0

    def _span(self, stage, name, cat, m=None):
        start = time.perf_counter()
        self.spans.append({"lane": f"stage {stage} (cpu:{stage})", "name": name, "cat": cat,
                           "start": start, "end": time.perf_counter(), "micro_batch": m,
                           "step": self.steps})

    def step(self, X, y):
        for m in range(2):
            self._span(0, f"F{m}", "forward", m)
            self._span(0, f"H{m}", "handover", m)
            self._span(1, f"F{m}", "forward", m)
        for m in reversed(range(2)):
            self._span(1, f"B{m}", "backward", m)
            self._span(1, f"H{m}", "handover", m)
            self._span(0, f"B{m}", "backward", m)
        for s in range(2):
            self._span(s, "sgd", "sgd")
        self.steps += 1
        return 2.0

    def losses(self, handles):
        return np.asarray(handles, float)

    def logits(self, X):
        return np.zeros((len(X), 10))

    def replica_params(self):
        return [[]]

    def replica_state(self):
        return [[]]

    def load_params(self, params, state):
        pass


EPOCHS, STEPS, WARMUP = 2, 3, 2


def _train(traced: bool):
    ds = data.synthetic(0, n_train=256, n_test=20)
    cfg = RunConfig("pytorch", "model", 2, epochs=EPOCHS, batch_size=64, steps_per_epoch=STEPS,
                    warmup_steps=WARMUP, trace=traced)
    clock, trainer = Clock(), FakePipeline()
    return train(clock, trainer, cfg, ds), clock, trainer


def _one_process(out):
    timeline = out["timeline"]
    return trace.merge([trace.process_events(timeline["spans"], timeline["origin"], 0, "p0")])


def test_a_traced_loop_gives_a_valid_timeline_with_the_trainers_spans():
    out, clock, trainer = _train(traced=True)
    untraced, plain, _ = _train(traced=False)
    # untraced: no timeline and no extra synchronisation; traced: one more per step
    assert "timeline" not in untraced
    assert clock.syncs - plain.syncs == EPOCHS * STEPS
    t = _one_process(out)
    assert trace.problems(t) == []
    assert t["displayTimeUnit"] == "ms" and "perturbed" in t["otherData"]["note"]
    events = [e for e in t["traceEvents"] if e["ph"] == "X"]
    lanes = {e["args"]["name"]: e["tid"] for e in t["traceEvents"] if e["name"] == "thread_name"}
    assert set(lanes) == {LANE, "stage 0 (cpu:0)", "stage 1 (cpu:1)"}
    by_cat = {}
    for e in events:
        by_cat.setdefault(e["cat"], []).append(e)
    assert len(by_cat["warmup"]) == WARMUP and len(by_cat["epoch"]) == EPOCHS
    assert len(by_cat["eval"]) == EPOCHS and len(by_cat["step"]) == EPOCHS * STEPS
    # every step inside an epoch, in order; the common mark (time 0 after the shift of the
    # warm-up) is the first epoch's start
    epochs = by_cat["epoch"]
    for i, e in enumerate(by_cat["step"]):
        ep = epochs[i // STEPS]
        assert ep["ts"] <= e["ts"] and e["ts"] + e["dur"] <= ep["ts"] + ep["dur"] + trace.SLACK_US
        assert e["args"]["step"] == i
    # the trainer's spans, one event each on its lane, warm-up steps included
    steps = EPOCHS * STEPS + WARMUP
    assert len(trainer.spans) == steps * 14
    assert len(by_cat["forward"]) == len(by_cat["backward"]) == steps * 4
    assert len(by_cat["sgd"]) == steps * 2
    f3 = next(e for e in by_cat["forward"] if e["args"]["step"] == 3 and e["args"]["micro_batch"] == 1
              and e["tid"] == lanes["stage 1 (cpu:1)"])
    assert f3["name"] == "F1"
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)


def _valid():
    out, _, _ = _train(traced=True)
    return _one_process(out)


def _first(t, **match):
    return next(e for e in t["traceEvents"] if all(e.get(k) == v for k, v in match.items()))


def _no_dur(t):
    del _first(t, cat="step")["dur"]


def _negative(t):
    _first(t, cat="eval")["dur"] = -1.0


def _steps_overlap(t):            # step 1 starts before step 0 ends
    a, b = [e for e in t["traceEvents"] if e.get("cat") == "step"][:2]
    b["ts"] = a["ts"] + a["dur"] / 2


def _past_its_epoch(t):           # the last step of epoch 1 ends after the epoch
    step = [e for e in t["traceEvents"] if e.get("cat") == "step"][STEPS - 1]
    epoch = _first(t, cat="epoch")
    step["dur"] = epoch["ts"] + epoch["dur"] - step["ts"] + 1000.0


def _unnamed_lane(t):
    t["traceEvents"].remove(_first(t, name="thread_name"))


def _stage_forwards_overlap(t):   # two forwards of one stage at once
    fs = [e for e in t["traceEvents"] if e.get("cat") == "forward" and e["tid"] == 1]
    fs[1]["ts"], fs[1]["dur"] = fs[0]["ts"], fs[0]["dur"] + 5.0


def _begin_event(t):
    _first(t, cat="step")["ph"] = "B"


@pytest.mark.parametrize("plant, says", [
    (_no_dur, "no dur"), (_negative, "negative dur"), (_steps_overlap, "same category (step)"),
    (_past_its_epoch, "overlaps the end of 'epoch 1'"), (_unnamed_lane, "has no name"),
    (_stage_forwards_overlap, "same category (forward)"), (_begin_event, "not X or M"),
])
def test_the_checker_rejects_a_broken_timeline(tmp_path, plant, says):
    t = _valid()
    assert trace.problems(t) == []
    bad = copy.deepcopy(t)
    plant(bad)
    found = trace.problems(bad)
    assert any(says in p for p in found), found
    with pytest.raises(trace.TraceError, match="broken"):
        trace.write(tmp_path / "x.trace.json", bad)
    assert not (tmp_path / "x.trace.json").exists()


def test_ranks_are_merged_on_their_common_mark():
    """Each rank's clock is its own (the origins differ by an hour here); merged, the
    ranks' first epochs start together and the earliest span at 0."""
    parts = []
    for rank, origin in ((0, 100.0), (1, 3700.0)):
        spans = [{"lane": LANE, "name": "warm-up step 0", "cat": "warmup", "start": origin - 0.5 - rank * 0.1,
                  "end": origin - 0.1},
                 {"lane": LANE, "name": "epoch 1", "cat": "epoch", "start": origin, "end": origin + 2}]
        parts.append(trace.process_events(spans, origin, rank, f"rank {rank}: cpu:0"))
    t = trace.merge(parts)
    assert trace.problems(t) == [] and "common mark" in t["otherData"]["clocks"]
    epochs = [e for e in t["traceEvents"] if e.get("cat") == "epoch"]
    assert [e["pid"] for e in epochs] == [0, 1] and epochs[0]["ts"] == epochs[1]["ts"] == 600000.0
    assert min(e["ts"] for e in t["traceEvents"] if e["ph"] == "X") == 0.0
    names = {e["pid"]: e["args"]["name"] for e in t["traceEvents"] if e["name"] == "process_name"}
    assert names == {0: "rank 0: cpu:0", 1: "rank 1: cpu:0"}


def rank_spans(t) -> dict[int, list[tuple[str, str]]]:
    """Each process's spans in a trace, (category, name) in time order, by pid."""
    out = {}
    for e in sorted((e for e in t["traceEvents"] if e["ph"] == "X"), key=lambda e: e["ts"]):
        out.setdefault(e["pid"], []).append((e["cat"], e["name"]))
    return out


def check_every_rank(t, want: dict[int, list[tuple[str, str]]]) -> None:
    """Every rank's spans arrived in the gathered timeline, each one and no other."""
    got = rank_spans(t)
    for pid in sorted(set(want) | set(got)):
        assert got.get(pid) == want.get(pid), (pid, got.get(pid), want.get(pid))


def _rank_part_spans(rank: int) -> list[dict]:
    """A rank's spans as the loop records them: a warm-up step, an epoch of two steps,
    and an evaluation on rank 0 only (the last span)."""
    spans = [{"lane": LANE, "name": "warm-up step 0", "cat": "warmup", "start": 0.0, "end": 0.5},
             {"lane": LANE, "name": "epoch 1", "cat": "epoch", "start": 1.0, "end": 3.0},
             {"lane": LANE, "name": "step 0", "cat": "step", "start": 1.0, "end": 2.0},
             {"lane": LANE, "name": "step 1", "cat": "step", "start": 2.0, "end": 3.0}]
    if rank == 0:
        spans.append({"lane": LANE, "name": "evaluation", "cat": "eval", "start": 3.0, "end": 4.0})
    return spans


def _gathered(folder, ranks: int) -> dict:
    """Every rank's part written and gathered as common.launch does (rank.py writes,
    run.py reads and merges)."""
    for rank in range(ranks):
        trace.write_part(folder, rank, trace.process_events(_rank_part_spans(rank), 1.0, rank,
                                                            f"rank {rank}: cpu:0"))
    return trace.merge(trace.read_parts(folder))


GATHERED_WANT = {rank: [(s["cat"], s["name"]) for s in _rank_part_spans(rank)]
                 for rank in range(3)}


def test_every_ranks_spans_arrive_in_the_gathered_timeline(tmp_path):
    t = _gathered(tmp_path, 3)
    assert trace.problems(t) == []
    check_every_rank(t, GATHERED_WANT)


def _last_span_dropped(monkeypatch):       # each process's last span lost in its events
    events = trace.process_events
    monkeypatch.setattr(trace, "process_events", lambda spans, *a: events(
        sorted(spans, key=lambda s: s["start"])[:-1], *a))


def _a_rank_left_out(monkeypatch):         # the last rank's part not read
    read = trace.read_parts
    monkeypatch.setattr(trace, "read_parts", lambda folder: read(folder)[:-1])


@pytest.mark.parametrize("plant", [_last_span_dropped, _a_rank_left_out])
def test_a_span_missing_from_the_gathered_timeline_fails(tmp_path, monkeypatch, plant):
    plant(monkeypatch)
    t = _gathered(tmp_path, 3)
    assert trace.problems(t) == []               # the format's checker cannot see it
    with pytest.raises(AssertionError):                                 # seen failing
        check_every_rank(t, GATHERED_WANT)


def test_a_real_traced_comparison(tmp_path):
    """PyTorch LeNet, 2 steps: scratch mode on 2 devices in one process (its all-reduce
    clocked) and native mode's 2 ranks, each rank's events merged into one file."""
    out = tmp_path / "out"
    proc = run_python(["-m", "benchmarks.compare", "--framework", "pytorch", "--mode",
                       "scratch,native", "--devices", "2", "--dataset", "synthetic",
                       "--steps-per-epoch", "2", "--epochs", "1", "--eval-samples", "64",
                       "--out", str(out), "--no-plots", "--trace", "--peak-gemm-size", "0"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    for mode, pids in (("scratch", {0}), ("native", {0, 1})):
        record = json.loads((out / f"pytorch-{mode}-2dev.json").read_text())
        assert record["status"] == "ok", record["error"]
        assert record["trace"]["file"] == f"pytorch-{mode}-2dev.trace.json"
        assert "perturbed" in record["trace"]["note"]
        t = json.loads((out / record["trace"]["file"]).read_text())
        assert trace.problems(t) == []
        events = [e for e in t["traceEvents"] if e["ph"] == "X"]
        # every process's loop spans, each one: 2 warm-up steps, the epoch and its 2
        # steps, and the evaluation (native: rank 0's alone, the one that evaluates)
        loop = [("warmup", "warm-up step 0"), ("warmup", "warm-up step 1"), ("epoch", "epoch 1"),
                ("step", "step 0"), ("step", "step 1"), ("eval", "evaluation")]
        check_every_rank({**t, "traceEvents": [e for e in t["traceEvents"]
                                               if e.get("cat") != "allreduce"]},
                         {pid: loop if pid == 0 else loop[:-1] for pid in pids})
        allreduce = [e for e in events if e["cat"] == "allreduce"]
        # scratch: warm-up's 2 steps and the epoch's 2, each all-reduce clocked
        assert len(allreduce) == (4 if mode == "scratch" else 0)
        assert ("clocks" in t["otherData"]) == (len(pids) > 1)
    assert not list((out / "logs").glob("*.trace.json"))          # moved beside the record
    assert "traced: times perturbed" in (out / "report.md").read_text()
