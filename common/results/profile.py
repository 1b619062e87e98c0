"""A profiled step's time by op class, from a framework's own profiler
(benchmarks.profile): one vocabulary of classes for every framework, each framework's
event names mapped to them by a table of rules (frameworks/<fw>/profile.py: data, not
code), and what no op covers, the framework's own time between ops.

How an instant of a profiled window is attributed: on each thread, the outermost event
(the innermost, where the framework's profiler says so: OpProfiler.nesting) that is an op (an event whose rule says CONTAINER, such as a step annotation, a Python
frame or a whole compiled program, is not one: the ops inside it are) is that thread's
op at that instant; the instant's time is split evenly among the threads' ops active at
it, each to its class; an instant with no op on any thread is OUTSIDE. So the classes
and OUTSIDE add up to the window by construction, and an op's children (an allocation
inside a convolution) count as that op. An outermost op that no rule maps is UNMAPPED:
its time is kept under its own name, so that a missing rule shows."""
from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

from common.core.contract import STEP_MARK

# The op classes, in the order the reports show them. A profiler that does not tell a
# convolution's input gradient from its weight gradient maps both to "conv backward".
CLASSES = {
    "conv forward": "a convolution's forward pass (with a fused bias or activation)",
    "conv backward input": "a convolution's gradient with respect to its input",
    "conv backward weight": "a convolution's gradient with respect to its weights (and bias)",
    "conv backward": "a convolution's gradients, where the profiler does not part them",
    "dense forward": "a fully connected layer's matrix product (and bias)",
    "dense backward": "a fully connected layer's gradients",
    "pooling": "max or average pooling, forward and backward",
    "activation": "ReLU and sigmoid, forward and backward",
    "batchnorm": "BatchNorm, forward and backward, with its running statistics",
    "layernorm": "LayerNorm, forward and backward (a transformer's)",
    "attention": "multi-head attention's scores, their softmax and the weighted sum of the "
                 "values, forward and backward (its projections are dense layers)",
    "gelu": "GELU, forward and backward",
    "softmax and loss": "softmax, cross-entropy and their gradient",
    "optimizer update": "the SGD update of the parameters (and zeroing the gradients)",
    "communication": "all-reduce and other collectives, send and receive",
    "copies and layout": "copies, transposes, reshapes, layout and dtype changes, "
                         "host-device transfers",
    "other named ops": "ops that are none of the above: bias and elementwise arithmetic, "
                       "reductions, fills, allocation",
}
OUTSIDE = "outside any op"
UNMAPPED = "unmapped"
# a rule's class for an event that holds ops and is not one itself
CONTAINER = "container"
# More than this share of the op time left unmapped fails the profile's check
MAX_UNMAPPED_SHARE = 0.05
# The profiled window on the profiler's clock against the wall clock's (both around the
# same synchronised steps): a mark that misses the device's work, or a trace that lost
# its start or end, shows as a difference beyond scheduler noise
WINDOW_TOLERANCE = 0.1


class RuleError(ValueError):
    """A rule table names a class outside the vocabulary, or a pattern that is no regex."""


def compile_rules(rules) -> list[tuple[re.Pattern, str]]:
    out = []
    for pattern, cls in rules:
        if cls not in CLASSES and cls != CONTAINER:
            raise RuleError(f"rule {pattern!r} maps to {cls!r}, not an op class of "
                            f"common/results/profile.py (nor {CONTAINER!r})")
        try:
            out.append((re.compile(pattern), cls))
        except re.error as e:
            raise RuleError(f"rule {pattern!r} is not a regular expression: {e}") from None
    return out


def classify(name: str, rules: list[tuple[re.Pattern, str]]) -> str | None:
    """The class of an event's name: the first rule whose pattern it contains, else None."""
    for pattern, cls in rules:
        if pattern.search(name):
            return cls
    return None


MARK_PREFIX = STEP_MARK.format("")


def windows(events: list[dict], count: int) -> list[tuple[float, float]]:
    """The profiled windows' (start, end), from their marks (STEP_MARK) in the trace."""
    marks = {e["name"]: (e["start"], e["end"]) for e in events if e["name"].startswith(MARK_PREFIX)}
    missing = [i for i in range(count) if STEP_MARK.format(i) not in marks]
    if missing:
        raise ValueError(f"the profiler's trace lacks the marks of windows {missing}: "
                         "the events cannot be placed in their steps")
    return [marks[STEP_MARK.format(i)] for i in range(count)]


NESTINGS = ("outermost", "innermost")


