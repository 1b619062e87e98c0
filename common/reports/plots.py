"""The figures of a compare results folder (throughput, the first step losses, learning
curves, scaling) and of its model-mode runs (each pipeline's schedule as measured), with
the colour and line style every figure gives a framework and a mode."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from common.facts.registry import NAMES
from common.reports.runs import ideal_speedup, mode_label, mode_of, row_label, summarize
from common.results.record import model_of, schedule_of


def colour(framework: str):
    """A framework's colour in every figure (fixed by its place in the registry)."""
    import matplotlib
    i = NAMES.index(framework) if framework in NAMES else len(NAMES)
    return matplotlib.colormaps["tab10"](i % 10)


def style(r: dict) -> dict:
    return dict(color=colour(r["framework"]), lw=1.2, ls="-" if mode_of(r).by_hand else "--",
                marker="o" if r["devices"] > 1 else ".")


# A figure's row, one bar's label or one legend entry of 7-point text with room between:
# figures grow by this much a row, so labels never touch whatever the number of runs.
ROW_INCHES = 0.2


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _figure(plt, rows: int, width: float, height: float, **grid):
    """A figure and its axes, at least tall enough for `rows` rows; constrained layout keeps
    long labels and a legend outside the axes within the figure."""
    return plt.subplots(figsize=(width, max(height, 1 + ROW_INCHES * rows)), layout="constrained",
                        **grid)


def _legend(fig, ax):
    """The runs' legend right of the plots, one entry a line: inside the axes, the default
    run's 13 entries covered the curves."""
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize=7)


