"""Model mode's arithmetic, apart from its trainer (common/core/pipeline.py): the model's
units cut into k stages (common.models.stage_cuts), each stage's forwards and backwards
in a schedule's order (GPipe; 1F1B, PipeDream-Flush), that order for stages in one
process (serial_order) or one process each (rank_ops), checked that every input is
ready and that no two stages wait for each other, and the figures the schedules predict:
the bubble, the micro-batches in flight, the bytes between stages. No framework and no
clock here: numbers and orders alone."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from common import models
from common.core.contract import NotApplicable

FLOAT_BYTES = 4


@dataclass(frozen=True)
class Stage:
    index: int
    units: tuple[int, int]           # the model's UNITS lo..hi-1
    names: tuple[str, ...]           # their names
    params: tuple[int, ...]          # indices in the model's PARAM_NAMES
    state: tuple[int, ...]           # indices in its STATE_NAMES
    out_shape: tuple[int, ...]       # output per image, common layout (NCHW)

    def describe(self) -> str:
        return self.names[0] if len(self.names) == 1 else f"{self.names[0]}..{self.names[-1]}"


def stages(model_name: str, k: int) -> list[Stage]:
    """The k stages of a model, cut as common.models.stage_cuts."""
    model = models.get(model_name)
    try:
        cuts = models.stage_cuts(model, k)
    except ValueError as e:
        raise NotApplicable(str(e)) from None
    out = []
    for i, (lo, hi) in enumerate(cuts):
        units = model.UNITS[lo:hi]
        out.append(Stage(i, (lo, hi), tuple(u[0] for u in units),
                         tuple(p for u in units for p in u[1]), tuple(s for u in units for s in u[2]),
                         tuple(units[-1][3])))
    return out


def gpipe_bubble(k: int, micro_batches: int) -> float:
    """GPipe's idle share with k equal stages and M micro-batches: (k-1)/(M+k-1)."""
    return (k - 1) / (micro_batches + k - 1)


SCHEDULES = {"gpipe": "every micro-batch forward, then every one backward in reverse (GPipe)",
             "1f1b": "one forward, one backward (PipeDream-Flush): stage s holds at most "
                     "min(k-s, M) micro-batches' activations"}


def stage_ops(schedule: str, k: int, s: int, M: int) -> list[tuple[str, int]]:
    """Stage s's forwards ("F", m) and backwards ("B", m) of one step, in its order.
    GPipe: F0..F(M-1), then B(M-1)..B0. 1F1B (PipeDream-Flush, Narayanan et al. 2021):
    min(k-s-1, M) warm-up forwards, then one forward and one backward in turn, then the
    backwards left; its backwards run in micro-batch order, so the first is B0."""
    if schedule == "gpipe":
        return [("F", m) for m in range(M)] + [("B", m) for m in reversed(range(M))]
    if schedule != "1f1b":
        raise ValueError(f"unknown schedule {schedule!r}; choose from: {', '.join(SCHEDULES)}")
    warm = min(k - s - 1, M)
    ops = [("F", m) for m in range(warm)]
    for m in range(warm, M):
        ops += [("F", m), ("B", m - warm)]
    return ops + [("B", m) for m in range(M - warm, M)]


def in_flight_predicted(schedule: str, k: int, s: int, M: int) -> int:
    """The formula for the micro-batches whose activations (tapes) stage s holds at its
    peak: every one with GPipe, min(k-s, M) with 1F1B."""
    return M if schedule == "gpipe" else min(k - s, M)


def _needs(k: int, s: int, kind: str, m: int) -> tuple | None:
    """The op whose hand-over (s, kind, m) waits for: a forward, the previous stage's
    forward of m; a backward, the next stage's backward of m (None: nothing)."""
    if kind == "F":
        return (s - 1, "F", m) if s > 0 else None
    return (s + 1, "B", m) if s < k - 1 else None


def serial_order(schedule: str, k: int, M: int) -> list[tuple[int, str, int]]:
    """Every stage's ops as (stage, kind, m) in one order that one process can run: the
    stages simulated in rounds, each doing its next op (stage_ops) in a round when what
    it takes was handed over in an earlier round. Each stage keeps its own order, so the
    numbers are those of the stages running at once."""
    lists = [stage_ops(schedule, k, s, M) for s in range(k)]
    pos, done, order = [0] * k, set(), []
    while len(order) < sum(map(len, lists)):
        ready = [(s, *lists[s][pos[s]]) for s in range(k) if pos[s] < len(lists[s])
                 and _needs(k, s, *lists[s][pos[s]]) in done | {None}]
        if not ready:
            raise RuntimeError(f"{schedule} with {k} stages and {M} micro-batches deadlocks")
        for op in ready:
            pos[op[0]] += 1
        done.update(ready)
        order += ready
    return order


