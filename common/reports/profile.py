"""benchmarks.profile's report, rendered from its records alone: per model, each row's
ms per step by op class (frameworks as columns), the profiler's own cost, each class
against this machine's roofline, one line per row naming what makes its gap to the
fastest row, and a stacked-bar plot of every row side by side."""
from __future__ import annotations

from pathlib import Path

from common import models
from common.models import costs
from common.reports.plots import colour
from common.reports.runs import machine_lines
from common.results.profile import CLASSES, OUTSIDE, UNMAPPED

SHOWN = (*CLASSES, UNMAPPED, OUTSIDE)
GAP_CLASSES = 3          # a row's gap line names this many classes at most


def label(r: dict) -> str:
    """'framework [version] mode [+setting...]': a tuned row is labelled so."""
    return (r.get("_label") or f"{r['framework']} {r['mode']}") + "".join(
        f" +{s}" for s in r.get("settings") or ())


def labelled(records: list[dict]) -> list[dict]:
    """The records, each named by its version too where the page holds one framework at
    several versions (the same rows profiled under two releases)."""
    versions: dict[str, set] = {}
    for r in records:
        versions.setdefault(r["framework"], set()).add(r.get("framework_version"))
    return [{**r, "_label": f"{r['framework']} {r.get('framework_version')} {r['mode']}"}
            if len(versions[r["framework"]]) > 1 else r for r in records]


def ok(records: list[dict]) -> list[dict]:
    return [r for r in records if r["status"] == "ok" and r.get("profile")]


def per_class(r: dict) -> dict[str, float]:
    """ms per step of every shown class (0 where the row has none)."""
    p = r["profile"]
    out = {c: p["classes"].get(c, 0.0) for c in CLASSES}
    out[UNMAPPED] = sum(p["unmapped"].values())
    out[OUTSIDE] = p["outside"]
    return out


def fastest(rows: list[dict]) -> dict | None:
    return min(rows, key=lambda r: r["profile"]["window_ms"]) if rows else None


# a profiler that parts a convolution's gradients (TensorFlow) is set against one that
# does not (the others) on their sum
SPLIT = {"conv backward input": "conv backward", "conv backward weight": "conv backward"}


def _coarse(classes: dict) -> dict:
    out: dict = {}
    for c, v in classes.items():
        out[SPLIT.get(c, c)] = out.get(SPLIT.get(c, c), 0.0) + v
    return out


def gap_line(r: dict, best: dict) -> str:
    """'row: +N ms per step against the fastest: +A ms class, ...; the other classes +R
    ms': the classes that make most of the row's gap to the fastest row."""
    if r is best:
        return f"{label(r)}: the fastest row ({r['profile']['window_ms']:.1f} ms per profiled step)"
    mine, theirs = _coarse(per_class(r)), _coarse(per_class(best))
    gap = r["profile"]["window_ms"] - best["profile"]["window_ms"]
    diffs = sorted(((mine[c] - theirs[c], c) for c in mine), reverse=True)
    top = [(d, c) for d, c in diffs[:GAP_CLASSES] if d > 0]
    rest = gap - sum(d for d, _ in top)
    return (f"{label(r)}: {gap:+.1f} ms per step against {label(best)}: "
            + ", ".join(f"+{d:.1f} ms {c}" for d, c in top) + f"; the other classes {rest:+.1f} ms")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def class_table(rows: list[dict]) -> list[str]:
    body = []
    for c in SHOWN:
        values = [per_class(r)[c] for r in rows]
        if any(v >= 0.05 for v in values):
            body.append([c, *(f"{v:.1f}" for v in values)])
    body.append(["**step, profiled** (sum of the above)",
                 *(f"**{r['profile']['window_ms']:.1f}**" for r in rows)])
    body.append(["step without the profiler", *(f"{r['profile']['plain_step_ms']:.1f}" for r in rows)])
    body.append(["profiler's cost (profiled / without)",
                 *(f"{r['profile']['profiled_step_ms'] / r['profile']['plain_step_ms']:.2f}x"
                   for r in rows)])
    body.append(["unmapped share of op time", *(f"{r['profile']['unmapped_share']:.1%}" for r in rows)])
    return _table(["ms per step", *(label(r) for r in rows)], body)


