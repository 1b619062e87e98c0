"""A history of measurements across commits (benchmarks.report --append-history,
--plot-history, --against-history): a JSON Lines file, one successful run a line, with
the commit that measured it, when, the library versions and the machine; a plot of a
framework's figures over commits or versions; and the regression gate against it."""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import statistics
from pathlib import Path

from common.reports import comparison, export, plots, runs
from common.results.record import schedule_of
from common.results.timing import timing

SCHEMA = 1
# What makes two runs the same measurement: the configuration, the work per epoch and
# the machine kind. A row is gated only against history rows equal in all of these, in
# its settings (a tuned run only against runs with the same settings) and in model
# mode's schedule (a traced run, whose times are perturbed, only against traced ones).
SAME = ("framework", "model", "mode", "execution", "sync_bn", "devices", "nodes", "batch_size",
        "micro_batches", "dataset", "steps_per_epoch_median", "threads", "cores_per_device",
        "cpu_model", "gpu_model")
MACHINE = ("cpu_model", "cpu_count", "cpu_vector_extensions", "kernel_path_env", "gpu_model", "os",
           "python", "cxx")


class HistoryError(ValueError):
    """A history file that cannot be read; names the file and line."""


def run_id(record: dict) -> str:
    """A run's identity: a hash of its record, so that appending a folder twice adds
    nothing, and the gate never takes a folder's own runs as its baseline."""
    text = json.dumps(record, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(timespec="seconds")


def lines_of(records: list[dict], paths: list[Path], now: float) -> list[dict]:
    """The history lines of a folder's successful runs (`paths`: their record files,
    whose modification time dates them)."""
    table = export.rows(records)
    out = []
    for r, path, row in zip(records, paths, table):
        if r["status"] != "ok":
            continue
        env = r.get("env") or {}
        out.append({
            "schema": SCHEMA, "run_id": run_id(r),
            # the commit in the record (the code that measured it); records older than
            # that field get none
            "commit": env.get("commit"), "date": _utc(path.stat().st_mtime),
            "appended": _utc(now), "folder": str(path.parent), "file": path.name,
            "machine": {k: env.get(k) for k in MACHINE}, "versions": env.get("libraries") or {},
            # each repeat's sec/epoch, what the gate's test weighs
            "sec_per_epoch_repeats": timing(r)["runs"], "row": row})
    return out


def read(path: str | os.PathLike) -> list[dict]:
    """Every line of a history file, in the order appended; a missing file is empty."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise HistoryError(f"{path}: cannot be read ({e})") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as e:
            raise HistoryError(f"{path}:{n}: not a JSON line ({e}); fix or delete that line") from None
        row = entry.get("row") if isinstance(entry, dict) else None
        if (not isinstance(row, dict) or entry.get("schema") != SCHEMA
                or not all(k in row for k in ("framework", "mode", "devices"))):
            raise HistoryError(f"{path}:{n}: not a history line of schema {SCHEMA} (a run's "
                               "row with its framework, mode and devices); fix or delete that line")
        out.append(entry)
    return out


def append(path: str | os.PathLike, new: list[dict]) -> tuple[int, int]:
    """Append the lines whose run is not in the file yet; (appended, already there)."""
    path = Path(path)
    known = {e["run_id"] for e in read(path)}
    fresh = [e for e in new if e["run_id"] not in known]
    if fresh:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            for e in fresh:
                f.write(json.dumps(e, sort_keys=True) + "\n")
    return len(fresh), len(new) - len(fresh)


def _same(row: dict) -> tuple:
    # the schedule as the run followed it: none outside model mode, whatever the row's field
    # holds, and GPipe in a model-mode line from before the schedule was recorded
    return (*(row.get(k) for k in SAME), tuple(runs.settings_names(row)), schedule_of(row),
            bool(row.get("trace_file")))


def repeats(entry: dict) -> list[float]:
    """A history line's repeats' sec/epoch; a line appended before they were kept has only
    its median, one figure."""
    return entry.get("sec_per_epoch_repeats") or [entry["row"]["sec_per_epoch_median"]]


def against(records: list[dict], history: list[dict], last: int = 1,
            noise: float = comparison.DEFAULT_NOISE) -> tuple[list[dict], list[dict]]:
    """The gate: each successful run of a folder against the same measurement in the
    history (SAME), excluding the folder's own runs. Before: the repeats of the last
    `last` of those runs together; after: the run's repeats; the verdict is the two-folder
    comparison's (common.reports.comparison.comparison_row). Returns (the rows in the shape of
    compare_folders, the folder's rows that have no baseline)."""
    mine = {run_id(r) for r in records}
    past: dict[tuple, list[dict]] = {}
    for e in history:
        if e["run_id"] not in mine and e["row"].get("status") == "ok" \
                and e["row"].get("sec_per_epoch_median"):
            past.setdefault(_same(e["row"]), []).append(e)
    rows, missing = [], []
    for r, row in zip(records, export.rows(records)):
        if row["status"] != "ok" or not row["sec_per_epoch_median"]:
            continue
        base = past.get(_same(row), [])[-last:]
        if not base:
            missing.append(row)
            continue
        commits = list(dict.fromkeys(str(e.get("commit")) for e in base))
        rows.append({**comparison.comparison_row(row, [x for e in base for x in repeats(e)],
                                           timing(r)["runs"], noise),
                     "baseline": f"{len(base)} run(s): " + ", ".join(commits)})
    return rows, missing


def label(row: dict) -> str:
    return (f"{row['framework']} {row['model']} {runs.mode_label(row)}"
            + (f" {row['execution']}" if row.get("execution") else "") + f" x{row['devices']}")


def plot(history: list[dict], out: Path, frameworks: list[str] | None = None,
         by: str = "commit") -> Path:
    """sec/epoch (median) and test accuracy of each configuration over the history's
    commits (in the order appended) or over the framework's versions; one colour per
    framework, the median where one commit or version has several runs."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [e for e in history if e["row"].get("status") == "ok"
               and (not frameworks or e["row"]["framework"] in frameworks)]
    if not entries:
        raise HistoryError("no successful run in the history" + (
            f" of {', '.join(frameworks)}" if frameworks else ""))
    if by == "version" and len({e["row"]["framework"] for e in entries}) > 1:
        raise HistoryError("versions are a framework's own: plot one framework by version "
                           "(--framework NAME)")
    x_of = (lambda e: e.get("commit") or "no commit") if by == "commit" else \
        (lambda e: e["row"].get("framework_version") or "no version")
    xs = list(dict.fromkeys(x_of(e) for e in entries))
    series: dict[str, dict[str, dict[str, list]]] = {}
    style = {}                     # the report's: a colour per framework, a dash per mode
    for e in entries:
        name = label(e["row"])
        style.setdefault(name, plots.style(e["row"]))
        points = series.setdefault(name, {}).setdefault(x_of(e), {"sec": [], "acc": []})
        points["sec"].append(e["row"].get("sec_per_epoch_median"))
        points["acc"].append(e["row"].get("test_accuracy"))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(7, 0.6 * len(xs)), 7), sharex=True)
    for name, by_x in series.items():
        for ax, key in ((top, "sec"), (bottom, "acc")):
            pts = [(xs.index(x), statistics.median(v)) for x, p in by_x.items()
                   if (v := [y for y in p[key] if y is not None])]
            if pts:
                ax.plot(*zip(*sorted(pts)), label=name if ax is top else None,
                        **{**style[name], "marker": "o"})
    top.set_ylabel("sec/epoch (median)")
    top.set_title("Over the history: sec/epoch (lower is better) and test accuracy")
    top.legend(fontsize=6, ncol=2)
    bottom.set_ylabel("test accuracy")
    bottom.set_xticks(range(len(xs)), xs, rotation=45, ha="right", fontsize=7)
    bottom.set_xlabel("commit" if by == "commit" else "framework version")
    return plots.save_figure(plt, fig, out)