def figures(records: list[dict]) -> dict:
    """The figures make compare draws, by file name: throughput bars, the first step losses,
    learning curves (more than one epoch) and scaling (several device counts); one colour
    per framework, runs grouped by framework."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    order = {n: i for i, n in enumerate(NAMES)}
    ok = sorted([r for r in records if r["status"] == "ok"],
                key=lambda r: (model_of(r), order.get(r["framework"], 99),
                               not mode_of(r).by_hand, bool(r.get("sync_bn")), r["devices"]))
    if not ok:
        return {}
    figs = {}
    rows = summarize(ok)
    labels = [row_label(r) for r in ok]
    # horizontal bars: each run's whole label on a line of its own (under vertical bars,
    # the default run's labels ran into each other)
    fig, ax = _figure(plt, len(ok), 8, 3)
    bars = ax.barh(range(len(ok)), [row["samples/s"] or 0 for row in rows],
                   color=[colour(r["framework"]) for r in ok], edgecolor="black", linewidth=0.5)
    for bar, r in zip(bars, ok):
        if not mode_of(r).by_hand:
            bar.set_hatch("//")
    for i, row in enumerate(rows):                 # the repeats' range, when there are repeats
        if len(row["runs"]) > 1:
            images = row["samples/s"] * row["sec/epoch"]
            ax.plot([images / max(row["runs"]), images / min(row["runs"])], [i, i], color="black")
    ax.set_yticks(range(len(ok)), labels, fontsize=7)
    ax.set_ylim(len(ok) - 0.5, -0.5)               # the first run on top, as in the table
    ax.set_xlabel("training samples / s")
    # over the figure, not the axes: long labels narrow the axes, and a title over them ran out
    fig.suptitle("Throughput (longer is better)\nhatched: the framework's own (native) mode; "
                 "black line: the repeats' range", fontsize=9)
    figs["throughput.png"] = fig

    n = min(len(r["step_losses"]) for r in ok)
    if n:
        losses = np.array([r["step_losses"][:n] for r in ok])
        median = np.median(losses, axis=0)
        fig, (top, bottom) = _figure(plt, len(ok), 11, 6, nrows=2, sharex=True)
        for r, label, row in zip(ok, labels, losses):
            top.plot(row, label=label, **{**style(r), "marker": None})
            bottom.plot(row - median, **{**style(r), "marker": None})
        top.set_ylabel("loss (batch mean)")
        top.set_title("First steps, same weights and batches: the frameworks should agree")
        bottom.set_ylabel("minus the median of all runs")
        bottom.set_xlabel("step")
        _legend(fig, top)
        figs["step_losses.png"] = fig

    if max(len(r.get("train_loss") or []) for r in ok) > 1:
        fig, (acc, loss) = _figure(plt, len(ok), 14, 4, ncols=2)
        for r, label in zip(ok, labels):
            accuracy = r.get("test_accuracy_per_epoch") or []
            acc.plot(range(1, len(accuracy) + 1), accuracy, label=label, **style(r))
            loss.plot(range(1, len(r["train_loss"]) + 1), r["train_loss"], **style(r))
        acc.set_title("Test accuracy after each epoch")
        acc.set_ylim(0, 1)
        loss.set_title("Train loss, mean over each epoch")
        for a in (acc, loss):
            a.set_xlabel("epoch")
            a.xaxis.set_major_locator(MaxNLocator(integer=True))
        _legend(fig, acc)
        figs["learning_curves.png"] = fig

    counts = sorted({r["devices"] for r in ok})
    if len(counts) > 1:
        def curve(r):
            return r["framework"], model_of(r), mode_label(r), r.get("execution")
        lines: dict[tuple, list] = {}
        for r, row in zip(ok, rows):
            if row["speed-up"]:
                lines.setdefault(curve(r), []).append((r["devices"], row["speed-up"]))
        # a run on one device count only is no scaling: its line would only crowd the legend
        lines = {key: pts for key, pts in lines.items() if len(pts) > 1 or pts[0][0] > 1}
        fig, ax = _figure(plt, len(lines) + 1, 9, 4)
        for key, pts in lines.items():
            first = next(r for r in ok if curve(r) == key)
            ax.plot(*zip(*pts), label=" ".join(str(k) for k in key if k not in ("lenet", None)),
                    **style({**first, "devices": 2}))
        own = all(ideal_speedup(r) == r["devices"] for r in ok)
        ax.plot(counts, [c if own else 1 for c in counts], color="grey", lw=3, alpha=0.5,
                label="ideal (devices with their own hardware: k)" if own
                else "ideal (CPU cores shared: 1)")
        ax.set_xticks(counts)
        ax.set_xlabel("devices")
        ax.set_ylabel("speed-up against 1 device")
        ax.set_title("Scaling")
        _legend(fig, ax)
        figs["scaling.png"] = fig
    return figs


def plots(records: list[dict], out_dir: Path) -> list[Path]:
    """figures() and the model-mode schedules, written into out_dir. Returns the files
    written."""
    plt = _pyplot()
    return ([save_figure(plt, fig, out_dir / name) for name, fig in figures(records).items()]
            + schedule_plots(records, out_dir))


def _fmt2(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def step_bubble(spans: dict) -> float | None:
    """The idle share of the step the spans record: 1 - the stages' busy seconds
    (forwards, backwards, SGD) / (stages x the step's wall time)."""
    if not spans or not spans.get("wall"):
        return None
    busy = sum(x[5] - x[4] for x in spans["spans"] if x[2] != "handover")
    return 1 - busy / (len(spans["lanes"]) * spans["wall"])


def schedule_plots(records: list[dict], out_dir: Path) -> list[Path]:
    """The pipeline's schedule as measured: for each framework, model and stage count, a
    panel per model-mode record with spans (its last step), stages x time, each
    micro-batch a colour, forwards solid, backwards hatched, hand-overs thin and grey,
    SGD black; the panels share the time axis. Returns the files written."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("status") == "ok" and r.get("pipeline_spans"):
            groups.setdefault((r["framework"], model_of(r), r["devices"]), []).append(r)
    written = []
    colours = plt.get_cmap("tab10")
    for (framework, model, k), rs in groups.items():
        rs = sorted(rs, key=lambda r: (schedule_of(r), r.get("micro_batches") or 1))
        longest = max(r["pipeline_spans"]["wall"] or 0 for r in rs) * 1e3
        fig, axes = plt.subplots(len(rs), 1, figsize=(10, 0.5 + (0.45 * k + 0.6) * len(rs)),
                                 sharex=True, squeeze=False)
        for ax, r in zip(axes[:, 0], rs):
            spans = r["pipeline_spans"]
            for lane, name, cat, m, t0, t1 in spans["spans"]:
                t0, t1 = t0 * 1e3, t1 * 1e3
                if cat in ("forward", "backward"):
                    ax.barh(lane, t1 - t0, left=t0, height=0.8, color=colours(m % 10),
                            hatch="///" if cat == "backward" else None, edgecolor="black",
                            linewidth=0.3)
                    if t1 - t0 > longest / 60:
                        ax.text((t0 + t1) / 2, lane, name, ha="center", va="center", fontsize=6,
                                bbox={"facecolor": "white", "alpha": 0.7, "pad": 0.5, "linewidth": 0})
                else:
                    ax.barh(lane + 0.3 if cat == "handover" else lane, t1 - t0, left=t0,
                            height=0.2 if cat == "handover" else 0.8,
                            color="grey" if cat == "handover" else "black")
            ax.set_yticks(range(len(spans["lanes"])), spans["lanes"], fontsize=7)
            ax.set_ylim(len(spans["lanes"]) - 0.5, -0.5)       # stage 0 on top
            held = r.get("stage_peak_micro_batches")
            ax.set_title(f"{schedule_of(r)}, M = {r.get('micro_batches')}, "
                         f"{r.get('processes')} process(es): step {(spans['wall'] or 0) * 1e3:.1f} ms "
                         f"(step {spans['step']}), bubble {_fmt2(step_bubble(spans))} in this "
                         f"step ({_fmt2(r.get('bubble'))} median), formula "
                         f"{_fmt2(r.get('bubble_gpipe'))}; "
                         f"micro-batches held per stage {held}", fontsize=8)
        axes[-1, 0].set_xlabel("ms since the step's start (the device synchronised around each span)")
        axes[0, 0].legend(handles=[Patch(facecolor="white", edgecolor="black", label="forward"),
                                   Patch(facecolor="white", edgecolor="black", hatch="///",
                                         label="backward"),
                                   Patch(color="grey", label="hand-over"), Patch(color="black", label="SGD")],
                          fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1),
                          title="colour: micro-batch", title_fontsize=6)
        fig.suptitle(f"{framework} {model}, {k} stages: the last step's schedule as measured",
                     fontsize=9)
        written.append(save_figure(plt, fig, out_dir / f"schedule-{model}-{framework}-{k}stages.png"))
    return written


def save_figure(plt, fig, path: Path) -> Path:
    if fig.get_layout_engine() is None:        # a constrained figure is laid out already
        fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