def roofline_table(rows: list[dict], model: str, batch: int, limits: dict) -> list[str]:
    """Each class's counted FLOPs and bytes (a calculation), its roofline bound on this
    machine's measured limits, and each row's time over that bound."""
    peak, bw = limits.get("gflops"), limits.get("gb_per_s")
    if not peak or not bw:
        return [f"No roofline: the machine's limits were not measured ({limits})."]
    counted = costs.class_costs(models.get(model), batch)

    def bound_ms(c):
        return 1e3 * max(counted[c]["flops"] / (peak * 1e9), counted[c]["bytes"] / (bw * 1e9))
    # the step's roofline: every counted class at its own bound, one after another (the
    # classes share the cores, so none overlaps another), against each row's profiled step
    step = {k: sum(v[k] for v in counted.values()) for k in ("flops", "bytes")}
    step_ms = sum(bound_ms(c) for c in counted)
    if any("conv backward" in r["profile"]["classes"] for r in rows):     # not parted
        both = [counted[c] for c in ("conv backward input", "conv backward weight") if c in counted]
        counted["conv backward"] = {k: sum(v[k] for v in both) for k in ("flops", "bytes")}
    body = []
    for c in CLASSES:
        if c not in counted:
            continue
        f, b = counted[c]["flops"], counted[c]["bytes"]
        cells = []
        for r in rows:
            t = r["profile"]["classes"].get(c)
            cells.append(f"{t / bound_ms(c):.1f}x ({f / (t * 1e6):.1f})" if t else "-")
        body.append([c, f"{f / 1e6:.1f}", f"{b / 1e6:.1f}", f"{f / b:.1f}",
                     f"{min(peak, f / b * bw):.0f}", f"{bound_ms(c):.2f}", *cells])
    f, b = step["flops"], step["bytes"]
    body.append(["**step** (every class at its bound)", f"{f / 1e6:.1f}", f"{b / 1e6:.1f}",
                 f"{f / b:.1f}", f"{f / (step_ms * 1e6):.0f}", f"{step_ms:.2f}",
                 *(f"{r['profile']['window_ms'] / step_ms:.1f}x "
                   f"({f / (r['profile']['window_ms'] * 1e6):.1f})" for r in rows)])
    return _table(["class", "MFLOP (calc.)", "MB (calc.)", "FLOP/byte", "bound GFLOP/s",
                   "bound ms", *(f"{label(r)}: time/bound (GFLOP/s)" for r in rows)], body)


