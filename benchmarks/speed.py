"""How close each framework gets to the hardware: `python -m benchmarks.speed DIR`.

DIR is a compare results folder, best one run with every execution and both modes
(python -m benchmarks.compare --execution all --mode scratch,native --repeat 2).
This command measures the machine's float32 GEMM rate once, in a fresh process with
the run's thread count (PyTorch's sgemm where installed, else NumPy's BLAS), turns
it into the compute floor of an epoch (the model's training FLOPs per image x the
images of an epoch / that rate), and writes DIR/speed.md: per framework and mode,
the sec/epoch of each execution, the best one, best over eager, scratch over native
(at the best execution of each) and best over the floor. Nothing else is measured
here: the times are the records'."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from common import models
from common.experiments.gemm import GEMM_SIZE, gemm_rate
from common.facts.registry import EXECUTIONS
from common.reports.runs import machine_lines, render_markdown
from common.results.timing import timing
from common.results.record import RecordError, load_records, model_of

from .cli import Parser, UsageError, positive


def rows(records: list[dict], floor_sec: dict) -> list[dict]:
    """One row per (model, framework, mode) at one device: each execution's sec/epoch."""
    table: dict[tuple, dict] = {}
    for r in records:
        if r["devices"] != 1 or r.get("sync_bn") or r["status"] != "ok":
            continue
        key = (model_of(r), r["framework"], r["mode"])
        table.setdefault(key, {})[r.get("execution") or "?"] = timing(r)["sec"]
    out = []
    for (model, framework, mode), secs in table.items():
        best = min(secs, key=secs.get)
        out.append({"model": model, "framework": framework, "mode": mode, **secs,
                    "best": best, "best sec": secs[best],
                    "best/eager": secs[best] / secs["eager"] if "eager" in secs else None,
                    "best/floor": secs[best] / floor_sec[model] if floor_sec.get(model) else None})
    for row in out:
        other = {r["mode"]: r for r in out if (r["model"], r["framework"]) == (row["model"], row["framework"])}
        if row["mode"] == "scratch" and "native" in other:
            row["scratch/native"] = row["best sec"] / other["native"]["best sec"]
    return out


def _cell(v) -> str:
    return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)


def speed_table(data: list[dict], markdown: bool) -> Table:
    columns = ("model", "framework", "mode", *EXECUTIONS, "best", "best/eager", "scratch/native",
               "best/floor")
    t = Table(box=box.MARKDOWN if markdown else box.SIMPLE_HEAD)
    for c in columns:
        t.add_column(c, justify="left" if c in ("model", "framework", "mode", "best") else "right")
    for row in data:
        t.add_row(*(_cell(row.get(c)) for c in columns))
    return t


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m benchmarks.speed", description=__doc__.split("\n\n")[0])
    p.add_argument("out", metavar="DIR", help="a compare results folder")
    p.add_argument("--threads", type=positive, default=None,
                   help="threads of the GEMM measurement (default: the records' thread count)")
    p.add_argument("--gemm-size", type=positive, default=GEMM_SIZE,
                   help="n of the n x n float32 products that measure the GEMM rate")
    return p


def main(argv=None) -> int:
    p = build_parser()
    try:
        args = p.parse_args(argv)
        folder = Path(args.out)
        if not folder.is_dir():
            raise UsageError(f"{folder} is not a folder; give a compare results folder")
        try:
            records = load_records(folder)
        except RecordError as e:
            raise UsageError(str(e)) from None
        if not any(r["status"] == "ok" and r["devices"] == 1 for r in records):
            raise UsageError(f"{folder} holds no successful 1-device run; run "
                             "python -m benchmarks.compare --execution all there first")
    except UsageError as e:
        print(f"speed: error: {e}", file=sys.stderr)
        return 2
    threads = args.threads or records[0].get("threads") or os.cpu_count() or 1
    gemm = gemm_rate(threads, args.gemm_size)
    floor_sec = {}
    for r in records:
        steps = (r.get("steps_per_epoch") or [None])[0]
        if steps and r.get("batch_size"):
            flops = models.get(model_of(r)).TRAIN_FLOPS_PER_IMAGE * steps * r["batch_size"]
            floor_sec[model_of(r)] = flops / (gemm["gflops"] * 1e9)
    data = rows(records, floor_sec)
    console = Console(width=None if sys.stdout.isatty() else 140)
    console.print(speed_table(data, markdown=False))
    floor_line = (f"Compute floor: {gemm['library']} at {args.gemm_size}x{args.gemm_size}, {threads} threads: "
                  f"{gemm['gflops']:.0f} GFLOP/s, so "
                  + ", ".join(f"{m} {s:.2f} s/epoch ({models.get(m).TRAIN_FLOPS_PER_IMAGE / 1e6:.1f} "
                              "MFLOP per training image)" for m, s in floor_sec.items()) + ".")
    console.print(floor_line, highlight=False)
    (folder / "speed.md").write_text("\n".join([
        "# Speed against the hardware", "", *machine_lines(records), "", floor_line, "",
        render_markdown(speed_table(data, markdown=True)), "",
        "- Each execution's column: the row's sec/epoch (compare's median over repeats, "
        "warm-up and compilation excluded); '-' where the framework lacks it or it did not run.",
        "- best/eager: the best execution over eager (below 1: compiling pays). scratch/native: "
        "scratch mode's best over native mode's best, same framework. best/floor: the best over "
        "the compute floor above (1 would be every FLOP at the large-GEMM rate).", ""]))
    console.print(f"written: {folder / 'speed.md'}", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
