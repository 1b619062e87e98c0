"""Model mode with a process per stage (PyTorch and Paddle on a CPU: the send/recv
path), run without the worker so that every parameter comes back, not only the
record's fingerprint:

    python -m tests.helpers.pipeline_ranks FRAMEWORK OUT_DIR

Two ranks (common.launch.launcher), stage r in rank r, run 2-stage steps from the
conformance checks' weights and batches once per entry of RUNS: LeNet (M = 4, two
steps) with GPipe, 1F1B, and 1F1B with a bug of tests/test_pipeline.py's PLANTED_1F1B or
PLANTED_SPANS planted in both ranks; ResNet-18 (M = 2, one step: the oracle's cost) with
GPipe, 1F1B, and GPipe with a bug of PLANTED_STATE. Rank r writes OUT_DIR/rank{r}.npz,
its stage's final parameters and running statistics per run ("RUN/INDEX" and
"RUN/state/INDEX", INDEX in the model's PARAM_NAMES or STATE_NAMES), and
OUT_DIR/rank{r}.json, its own spans of each run's last step; rank 0 also
OUT_DIR/runs.json, per run the step losses, each stage's most tapes alive at once and
the record's spans (both ranks', gathered), and for ResNet-18 the run's reported
fingerprint (gathered), its loss after the step and how its BatchNorm keeps the
variance. Then this process runs the NumPy oracle for ResNet-18 (OUT_DIR/oracle.npz).
tests/test_conformance.py compares them. One start-up of the framework's ranks for
every run."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from common import models
from common.core import pipeline
from common.core.pipeline import PipelineTrainer
from common.facts import registry
from common.launch import launcher
from tests.helpers.conformance import (CHECK_LR, CHECK_STEPS, MODEL_MICRO_BATCHES, ONE_F_ONE_B,
                               ORACLE_BATCH, _batch, _nontrivial_params, _state_order)
from tests.test_pipeline import PLANTED_1F1B, PLANTED_SPANS
from tests.helpers import oracle_cache


# Planted bugs in what a run with a process per stage reports of ResNet-18's running
# statistics, each planted in every rank (given the backend) and returning its undo.
def plant_statistics_as_started(b):
    """Each stage's running statistics read back as they started, not as updated."""
    read = b.read_stage

    def started(replica):
        params, _ = read(replica)
        init = models.get(replica.model).init_state()
        return params, [init[j] for j in replica.stage.state]
    b.read_stage = started
    return lambda: delattr(b, "read_stage")


def plant_local_state_rows(b):
    """The gathered fingerprint's running statistics written at each stage's own row
    numbers (its index among its stage's statistics) instead of the model's."""
    fingerprint = PipelineTrainer.param_fingerprint

    def local(self):
        whole = self.stages
        self.stages = [dataclasses.replace(s, state=tuple(range(len(s.state)))) for s in whole]
        try:
            return fingerprint(self)
        finally:
            self.stages = whole
    PipelineTrainer.param_fingerprint = local
    return lambda: setattr(PipelineTrainer, "param_fingerprint", fingerprint)


PLANTED_STATE = {"statistics as they started": plant_statistics_as_started,
                 "local state rows": plant_local_state_rows}
PLANTS = {**{n: (lambda b, p=p: p()) for n, p in {**PLANTED_1F1B, **PLANTED_SPANS}.items()},
          **PLANTED_STATE}
# ResNet-18 at the conformance checks' size (its CHECK_MODEL)
RESNET = models.get("resnet18").CHECK_MODEL
# run -> (model, schedule, the planted bug or None)
RUNS = {"gpipe": ("lenet", "gpipe", None), "1f1b": ("lenet", "1f1b", None),
        **{f"1f1b, {p}": ("lenet", "1f1b", p) for p in ("tape stack", "tapes kept",
                                                         *PLANTED_SPANS)},
        "resnet18 gpipe": (RESNET, "gpipe", None), "resnet18 1f1b": (RESNET, "1f1b", None),
        **{f"resnet18, {p}": (RESNET, "gpipe", p) for p in PLANTED_STATE}}
MICRO_BATCHES = {"lenet": ONE_F_ONE_B["micro_batches"], RESNET: MODEL_MICRO_BATCHES[RESNET][0]}
JOIN_TIMEOUT = 120.0


