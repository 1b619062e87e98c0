"""Batch size against time to accuracy: `python -m benchmarks.batch_sweep`.

The chapters' trade-off: a larger batch runs an epoch faster (fewer, larger steps)
but needs more epochs to reach the same accuracy. For each batch size this runs
benchmarks.compare (its own process, records and report in DIR/b<batch>) with the
learning rate scaled linearly (lr x batch / base batch, the usual rule) and
--target-accuracy, then writes DIR/sweep.md and DIR/sweep.png: per batch size,
seconds per epoch, epochs and training seconds to the target accuracy, and the
accuracy reached. Default: LeNet, PyTorch scratch, batches 128, 256, 512, target 0.7,
at most 6 epochs each (measured on 2 CPU cores: about 5 minutes)."""
from __future__ import annotations

import argparse

import subprocess
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from common.facts import registry
from common.core.modes import MODES
from common.reports.plots import colour, save_figure
from common.reports.runs import machine_lines, render_markdown
from common.results.timing import timing
from common.results.record import RecordError, load_records

from .cli import (Parser, UsageError, fraction, int_list, names, non_negative, positive,
                  positive_float, results_dir)

ROOT = Path(__file__).resolve().parent.parent


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m benchmarks.batch_sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", default="pytorch", help="a comma-separated list, or all")
    p.add_argument("--mode", default="scratch", help="a comma-separated list, or all")
    p.add_argument("--model", default="lenet")
    # the chapter's weights by default: from them the time to a target is the trade-off the
    # chapters show (more, smaller steps against fewer, larger ones); from Glorot's every
    # batch size here reaches 0.7 in its first epoch (docs/results/cpu-2core-default.md)
    p.add_argument("--init", default="chapter", choices=("chapter", "glorot"),
                   help="how the weights start (compare's --init)")
    p.add_argument("--batch-sizes", default="128,256,512",
                   type=int_list("--batch-sizes", "sizes like 128,256,512", "must be 1 or more"))
    p.add_argument("--lr", type=positive_float, default=0.2, help="the learning rate at --base-batch")
    p.add_argument("--base-batch", type=positive, default=256)
    p.add_argument("--target-accuracy", type=fraction, default=0.7)
    p.add_argument("--epochs", type=positive, default=6, help="the most epochs each run gets")
    p.add_argument("--dataset", default="fashion-mnist", choices=("fashion-mnist", "synthetic"))
    p.add_argument("--steps-per-epoch", type=positive, default=None)
    p.add_argument("--out", default=None, help="results folder (default: results/sweep-<time>)")
    p.add_argument("--peak-gemm-size", type=non_negative, default=None, metavar="N",
                   help="passed on to each compare run (its CPU peak's product; 0: not measured)")
    return p


def main(argv=None) -> int:
    p = build_parser()
    try:
        args = p.parse_args(argv)
        frameworks = names(args.framework, registry.NAMES, "framework")
        modes = names(args.mode, MODES, "mode")
    except UsageError as e:
        print(f"batch_sweep: error: {e}", file=sys.stderr)
        return 2
    out = results_dir(args.out, "sweep-")
    code = 0
    for b in args.batch_sizes:
        lr = args.lr * b / args.base_batch
        cmd = [sys.executable, "-m", "benchmarks.compare", "--framework", ",".join(frameworks),
               "--mode", ",".join(modes), "--model", args.model, "--init", args.init,
               "--batch-size", str(b),
               "--lr", f"{lr:g}", "--epochs", str(args.epochs), "--target-accuracy",
               str(args.target_accuracy), "--dataset", args.dataset, "--devices", "1",
               "--no-plots", "--out", str(out / f"b{b}")]
        if args.steps_per_epoch:
            cmd += ["--steps-per-epoch", str(args.steps_per_epoch)]
        if args.peak_gemm_size is not None:
            cmd += ["--peak-gemm-size", str(args.peak_gemm_size)]
        print(f"batch {b}, lr {lr:g}:", " ".join(cmd[1:]), flush=True)
        done = subprocess.run(cmd, cwd=ROOT)
        if done.returncode == 2:
            return 2                    # compare said why, in one line
        if done.returncode in (130, 143):
            return done.returncode
        code = max(code, done.returncode)
    records = []
    for b in args.batch_sizes:
        try:
            records += load_records(out / f"b{b}")
        except (RecordError, OSError) as e:
            print(f"batch_sweep: {e}", file=sys.stderr)
            code = 1
    write_sweep(out, records, args.target_accuracy, " ".join(["python -m benchmarks.batch_sweep",
                                                             *(argv or sys.argv[1:])]))
    return code


def sweep_rows(records: list[dict]) -> list[dict]:
    rows = []
    for r in sorted(records, key=lambda r: (r["framework"], r["mode"], r["batch_size"])):
        if r["status"] != "ok":
            rows.append({"framework": r["framework"], "mode": r["mode"], "batch": r["batch_size"],
                         "lr": r["lr"], "status": r["status"]})
            continue
        rows.append({"framework": r["framework"], "mode": r["mode"], "batch": r["batch_size"],
                     "lr": r["lr"], "status": "ok", "sec/epoch": timing(r)["sec"],
                     "epochs to A": r.get("epochs_to_target"), "sec to A": r.get("sec_to_target"),
                     "final acc": r.get("test_accuracy")})
    return rows


def write_sweep(out: Path, records: list[dict], target: float, command: str) -> None:
    rows = sweep_rows(records)
    columns = ("framework", "mode", "batch", "lr", "status", "sec/epoch", "epochs to A", "sec to A",
               "final acc")

    def fmt(v):
        return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)

    def render(markdown):
        t = Table(box=box.MARKDOWN if markdown else box.SIMPLE_HEAD)
        for c in columns:
            t.add_column(c.replace("A", f"{target:g}"), justify="left" if c in ("framework", "mode", "status") else "right")
        for row in rows:
            t.add_row(*(fmt(row.get(c)) for c in columns))
        return t
    Console(width=None if sys.stdout.isatty() else 140).print(render(False))
    (out / "sweep.md").write_text("\n".join([
        f"# Batch size against time to test accuracy {target:g}", "", f"Command: `{command}`", "",
        *machine_lines(records), "", render_markdown(render(True)), "",
        "- lr grows linearly with the batch. sec/epoch: training only, warm-up excluded. "
        f"epochs/sec to {target:g}: to the end of the first epoch whose test accuracy reached it "
        "(evaluation excluded); '-' where it was not reached within the epochs given.", ""]))
    ok = [r for r in rows if r["status"] == "ok"]
    if ok:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        for key in dict.fromkeys((r["framework"], r["mode"]) for r in ok):
            pts = [r for r in ok if (r["framework"], r["mode"]) == key]
            style = dict(color=colour(key[0]), marker="o", label=" ".join(key))
            left.plot([r["batch"] for r in pts], [r["sec/epoch"] for r in pts], **style)
            reached = [r for r in pts if r["sec to A"] is not None]
            right.plot([r["batch"] for r in reached], [r["sec to A"] for r in reached], **style)
        for ax, title in ((left, "seconds per epoch"), (right, f"seconds to test accuracy {target:g}")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch size (lr scaled with it)")
            ax.set_title(title)
        left.legend(fontsize=7)
        save_figure(plt, fig, out / "sweep.png")
    print(f"written: {out / 'sweep.md'}")


if __name__ == "__main__":
    sys.exit(main())
