"""benchmarks.predict's page: its tables (the predictions, and each prediction against
what was measured), the summary of how many are within 20 %, predict.md and its plot.
Every figure but the measured columns is a prediction (common/core/perf.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from rich import box
from rich.table import Table

from common.core.perf import BACKWARD_SHARE, LINKS
from common.reports import formats
from common.reports.plots import colour, save_figure
from common.reports.runs import machine_lines, render_markdown


def size_text(n: float) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB"


def within(rows, key="error") -> str:
    errors = np.abs([r[key] for r in rows])
    return (f"{int((errors <= 0.2).sum())} of {len(rows)} within 20 %, median |error| "
            f"{np.median(errors):.0%}")


def summary(checks, t1_checks, t2_checks) -> str:
    parts = []
    if t1_checks:
        parts.append(f"t1 alone (1 device, batch sizes not fitted on): {within(t1_checks)}")
    if t2_checks:
        parts.append(f"t2 alone (all-reduce sizes not fitted on): {within(t2_checks)}")
    if checks:
        parts.append(f"whole step (several devices or nodes): {within(checks)}; "
                     f"with t2 = 0: {within(checks, 'error t2=0')}")
    return ". ".join(parts) + "."


def ms(v):
    return formats.ms(v, ".2f")


def new_table(markdown: bool, title: str, columns: tuple, left: tuple) -> Table:
    """An empty table of these columns (text in `left` left-aligned, figures right):
    markdown for predict.md, else for the terminal under its title."""
    t = Table(box=box.MARKDOWN if markdown else box.SIMPLE_HEAD, title=None if markdown else title)
    for c in columns:
        t.add_column(c, justify="left" if c in left else "right")
    return t


def table(rows: list[dict], markdown: bool) -> Table:
    t = new_table(markdown, "predicted step time (ms) by device count",
                   ("model", "framework", "mode", "link", "batch", "k", "t1 ms", "t2 ms",
                    "step ms", "speed-up", "efficiency", "t1 >= 1.2 t2 from b"),
                   ("model", "framework", "mode", "link"))
    for r in rows:
        t.add_row(r["model"], r["framework"], r["mode"] + (f" {r['execution']}" if r["execution"] else ""),
                  r["link"], str(r["batch"]), str(r["k"]), ms(r["t1"]), ms(r["t2"]),
                  ms(r["step"]), f"{r['speed-up']:.2f}", f"{r['efficiency']:.2f}",
                  "-" if r["rule batch"] is None else str(r["rule batch"]))
    return t


def checks_table(rows: list[dict], markdown: bool) -> Table:
    t = new_table(markdown, "the whole step: predicted against measured",
                   ("model", "framework", "mode", "scaling", "nodes", "k", "batch",
                    "devices run", "t1 ms", "t2 ms", "t2 share", "predicted ms", "measured ms",
                    "error", "error if t2 = 0"),
                   ("model", "framework", "mode", "scaling", "devices run"))
    for r in rows:
        t.add_row(r["model"], r["framework"], r["mode"], r["scaling"], str(r["nodes"]),
                  str(r["k"]), str(r["batch"]), r["devices run"], ms(r["t1"]), ms(r["t2"]),
                  f"{r['share']:.0%}", ms(r["predicted"]), ms(r["measured"]),
                  f"{r['error']:+.0%}", f"{r['error t2=0']:+.0%}")
    return t


def t1_table(rows: list[dict], markdown: bool) -> Table:
    t = new_table(markdown, "t1: one device at batch sizes the fit did not see",
                   ("model", "framework", "mode", "cores", "fitted on", "batch", "predicted ms",
                    "measured ms", "error"), ("model", "framework", "mode", "fitted on"))
    for r in rows:
        t.add_row(r["model"], r["framework"], r["mode"], str(r["cores"] or "-"), r["fitted on"],
                  str(r["batch"]), ms(r["predicted"]), ms(r["measured"]), f"{r['error']:+.0%}")
    return t


def t2_table(rows: list[dict], markdown: bool) -> Table:
    t = new_table(markdown, "t2: all-reduce sizes the link fit did not see (2 devices)",
                   ("framework", "all-reduce", "size", "predicted ms", "measured ms", "error"),
                   ("framework", "all-reduce"))
    for r in rows:
        t.add_row(r["framework"], r["variant"], size_text(r["bytes"]), ms(r["predicted"]),
                  ms(r["measured"]), f"{r['error']:+.0%}")
    return t


def markdown(rows, checks, t1_checks, t2_checks, skipped, records, args, argv, factors) -> str:
    """predict.md: the model in words, the predictions, and each against its measurement."""
    render = render_markdown
    link = (f"link: {args.link} ({LINKS[args.link].source})" if args.link else
            f"link: each framework's all-reduce measured in {args.allreduce}, a ring step's "
            "latency and bandwidth fitted to it"
            + (f" (sizes up to {size_text(args.link_fit_bytes)} only)" if args.link_fit_bytes else ""))
    fit = (f"the single-node 1-device rows at batch {', '.join(map(str, args.fit_batches))} only"
           if args.fit_batches else "every single-node 1-device row")
    lines = ["# Predicted data-parallel scaling", "",
             f"Command: `python -m benchmarks.predict {' '.join(argv or sys.argv[1:])}`", "",
             *machine_lines(records), "",
             f"Model: step(k) = t1 + max(0, t2 - overlap x {BACKWARD_SHARE:.2f} x t1), t1 = one "
             f"device's step at batch/k (a + c x b fitted to {fit}), t2 = a "
             "ring all-reduce of the parameters, (k-1) x 2 x latency + 2(k-1)/k x bytes / "
             f"bandwidth; {link}; overlap {args.overlap}. Every figure in the tables below "
             "but the measured columns is a prediction.", "", render(table(rows, True)), ""]
    if t1_checks or t2_checks or checks:
        lines += ["## Predicted against measured", "", summary(checks, t1_checks, t2_checks), ""]
    if t1_checks:
        lines += ["### t1 alone: one device at batch sizes the fit did not see", "",
                  render(t1_table(t1_checks, True)), ""]
    if t2_checks:
        lines += ["### t2 alone: all-reduces larger than the link was fitted on", "",
                  "Two processes or devices, as `benchmarks.devices --experiment allreduce` "
                  "measured them; predicted: the ring formula with the link fitted to the "
                  "smaller sizes.", "", render(t2_table(t2_checks, True)), ""]
    if checks:
        lines += ["### The whole step: several devices or nodes", "",
                  "Every multi-device row of the folders whose devices had hardware of their own "
                  "(GPUs, --cores-per-device, machines). k = devices x nodes. Devices at once (a "
                  "process each, GPUs): t1 is one device's step at the per-device batch on its "
                  "own cores; in turn (CPU devices of one process, whose operators all run on "
                  "the process's one thread pool): t1 is k such steps, each at the k devices' "
                  "thread count (1-device runs at k x C cores). t2: the all-reduce the mode runs (by "
                  "hand in scratch mode, the framework's own otherwise); t2 share: its part of "
                  "the predicted step; error if t2 = 0: the same model without communication. "
                  "Contention (devices at once on one machine's cores, each that much slower "
                  "than alone): "
                  + (", ".join(f"{f:.2f} at k = {k}" for k, f in sorted(factors.items()))
                     + (" (measured here: a NumPy GEMM and streaming pass, one thread per core, "
                        "k pinned cores at once against one alone, median of 3 rounds)"
                        if args.contention == "measure" else " (given)") if factors else "none")
                  + ".", "", render(checks_table(checks, True)), ""]
    lines += [f"- {s}" for s in skipped]
    lines += ["- t1 >= 1.2 t2 from b: the smallest per-device batch (a power of two) at which "
              "compute exceeds communication by 20 %, the chapters' rule for communication to "
              "hide behind compute.", ""]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    keys = dict.fromkeys((r["model"], r["framework"], r["mode"], r["execution"]) for r in rows)
    for key in keys:
        pts = [r for r in rows if (r["model"], r["framework"], r["mode"], r["execution"]) == key]
        label = " ".join(str(x) for x in key if x)
        style = dict(color=colour(key[1]), marker="o", ls="-" if key[0] == "lenet" else "--")
        left.plot([r["k"] for r in pts], [r["speed-up"] for r in pts], label=label, **style)
        right.plot([r["k"] for r in pts], [r["t1"] * 1e3 for r in pts], **style)
        right.plot([r["k"] for r in pts], [max(r["t2"], 1e-9) * 1e3 for r in pts],
                   **{**style, "marker": "x", "alpha": 0.6})
    ks = sorted({r["k"] for r in rows})
    left.plot(ks, ks, color="grey", lw=3, alpha=0.4, label="ideal")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("devices")
    left.set_yscale("log", base=2)
    left.set_ylabel("predicted speed-up")
    left.legend(fontsize=6)
    right.set_yscale("log")
    right.set_ylabel("ms per step: t1 compute (o), t2 all-reduce (x)")
    save_figure(plt, fig, path)