def check_order(order: Sequence[tuple[int, str, int]], schedule: str, k: int, M: int) -> None:
    """Raise ValueError unless `order` runs each stage's ops in its schedule's order
    and every op after the one whose hand-over it takes (a forward after its forward
    at the previous stage, a backward after the next stage's backward of it)."""
    for s in range(k):
        mine = [(kind, m) for t, kind, m in order if t == s]
        if mine != stage_ops(schedule, k, s, M):
            raise ValueError(f"stage {s} runs {mine}, not its {schedule} ops")
    seen = set()
    for op in order:
        need = _needs(k, *op)
        if need is not None and need not in seen:
            raise ValueError(f"stage {op[0]} runs {op[1]}{op[2]} before stage {need[0]}'s "
                             f"{need[1]}{need[2]} handed it over")
        seen.add(tuple(op))


def with_handovers(ops: Sequence[tuple[int, str, int]], k: int,
                   next_stage: Sequence[tuple[str, int]] | None = None) -> list[tuple[int, str, int]]:
    """(stage, kind, m) forwards and backwards with their hand-overs: ("recv act", m)
    before a forward and ("send act", m) after it, ("recv grad", m) before a backward and
    ("send grad", m) after it (none before the first stage or after the last).

    With `next_stage` (the next stage's stage_ops: one stage's ops, run by a process of
    its own), a forward's "send act" goes after the "recv grad" of the backward that
    follows it where the next stage sends that gradient before it takes this activation
    (1F1B's steady state): a send may wait until its peer receives (Paddle's gloo send
    does), and then neither waits for the other (check_rendezvous)."""
    out, held = [], None
    for i, (s, kind, m) in enumerate(ops):
        if kind == "F":
            out += [(s, "recv act", m)] * (s > 0) + [(s, "F", m)]
            after = ops[i + 1] if i + 1 < len(ops) else None
            if (s < k - 1 and next_stage and after and after[1] == "B"
                    and next_stage.index(("B", after[2])) < next_stage.index(("F", m))):
                held = (s, "send act", m)
            elif s < k - 1:
                out.append((s, "send act", m))
        else:
            out += [(s, "recv grad", m)] * (s < k - 1) + [held] * (held is not None)
            out += [(s, "B", m)] + [(s, "send grad", m)] * (s > 0)
            held = None
    return out


def rank_ops(schedule: str, k: int, s: int, M: int) -> list[tuple[int, str, int]]:
    """What the process of stage s runs, in order, where each stage has one."""
    return with_handovers([(s, kind, m) for kind, m in stage_ops(schedule, k, s, M)], k,
                          stage_ops(schedule, k, s + 1, M) if s < k - 1 else None)


def check_rendezvous(lists: Sequence[Sequence[tuple[int, str, int]]]) -> None:
    """Raise ValueError unless the stages' processes, each running its list (rank_ops)
    with sends that wait for their receive, all finish, and every receive gets the
    micro-batch it names (send/recv pair up in order between two ranks, unnamed)."""
    pos, k = [0] * len(lists), len(lists)
    while any(pos[s] < len(lists[s]) for s in range(k)):
        moved = False
        for s in range(k):
            while pos[s] < len(lists[s]) and lists[s][pos[s]][1] in ("F", "B"):
                pos[s], moved = pos[s] + 1, True
            if pos[s] == len(lists[s]) or not lists[s][pos[s]][1].startswith("send"):
                continue
            _, kind, m = lists[s][pos[s]]
            peer = s + 1 if kind == "send act" else s - 1
            theirs = lists[peer][pos[peer]] if pos[peer] < len(lists[peer]) else None
            if theirs is not None and theirs[1] == "recv" + kind[4:]:     # from stage s
                if theirs[2] != m:
                    raise ValueError(f"stage {peer} receives {kind[5:]} {theirs[2]} where "
                                     f"stage {s} sends {kind[5:]} {m}")
                pos[s], pos[peer], moved = pos[s] + 1, pos[peer] + 1, True
        if not moved:
            raise ValueError("the stages' processes wait for each other: " + "; ".join(
                f"stage {s} at {lists[s][pos[s]][1]} {lists[s][pos[s]][2]}"
                for s in range(k) if pos[s] < len(lists[s])))


def bytes_between_stages(stage_list: Sequence[Stage], batch: int) -> list[int]:
    """Bytes sent across each stage boundary per step: the activations forward and
    their gradients back, float32, for the whole batch (all micro-batches)."""
    return [2 * FLOAT_BYTES * batch * int(np.prod(s.out_shape)) for s in stage_list[:-1]]


def activation_bytes_calculated(model_name: str, stage: Stage, rows: int) -> int:
    """A calculation, where the framework does not tell what its tape holds: the stage's
    input and each of its units' outputs, float32, for `rows` images (a lower bound: a
    tape keeps each layer's intermediates too)."""
    model = models.get(model_name)
    lo, hi = stage.units
    shapes = [model.IMAGE_SHAPE if lo == 0 else model.UNITS[lo - 1][3]] + [
        u[3] for u in model.UNITS[lo:hi]]
    return FLOAT_BYTES * rows * sum(int(np.prod(x)) for x in shapes)
