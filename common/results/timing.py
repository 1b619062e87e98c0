"""A record's time, defined once: sec/epoch (the median over the repeats of each repeat's
median epoch, with its spread), and the time of one training step, which every page and
command reads from here."""
from __future__ import annotations

import statistics

from common.results.record import ok_repeats


def _median(xs):
    return statistics.median(xs) if xs else None


# A row whose repeats spread by more than this, (max - min) / median of their
# sec/epoch, is marked noisy: runs of one configuration on a quiet machine agree to
# a few per cent; on these shared machines they move by 10-40 %.
NOISE_THRESHOLD = 0.10


def repeat_figures(record: dict) -> list[dict]:
    """The successful repeats of a record (benchmarks.compare --repeat) that timed
    an epoch."""
    return [r for r in ok_repeats(record) if r.get("sec_per_epoch")]


def timing(record: dict) -> dict:
    """sec/epoch of a configuration: the median over its repeats of each repeat's median
    epoch time; samples/s from that same figure; spread = (max - min) / median of the
    repeats' figures (None with one repeat); noisy when the spread > NOISE_THRESHOLD."""
    reps = repeat_figures(record)
    runs = [_median(r["sec_per_epoch"]) for r in reps]
    sec = _median(runs)
    steps = (reps[0].get("steps_per_epoch") or [None])[0] if reps else None
    samples = (steps * record["batch_size"] / sec if (sec and steps and record.get("batch_size"))
               else (reps[0].get("samples_per_sec") if reps else None))
    spread = (max(runs) - min(runs)) / sec if len(runs) > 1 and sec else None
    return {"sec": sec, "samples": samples, "spread": spread, "runs": runs,
            "noisy": spread is not None and spread > NOISE_THRESHOLD}


def step_sec(record: dict) -> float | None:
    """A record's time per training step: its sec/epoch over its first epoch's steps."""
    sec = timing(record)["sec"]
    steps = (record.get("steps_per_epoch") or [None])[0]
    return sec / steps if sec and steps else None


def last_step_sec(record: dict) -> float | None:
    """The time per step of a record's last epoch alone: for runs whose first epochs pay
    every shape's kernel warm-up (benchmarks.pipeline's micro-batches), where the median
    epoch would count it."""
    if record.get("status") != "ok" or not record.get("sec_per_epoch"):
        return None
    return record["sec_per_epoch"][-1] / record["steps_per_epoch"][-1]