def unmapped_lines(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        names = r["profile"]["unmapped"]
        if names:
            top = ", ".join(f"`{n}` {v:.2f} ms" for n, v in list(names.items())[:6])
            out.append(f"- {label(r)}: {top}")
    return out or ["- none: every op event of every row is mapped to a class."]


def not_profiled(records: list[dict]) -> list[str]:
    return [f"- {label(r)} ({r.get('model')}): {r['status']}: {(r.get('error') or '').splitlines()[0]}"
            for r in records if r not in ok(records)]


def env_lines(records: list[dict]) -> list[str]:
    """The environment a framework's profiled processes ran with (its facts' profile_env),
    which both of its windows share: its steps here are not compare's."""
    envs = {r["framework"]: r["profile"]["env"] for r in ok(records) if r["profile"].get("env")}
    return [f"- {f}'s processes ran with {', '.join(f'`{k}={v}`' for k, v in env.items())} "
            "(common/facts/registry.py `profile_env`, set before the framework loads, so "
            "that its profiler sees each op), its window without the profiler too: its "
            "steps here are not those compare times." for f, env in envs.items()]


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows) + 3), 5))
    bottoms = [0.0] * len(rows)
    cmap = plt.get_cmap("tab20")
    for k, c in enumerate(SHOWN):
        values = [per_class(r)[c] for r in rows]
        if not any(values):
            continue
        ax.bar(range(len(rows)), values, bottom=bottoms, label=c,
               color="0.85" if c == OUTSIDE else cmap(k % 20),
               hatch="//" if c in (OUTSIDE, UNMAPPED) else None, edgecolor="0.4", linewidth=0.3)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.set_xticks(range(len(rows)), [label(r).replace(" ", "\n") for r in rows], fontsize=8)
    for t, r in zip(ax.get_xticklabels(), rows):
        t.set_color(colour(r["framework"]))
    ax.set_ylabel("ms per training step (profiled)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(records: list[dict], limits: dict, command: str, plots: dict[str, str]) -> str:
    """The whole page: per model, the class table, the gap lines, the roofline and the
    unmapped events; then what could not be profiled and how the times are attributed."""
    records = labelled(records)
    lines = ["# Where each framework's training step goes, op by op", "",
             f"Command: `{command}`", "", *machine_lines(records),
             f"- Limits, measured: a float32 GEMM at {limits.get('gflops', 0):.1f} GFLOP/s "
             f"({limits.get('gemm_library')}), a streaming copy at "
             f"{limits.get('gb_per_s', 0):.1f} GB/s ({limits.get('stream_library')}), "
             + (f"on the GPU that runs the rows ({limits['device']})." if limits.get("device")
                else f"{limits.get('threads')} threads."), ""]
    for model in dict.fromkeys(r["model"] for r in records):
        rows = sorted(ok([r for r in records if r["model"] == model]),
                      key=lambda r: r["profile"]["window_ms"])
        if not rows:
            continue
        batch, steps = rows[0]["batch_size"], rows[0]["profile"]["profile_steps"]
        lines += [f"## {model}: batch {batch}, 1 device, {steps} profiled steps", "",
                  "Milliseconds per step by op class, from each framework's own profiler "
                  "(columns from the fastest profiled step):", "", *class_table(rows), ""]
        if model in plots:
            lines += [f"![{model}]({plots[model]})", ""]
        best = fastest(rows)
        lines += ["What separates each row from the fastest:", "",
                  *(f"- {gap_line(r, best)}" for r in rows), "",
                  "Each class against this machine's roofline: its FLOPs and bytes counted "
                  "from the layer shapes (a calculation: common/models/costs.py), the bound "
                  "the lesser of the GEMM peak and intensity x bandwidth gives, and each "
                  "row's measured time over that bound (its achieved GFLOP/s):", "",
                  *roofline_table(rows, model, batch, limits), "",
                  "Events no rule maps, with their time per step:", "", *unmapped_lines(rows), ""]
    missing = not_profiled(records)
    if missing:
        lines += ["## Rows not profiled", "", *missing, ""]
    lines += ["## How the time is attributed", "",
              "- Each framework's profiler events are mapped to the op classes by a table of "
              "rules (a regular expression and a class) in `frameworks/<name>/profile.py`; "
              "the first rule that matches wins.",
              "- On each thread the outermost op is the one that counts (an op's inner "
              "calls, an allocation inside a convolution, are that op's); events that only "
              "hold ops (the step's mark, a Python frame, a whole compiled program) are not "
              "ops. Each instant of the profiled window is split evenly among the threads' "
              "ops active at it; an instant with no op on any thread is *outside any op*: "
              "the framework's own time between ops (Python, dispatch, the runtime).",
              "- On a GPU the step's time is the device's: the ops are its kernels and "
              "copies, each named by the outermost host op that launched it, and *outside "
              "any op* is the GPU waiting on the host (Python, dispatch, launches).",
              "- XLA's fused ops (JAX, Keras on JAX, TensorFlow with XLA) are attributed by "
              "the operation they fuse around: the heaviest op in the fusion, named from "
              "the compiled HLO, with the backward pass told apart by the op's metadata.",
              "- The profiled window runs after the same warm-up as compare and after an "
              "equal window without the profiler; the profiler's cost is the ratio of the "
              "two.", *env_lines(records), ""]
    return "\n".join(lines)
