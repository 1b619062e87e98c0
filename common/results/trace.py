"""The timeline of a traced run (compare --trace): Chrome's Trace Event Format, one
file per run beside its record, that Perfetto (ui.perfetto.dev) and chrome://tracing
open. Complete events ("ph": "X", microseconds) for the spans, metadata events ("ph":
"M") naming each process (a rank, pid = rank) and lane (a thread id).

A span is a dict {"lane", "name", "cat", "start", "end", ...}: perf_counter seconds
of the process that measured it, any other key going to the event's args. The epoch
loop (common/core/loop.py) measures the warm-up, epochs, steps and evaluation; a
trainer shows its own as `trainer.spans` (scratch mode's all-reduce, model mode's
stages). The suite measures every span itself rather than asking a framework's
profiler (torch.profiler's export_chrome_trace, TensorFlow's and JAX's profilers):
only some frameworks have one, each names and cuts its events its own way, so one
format for every framework is the only one whose spans can be set side by side."""
from __future__ import annotations

import math
import os

from common.results.record import read_rank_parts, write_atomic, write_rank_part

SPAN_KEYS = ("lane", "name", "cat", "start", "end")
# what a traced record and trace file say of their times
NOTE = ("--trace synchronises the device after every training step (and around scratch "
        "mode's all-reduce), so a traced run's times are perturbed: compare untraced runs")
ALIGNMENT = ("each process clocks its own spans; they are aligned on a common mark, the "
             "start of each process's first timed epoch (the warm-up's last collective "
             "step brings the processes together just before it), so spans of different "
             "processes compare to within their skew at that mark")


class TraceError(ValueError):
    """A timeline that breaks the format or its own invariants; says where."""


def process_events(spans: list[dict], origin: float, pid: int, process: str) -> list[dict]:
    """One process's spans as events: ts in microseconds from `origin` (its common mark),
    a thread id per lane in order of first appearance, and the names of both."""
    lanes = {lane: tid for tid, lane in enumerate(dict.fromkeys(s["lane"] for s in spans))}
    events = [_meta("process_name", pid, 0, name=process),
              _meta("process_sort_index", pid, 0, sort_index=pid)]
    for lane, tid in lanes.items():
        events += [_meta("thread_name", pid, tid, name=lane),
                   _meta("thread_sort_index", pid, tid, sort_index=tid)]
    for s in sorted(spans, key=lambda s: (s["start"], -s["end"])):
        ts = round((s["start"] - origin) * 1e6, 3)
        events.append({"name": s["name"], "cat": s["cat"], "ph": "X", "ts": ts,
                       "dur": round(round((s["end"] - origin) * 1e6, 3) - ts, 3), "pid": pid,
                       "tid": lanes[s["lane"]],
                       "args": {k: v for k, v in s.items() if k not in SPAN_KEYS}})
    return events


def _meta(kind: str, pid: int, tid: int, **args) -> dict:
    return {"name": kind, "cat": "__metadata", "ph": "M", "ts": 0, "pid": pid, "tid": tid,
            "args": args}


def merge(parts: list[list[dict]]) -> dict:
    """One trace of every process's events, shifted alike so that the earliest span
    starts at 0 (the warm-up comes before the common mark)."""
    events = [e for part in parts for e in part]
    first = min((e["ts"] for e in events if e["ph"] == "X"), default=0.0)
    for e in events:
        if e["ph"] == "X":
            e["ts"] = round(e["ts"] - first, 3)
    notes = {"note": NOTE}
    if len({e["pid"] for e in events}) > 1:
        notes["clocks"] = ALIGNMENT
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": notes}


# How far two spans of one lane may seem to overlap from rounding alone (microseconds).
SLACK_US = 0.01
REQUIRED = {"X": ("name", "cat", "ph", "ts", "dur", "pid", "tid", "args"),
            "M": ("name", "ph", "pid", "tid", "args")}
METADATA = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
            "thread_sort_index": "sort_index"}


def problems(trace) -> list[str]:
    """What is wrong with a trace, [] if nothing: the format (every event's fields,
    finite times, durations >= 0, every process and lane named) and the timeline's own
    rule, that the spans of one lane follow one another or one holds the other
    (a step inside its epoch), and spans of one category never overlap."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["not a JSON object with a traceEvents list"]
    found = [] if trace.get("displayTimeUnit") in ("ms", "ns") else ["displayTimeUnit is not ms or ns"]
    named, lanes = set(), {}
    for i, e in enumerate(trace["traceEvents"]):
        ph = e.get("ph") if isinstance(e, dict) else None
        missing = [k for k in REQUIRED.get(ph, ()) if k not in e]
        if ph not in REQUIRED or missing:
            found.append(f"event {i} ({e!r:.80}): " + (f"no {', '.join(missing)}" if missing
                                                       else "ph is not X or M"))
            continue
        if ph == "M":
            if not isinstance(e["args"], dict) or METADATA.get(e["name"]) not in e["args"]:
                found.append(f"event {i}: metadata {e['name']!r} without its args")
            elif e["name"] in ("process_name", "thread_name"):
                named.add((e["pid"],) if e["name"] == "process_name" else (e["pid"], e["tid"]))
            continue
        if not all(isinstance(e[k], (int, float)) and math.isfinite(e[k]) for k in ("ts", "dur")):
            found.append(f"event {i} ({e['name']}): ts or dur is not a finite number")
        elif e["dur"] < 0 or e["ts"] < 0:
            found.append(f"event {i} ({e['name']}): negative {'dur' if e['dur'] < 0 else 'ts'}")
        else:
            lanes.setdefault((e["pid"], e["tid"]), []).append(e)
    for pid, tid in lanes:
        for key, what in (((pid,), f"process {pid}"), ((pid, tid), f"lane {tid} of process {pid}")):
            if key not in named:
                found.append(f"{what} has no name (metadata)")
                named.add(key)
    for (pid, tid), events in lanes.items():
        found += _lane_problems(events, f"process {pid}, lane {tid}")
    return found


def _lane_problems(events: list[dict], where: str) -> list[str]:
    found, open_ = [], []              # the spans that hold the current one, outermost first
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while open_ and e["ts"] >= open_[-1]["ts"] + open_[-1]["dur"] - SLACK_US:
            open_.pop()
        if open_:
            outer = open_[-1]
            if e["ts"] + e["dur"] > outer["ts"] + outer["dur"] + SLACK_US:
                found.append(f"{where}: {e['name']!r} at {e['ts']} us overlaps the end of "
                             f"{outer['name']!r}")
            clash = next((o for o in open_ if o["cat"] == e["cat"]), None)
            if clash is not None:
                found.append(f"{where}: {e['name']!r} at {e['ts']} us overlaps "
                             f"{clash['name']!r} of the same category ({e['cat']})")
        open_.append(e)
    return found


def write(path: str | os.PathLike, trace: dict) -> None:
    """Check the trace, then write it atomically; a broken one raises TraceError."""
    found = problems(trace)
    if found:
        raise TraceError(f"the timeline of this run is broken ({len(found)} problems): "
                         f"{found[0]}")
    write_atomic(path, trace)


def write_part(folder: str | os.PathLike, rank: int, events: list[dict]) -> None:
    """One rank's events, for the process that started the ranks to merge."""
    write_rank_part(folder, "trace", rank, events)


def read_parts(folder: str | os.PathLike) -> list[list[dict]]:
    """Every rank's events that write_part left in `folder`, in rank order."""
    return read_rank_parts(folder, "trace")