def _run(b, rank, run: str) -> tuple[dict, PipelineTrainer, dict]:
    """One run in this rank: what rank 0 reports of it, the trainer, and this rank's
    stage's final parameters and statistics by their places in the model's lists."""
    name, schedule, plant = RUNS[run]
    model = models.get(name)
    params = _nontrivial_params(model)
    batches = [_batch(ORACLE_BATCH[name], seed=s) for s in range(CHECK_STEPS[name])]
    undo = PLANTS[plant](b) if plant else (lambda: None)
    try:
        trainer = PipelineTrainer(b, name, params, model.init_state(), [b.rank_device(rank)],
                                  CHECK_LR, MICRO_BATCHES[name], rank.rank, rank.world_size,
                                  schedule)
        losses = trainer.losses([trainer.step(X, y) for X, y in batches])
        figures = trainer.figures()        # every rank's, gathered
        report = {"losses": [float(x) for x in losses],
                  "peak": figures["stage_peak_micro_batches"],
                  "spans": figures["pipeline_spans"]}
        if model.STATE_NAMES:              # what a record of the run reports (every rank's)
            X, y = batches[0]
            logits = np.asarray(trainer.logits(X), np.float64)
            report.update(fingerprint=trainer.param_fingerprint(),
                          final_loss=float(model.cross_entropy(logits, y).mean()),
                          unbiased=b.model_ops(name).unbiased_running_var,
                          state_order=_state_order(b, name, schedule))
        own, state = b.read_stage(trainer.replicas[rank.rank])
    finally:
        undo()
    stage = trainer.stages[rank.rank]
    saved = {**{f"{run}/{i}": p for i, p in zip(stage.params, own)},
             **{f"{run}/state/{j}": v for j, v in zip(stage.state, state)}}
    return report, trainer, saved


def rank_main(framework: str, out: str) -> None:
    rank = launcher.RankInfo.from_env()
    b = registry.get(framework)
    b.setup(cpu_devices=1, threads=1)
    rank = b.join(rank, JOIN_TIMEOUT) or rank
    try:
        saved, runs, spans = {}, {}, {}
        for run in RUNS:
            runs[run], trainer, own = _run(b, rank, run)
            saved.update(own)
            spans[run] = [{"lane": x["lane"], "name": x["name"]} for x in trainer.spans]
        np.savez(Path(out) / f"rank{rank.rank}.npz", **saved)
        (Path(out) / f"rank{rank.rank}.json").write_text(json.dumps(spans))
        if rank.rank == 0:
            (Path(out) / "runs.json").write_text(json.dumps(runs))
    finally:
        b.leave()


def oracle(runs: dict) -> dict:
    """ResNet-18's oracle step, micro-batch by micro-batch, for the ranks' BatchNorm (the
    variance it keeps, the order its micro-batches update the statistics): the step
    losses, final parameters and statistics, and the loss after the step (evaluation
    mode, the first batch)."""
    (unbiased, order), = {(r["unbiased"], r["state_order"]) for r in runs.values() if "unbiased" in r}
    model = models.get(RESNET)
    batches = [_batch(ORACLE_BATCH[RESNET], seed=s) for s in range(CHECK_STEPS[RESNET])]
    state = [s.astype(np.float64) for s in model.init_state()]
    losses, params = oracle_cache.sgd_steps(model, _nontrivial_params(model), batches, CHECK_LR,
                                            state=state, shards=MICRO_BATCHES[RESNET],
                                            unbiased_running_var=unbiased, state_order=order)
    X, y = batches[0]
    final = model.cross_entropy(model.forward(params, X, state=[s.copy() for s in state],
                                              training=False), y).mean()
    return {"losses": losses, "final_loss": final, **{f"params/{i}": p for i, p in enumerate(params)},
            **{f"state/{j}": s for j, s in enumerate(state)}}


def main(framework: str, out: str) -> int:
    from tests.helpers import pipeline_ranks          # rank_main by its module's name, for spawn
    launcher.launch(pipeline_ranks.rank_main, 2, (framework, out), env=launcher.thread_env(1))
    # this process is the test's, one BLAS thread (half the CPU time of two here)
    np.savez(Path(out) / "oracle.npz", **oracle(json.loads((Path(out) / "runs.json").read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
