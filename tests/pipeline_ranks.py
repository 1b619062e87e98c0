"""Model mode with a process per stage (PyTorch and Paddle on a CPU: the send/recv
path), run without the worker so that every parameter comes back, not only the
record's fingerprint:

    python -m tests.pipeline_ranks FRAMEWORK OUT_DIR

Two ranks (common.launch.launcher), stage r in rank r, run LeNet's 2-stage step from
the conformance checks' weights and batches (M = 4) once per entry of RUNS: GPipe,
1F1B, and 1F1B with a bug of tests/test_pipeline.py's PLANTED_1F1B planted in both
ranks. Rank r writes OUT_DIR/rank{r}.npz, its stage's final parameters per run
("RUN/INDEX", INDEX in the model's PARAM_NAMES); rank 0 also OUT_DIR/runs.json, per run
the step losses and each stage's most tapes alive at once (both ranks', gathered).
tests/test_conformance.py compares them. One start-up of the framework's ranks for
every run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from common import models
from common.core.pipeline import PipelineTrainer
from common.facts import registry
from common.launch import launcher
from tests.conformance import (CHECK_LR, CHECK_STEPS, ONE_F_ONE_B, ORACLE_BATCH, _batch,
                               _nontrivial_params)
from tests.test_pipeline import PLANTED_1F1B

# run -> (schedule, the planted bug or None)
RUNS = {"gpipe": ("gpipe", None), "1f1b": ("1f1b", None),
        "1f1b, tape stack": ("1f1b", "tape stack"), "1f1b, tapes kept": ("1f1b", "tapes kept")}
JOIN_TIMEOUT = 120.0


def rank_main(framework: str, out: str) -> None:
    rank = launcher.RankInfo.from_env()
    b = registry.get(framework)
    b.setup(cpu_devices=1, threads=1)
    rank = b.join(rank, JOIN_TIMEOUT) or rank
    try:
        model = models.get("lenet")
        params = _nontrivial_params(model)
        batches = [_batch(ORACLE_BATCH["lenet"], seed=s) for s in range(CHECK_STEPS["lenet"])]
        saved, runs = {}, {}
        for run, (schedule, plant) in RUNS.items():
            undo = PLANTED_1F1B[plant]() if plant else (lambda: None)
            try:
                trainer = PipelineTrainer(b, "lenet", params, model.init_state(),
                                          [b.rank_device(rank)], CHECK_LR,
                                          ONE_F_ONE_B["micro_batches"], rank.rank,
                                          rank.world_size, schedule)
                losses = trainer.losses([trainer.step(X, y) for X, y in batches])
                figures = trainer.figures()        # every rank's, gathered
            finally:
                undo()
            own, _ = b.read_stage(trainer.replicas[rank.rank])
            for i, p in zip(trainer.stages[rank.rank].params, own):
                saved[f"{run}/{i}"] = p
            runs[run] = {"losses": [float(x) for x in losses],
                         "peak": figures["stage_peak_micro_batches"]}
        np.savez(Path(out) / f"rank{rank.rank}.npz", **saved)
        if rank.rank == 0:
            (Path(out) / "runs.json").write_text(json.dumps(runs))
    finally:
        b.leave()


def main(framework: str, out: str) -> int:
    from tests import pipeline_ranks          # rank_main by its module's name, for spawn
    launcher.launch(pipeline_ranks.rank_main, 2, (framework, out), env=launcher.thread_env(1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
