"""The device experiments' results shown to a person, rendered from their records:
a summary matrix (framework x experiment, one headline figure each), one table per
experiment, report.md and the plots."""
from __future__ import annotations

import json
from pathlib import Path

from rich import box
from rich.table import Table

from common.experiments.device_experiments import EXPERIMENTS, MB
from common.facts.registry import NAMES
from common.reports.formats import ms
from common.reports.plots import colour, save_figure
from common.reports.runs import load_lines, machine_lines, render_markdown

RECORD_GLOB = "*.devices.json"


def load_records(directory) -> list[dict]:
    records = [json.loads(p.read_text()) for p in Path(directory).glob(RECORD_GLOB)]
    fw = {n: i for i, n in enumerate(NAMES)}
    ex = {n: i for i, n in enumerate(EXPERIMENTS)}
    return sorted(records, key=lambda r: (fw.get(r["framework"], 99), ex.get(r["experiment"], 99)))


def _bytes(n) -> str:
    for unit, size in (("GB", 2**30), ("MB", MB), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def _ms(seconds) -> str:
    return ms(seconds, ".3g" if seconds * 1e3 < 1000 else ",.0f")


def cell(row: dict, key: str, fmt: str) -> str:
    if key == "spread":
        if "min_s" not in row:
            return "-"
        return f"{_ms(row['min_s'])}-{_ms(row['max_s'])}"
    value = row.get(key)
    if value is None:
        return "-"
    if fmt == "ms":
        return _ms(value)
    if fmt == "%":
        return f"{100 * value:.0f}%"
    if fmt == "bytes":
        return _bytes(value)
    if fmt in ("s", "d"):
        return str(value)
    return format(value, fmt)


def _rows(records, name):
    return [r for r in records if r["experiment"] == name]


# --- one headline figure per framework and experiment ---------------------------------

def _largest(rows, kind="cpu", device=None):
    ok = [r for r in rows if "size" in r and r.get("device", "").startswith(device or kind)]
    top = max((r["size"] for r in ok), default=None)
    return [r for r in ok if r["size"] == top]


def gpu_reference(records: list[dict]) -> None:
    """On a GPU the reference is the best framework at each size in this run (NumPy has
    no GPU): every GPU product row gets vs_best_gpu, its fraction of that best. Each
    framework ran in a process of its own, so this is known only here, at report time."""
    rows = [row for r in _rows(records, "matmul") for row in r["rows"]
            if row.get("status", "ok") == "ok" and str(row.get("device", "")).startswith("gpu")]
    best: dict[int, float] = {}
    for row in rows:
        best[row["size"]] = max(best.get(row["size"], 0.0), row["gflops"])
    for row in rows:
        row["vs_best_gpu"] = row["gflops"] / best[row["size"]]


def headline(record: dict) -> str:
    if record["status"] != "ok":
        return record["status"]
    rows = [r for r in record["rows"] if r.get("status", "ok") == "ok"]
    name = record["experiment"]
    try:
        if name == "matmul":
            parts = []
            cpu = [r for r in _largest(rows) if r["device"] != "numpy"]
            if cpu:
                r = max(cpu, key=lambda r: r["gflops"])
                parts.append(f"{r['gflops']:.0f} GFLOP/s @{r['size']} "
                             f"({100 * r.get('vs_numpy', 0):.0f}% NumPy)")
            gpu = _largest(rows, device="gpu")
            if gpu:
                r = max(gpu, key=lambda r: r["gflops"])
                parts.append(f"{r['device']} {r['gflops']:.0f} GFLOP/s @{r['size']} "
                             f"({100 * r.get('vs_best_gpu', 1):.0f}% of best GPU)")
            return "; ".join(parts) or "ok"
        if name == "logging":
            r = next(r for r in rows if r["variant"].startswith("host"))
            return f"every-step read x{r['vs_device_log']:.2f}"
        if name == "two-devices":
            r = next((r for r in rows if "speedup" in r), None)
            if r is None:
                return "at once: n/a (see note)"
            return f"speed-up {r['speedup']:.2f} (exp. {r['expected_speedup']:.0f})"
        if name == "async":
            e = next(r for r in rows if r["variant"].startswith("enqueue"))
            s = next(r for r in rows if r.get("sync") == "sync every step")
            return f"async {e['asynchronous']} ({e['ratio']:.2f}); sync/step x{s['ratio']:.1f}"
        if name == "overlap":
            r = next((r for r in rows if "speedup" in r), None)
            return f"overlap x{r['speedup']:.2f}" if r else "ok"
        if name == "roundtrip":
            big = max(r["bytes"] for r in rows)
            s, l = (next(r for r in rows if r["bytes"] == big and r["variant"].startswith(w))
                    for w in ("save", "load"))
            return f"{s['mbps']:.0f}/{l['mbps']:.0f} MB/s save/load"
        if name == "allreduce":
            big = max(r["bytes"] for r in rows)
            parts = [f"{v} {r['busbw']:.2f}" for v in ("by hand", "native")
                     for r in rows if r["bytes"] == big and r["variant"].startswith(v)]
            return f"busbw @{_bytes(big)}: {', '.join(parts)} GB/s"
    except (StopIteration, ValueError, KeyError):
        pass
    return "ok"


def summary_table(records: list[dict], markdown: bool = False) -> Table:
    gpu_reference(records)
    frameworks = list(dict.fromkeys(r["framework"] for r in records))
    names = [n for n in EXPERIMENTS if any(r["experiment"] == n for r in records)]
    t = (Table(box=box.MARKDOWN) if markdown else
         Table(title="Device experiments (headline per framework)", box=box.SIMPLE_HEAD))
    t.add_column("experiment")
    for f in frameworks:
        t.add_column(f)
    by = {(r["framework"], r["experiment"]): r for r in records}
    for n in names:
        t.add_row(n, *[headline(by[(f, n)]) if (f, n) in by else "-" for f in frameworks])
    return t


def experiment_table(name: str, records: list[dict], markdown: bool = False) -> Table:
    exp = EXPERIMENTS[name]
    t = (Table(box=box.MARKDOWN) if markdown else Table(title=exp.title, box=box.SIMPLE_HEAD))
    t.add_column("framework")
    for _, header, fmt in exp.columns:
        t.add_column(header, justify="left" if fmt == "s" else "right")
    t.add_column("note")
    width = len(exp.columns)
    for r in _rows(records, name):
        if r["status"] != "ok" and not any(x.get("status", "ok") == "ok" for x in r["rows"]):
            t.add_row(r["framework"], *(["-"] * width), f"{r['status']}: {_first_line(r['error'])}")
            continue
        for row in r["rows"]:
            if row.get("status", "ok") != "ok":
                t.add_row(r["framework"], *[cell(row, k, f) if k in ("device", "devices", "variant") else "-"
                                            for k, _, f in exp.columns],
                          f"{row['status']}: {row.get('note', '')}")
            else:
                t.add_row(r["framework"], *[cell(row, k, f) for k, _, f in exp.columns], "")
    return t


def _first_line(text) -> str:
    return (text or "").splitlines()[0][:200] if text else ""


def matmul_vs_numpy(records: list[dict]) -> list[tuple[str, int, float, float]]:
    """(framework, size, GFLOP/s, fraction of NumPy's) at the largest CPU size, per framework."""
    out = []
    for r in _rows(records, "matmul"):
        if r["status"] != "ok":
            continue
        for row in _largest([x for x in r["rows"] if x.get("status", "ok") == "ok"]):
            if row["device"] != "numpy" and "vs_numpy" in row:
                out.append((r["framework"], row["size"], row["gflops"], row["vs_numpy"]))
    return out


def markdown_report(records: list[dict], command: str) -> str:
    gpu_reference(records)
    first = records[0] if records else {}
    lines = [
        "# Device experiments: the chapters' GPU, asynchrony and parallelism experiments", "",
        f"Command: `{command}`", "",
        *machine_lines(records), "",
        f"Each framework ran in a worker process of its own with {first.get('threads')} threads; "
        f"every time is the median of up to {first.get('repeat')} repeats after a warm-up (large "
        "measurements stop at 3 repeats past a few seconds), with the device synchronised "
        "before each clock read; min-max is the spread. Device kinds: "
        f"{', '.join(first.get('device_kinds') or [])}.", ""]
    lines += load_lines(records)
    no_gpu = sorted({r["framework"] for r in records
                     if any(n.endswith("sees no GPU here") for n in r.get("notes") or [])})
    if no_gpu:
        lines += [f"No GPU seen by: {', '.join(no_gpu)} (GPU rows left out).", ""]
    lines += [
        "## Summary", "", render_markdown(summary_table(records, markdown=True)), ""]
    best = max(matmul_vs_numpy(records), key=lambda x: x[2], default=None)
    if best:
        lines += [f"Largest CPU product: best framework {best[0]}, {best[2]:.0f} GFLOP/s at "
                  f"n={best[1]}, {100 * best[3]:.0f}% of NumPy's BLAS measured in the same "
                  "process just before it.", ""]
    gpu = [(r["framework"], row) for r in _rows(records, "matmul") for row in _largest(
        [x for x in r["rows"] if x.get("status", "ok") == "ok"], device="gpu")]
    if gpu:
        fw, row = max(gpu, key=lambda x: x[1]["gflops"])
        lines += [f"Largest GPU product: best framework {fw}, {row['gflops']:.0f} GFLOP/s at "
                  f"n={row['size']} on {row['device']} (the GPU rows' reference).", ""]
    for name, exp in EXPERIMENTS.items():
        rs = _rows(records, name)
        if not rs:
            continue
        lines += [f"## {exp.title} (`{name}`)", "", exp.shows, ""]
        for r in rs:
            for note in r.get("notes") or []:
                if note.endswith("sees no GPU here"):
                    continue
                lines.append(f"- {r['framework']}: {note}")
            checks = r.get("checks") or []
            if checks:
                bad = [c["name"] for c in checks if not c["ok"]]
                lines.append(f"- {r['framework']}: {len(checks) - len(bad)}/{len(checks)} checks "
                             "passed" + (f"; FAILED: {'; '.join(bad)}" if bad else ""))
        lines += ["", render_markdown(experiment_table(name, records, markdown=True)), ""]
    return "\n".join(lines)


# --- plots --------------------------------------------------------------------------

def plots(records: list[dict], out_dir: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []

    # 1. GFLOP/s against size, per framework and device kind, with NumPy's line
    mm = [r for r in _rows(records, "matmul") if r["status"] == "ok"]
    if mm:
        kinds = sorted({row["device"].split(":")[0] for r in mm for row in r["rows"]
                        if row.get("status", "ok") == "ok" and row["device"] != "numpy"})
        fig, axes = plt.subplots(1, len(kinds), figsize=(6 * len(kinds), 4.5), squeeze=False)
        for ax, kind in zip(axes[0], kinds):
            ref = {}
            for r in mm:
                rows = [x for x in r["rows"] if x.get("status", "ok") == "ok"]
                for dev in sorted({x["device"] for x in rows if x["device"].startswith(kind)}):
                    pts = sorted((x["size"], x["gflops"]) for x in rows if x["device"] == dev)
                    ax.plot(*zip(*pts), marker="o", color=colour(r["framework"]),
                            label=f"{r['framework']} {dev}")
                for x in rows:
                    if x["device"] == "numpy":
                        ref.setdefault(x["size"], []).append(x["gflops"])
            if kind == "cpu" and ref:
                sizes = sorted(ref)
                ax.plot(sizes, [sorted(ref[s])[len(ref[s]) // 2] for s in sizes], "k--", lw=2,
                        label="NumPy BLAS (median of the runs)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("matrix size n (n x n float32)")
            ax.set_ylabel("GFLOP/s")
            ax.set_title(f"Matrix products on the {kind.upper()}")
            ax.legend(fontsize=7)
            ax.grid(True, which="both", alpha=0.3)
        written.append(save_figure(plt, fig, out_dir / "matmul_gflops.png"))

    # 2. all-reduce bus bandwidth against size
    ar = [r for r in _rows(records, "allreduce") if r["status"] == "ok"]
    if ar:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in ar:
            for variant, style in (("by hand (chapter)", "-"), ("native", "--")):
                pts = sorted((x["bytes"], x["busbw"]) for x in r["rows"]
                             if x.get("variant") == variant)
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", color=colour(r["framework"]),
                            label=f"{r['framework']} {variant}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        sizes = sorted({x["bytes"] for r in ar for x in r["rows"] if "bytes" in x})
        ax.set_xticks(sizes, [_bytes(s) for s in sizes])
        ax.set_xlabel("bytes per device")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title("All-reduce over 2 devices: busbw = algbw x 2(n-1)/n")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        written.append(save_figure(plt, fig, out_dir / "allreduce_busbw.png"))

    # 3. synchronising every step versus once / a log kept on the device
    lg = [r for r in _rows(records, "logging") if r["status"] == "ok"]
    asy = [r for r in _rows(records, "async") if r["status"] == "ok"]
    if lg or asy:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for ax, recs, pick, title in (
                (axes[0], lg, lambda x: ("every step" if x["variant"].startswith("host") else "device log"),
                 "1,000 products 100x100 + norm log"),
                (axes[1], asy, lambda x: x.get("sync", "").replace("sync ", "") or None,
                 "10,000 x (y = x + 1)")):
            labels, a, b = [], [], []
            for r in recs:
                by = {}
                for x in r["rows"]:
                    if x.get("status", "ok") == "ok" and "variant" in x and pick(x):
                        by.setdefault((x["device"], pick(x)), x["median_s"])
                for dev in dict.fromkeys(d for d, _ in by):
                    vals = [v for (d, _), v in by.items() if d == dev]
                    if len(vals) == 2:
                        labels.append(f"{r['framework']}\n{dev}")
                        a.append(vals[0])
                        b.append(vals[1])
            xs = range(len(labels))
            first = "host read every step" if ax is axes[0] else "sync every step"
            second = "device log, read once" if ax is axes[0] else "sync once"
            ax.bar([x - 0.2 for x in xs], a, 0.4, label=first, color="tab:red")
            ax.bar([x + 0.2 for x in xs], b, 0.4, label=second, color="tab:green")
            ax.set_xticks(list(xs), labels, fontsize=7)
            ax.set_ylabel("seconds (median)")
            ax.set_title(title)
            ax.legend(fontsize=7)
        written.append(save_figure(plt, fig, out_dir / "sync_vs_device_log.png"))
    return written