def _ops(events: list[dict], rules, lo: float, hi: float, nesting: str = "outermost") -> list[tuple]:
    """Per thread, the op that holds each instant within [lo, hi], as non-overlapping
    pieces (start, end, thread, class or None, name). "outermost": the outermost op
    event (a PyTorch convolution holds its allocations); "innermost": the innermost,
    where a framework runs its next ops inside an asynchronous op's event (XLA's
    completion events), so that the outer event is no op of its own there."""
    if nesting not in NESTINGS:
        raise ValueError(f"nesting {nesting!r} is none of {NESTINGS}")
    by_thread = defaultdict(list)
    for e in events:
        if (e["end"] <= lo or e["start"] >= hi or e["end"] <= e["start"]
                or e["name"].startswith(MARK_PREFIX)):
            continue
        cls = classify(e["name"], rules)
        if cls != CONTAINER:
            by_thread[e["thread"]].append((max(e["start"], lo), min(e["end"], hi), cls, e["name"]))
    out = []
    for thread, evs in by_thread.items():
        evs.sort(key=lambda e: (e[0], -e[1]))
        if nesting == "outermost":
            covered = lo               # the end of this thread's current outermost op
            for start, end, cls, name in evs:
                # an op that starts inside the current one but outlasts it (events that
                # do not nest, as asynchronous ones) counts from where the current one ends
                start = max(start, covered)
                if end > start:
                    out.append((start, end, thread, cls, name))
                    covered = end
            continue
        # innermost: at each instant the active op that started last (the shorter on a tie)
        edges = sorted({x for e in evs for x in e[:2]})
        active: list[int] = []
        nxt = 0
        for a, b in zip(edges, edges[1:]):
            while nxt < len(evs) and evs[nxt][0] <= a:
                active.append(nxt)
                nxt += 1
            active = [k for k in active if evs[k][1] > a]
            if not active:
                continue
            k = max(active, key=lambda k: (evs[k][0], -evs[k][1]))
            start, end, cls, name = evs[k]
            if out and out[-1][2] == thread and out[-1][4] == name and out[-1][1] == a:
                out[-1] = (out[-1][0], b, thread, cls, name)
            else:
                out.append((a, b, thread, cls, name))
    return out


def attribute(events: list[dict], rules, count: int, steps_per_window: int = 1,
              nesting: str = "outermost") -> dict:
    """Time per step (ms) by class over `count` profiled windows of `steps_per_window`
    steps each: {"classes": {class: ms}, OUTSIDE-less; "outside": ms, "unmapped":
    {name: ms}, "window_ms": ms per step of the windows, "op_ms": ms per step in ops,
    "unmapped_share": of the op time}. Unmapped events' time is in "unmapped", not in
    "classes"; classes + unmapped + outside = window_ms."""
    compiled = compile_rules(rules)
    classes = defaultdict(float)
    unmapped = defaultdict(float)
    outside = 0.0
    total = 0.0
    for lo, hi in windows(events, count):
        total += hi - lo
        ops = _ops(events, compiled, lo, hi, nesting)
        # a sweep over the ops' edges: each piece of time split among the ops active in it
        edges = sorted({lo, hi, *(o[0] for o in ops), *(o[1] for o in ops)})
        starts = sorted(range(len(ops)), key=lambda k: ops[k][0])
        active: set[int] = set()
        nxt = 0
        for a, b in zip(edges, edges[1:]):
            while nxt < len(starts) and ops[starts[nxt]][0] <= a:
                active.add(starts[nxt])
                nxt += 1
            active = {k for k in active if ops[k][1] > a}
            if not active:
                outside += b - a
                continue
            share = (b - a) / len(active)
            for k in active:
                _, _, _, cls, name = ops[k]
                if cls is None:
                    unmapped[name] += share
                else:
                    classes[cls] += share
    steps = count * steps_per_window
    per = 1e-3 / steps               # microseconds in all to ms per step
    op = sum(classes.values()) + sum(unmapped.values())
    return {"classes": {c: classes[c] * per for c in CLASSES if c in classes},
            "outside": outside * per,
            "unmapped": {n: v * per for n, v in sorted(unmapped.items(), key=lambda kv: -kv[1])},
            "window_ms": total * per, "op_ms": op * per,
            "unmapped_share": sum(unmapped.values()) / op if op else 0.0}


def check(attribution: dict, wall_ms: float | None = None) -> str | None:
    """Why an attribution cannot be trusted, or None: too much op time unmapped, or a
    window that is not the wall clock's (wall_ms: the same steps' ms per step)."""
    if wall_ms is not None and abs(attribution["window_ms"] - wall_ms) > WINDOW_TOLERANCE * wall_ms + 1:
        return (f"the profiler's window is {attribution['window_ms']:.1f} ms per step, the wall "
                f"clock's {wall_ms:.1f}: its marks do not hold the steps' work")
    share = attribution["unmapped_share"]
    if share > MAX_UNMAPPED_SHARE:
        top = ", ".join(f"{n} ({v:.2f} ms)" for n, v in list(attribution["unmapped"].items())[:5])
        return (f"{share:.1%} of the op time is in events no rule maps (over "
                f"{MAX_UNMAPPED_SHARE:.0%}): {top}; add rules to the framework's profile.py")
    return None


def of_run(result: dict) -> dict:
    """The attribution of a profiled run (common/core/profiling.py's result, its events
    still in it) over its one window, with `why_untrusted` (check's answer)."""
    a = attribute(result["events"], result["rules"], 1, result["profile_steps"],
                  result.get("nesting", "outermost"))
    return {**a, "why_untrusted": check(a, result["profiled_step_ms"])}


def events_path(record_path) -> Path:
    """Where a profiled run's events go, beside its record (its trace path's folder)."""
    p = Path(record_path)
    return p.with_name(p.name.split(".")[0] + ".events.json.gz")


def write_events(path, events: list[dict]) -> None:
    with gzip.open(path, "wt") as f:
        json.dump([[e["name"], e["start"], e["end"], e["thread"]] for e in events], f)


def read_events(path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [{"name": n, "start": s, "end": e, "thread": t} for n, s, e, t in json.load(f)]
