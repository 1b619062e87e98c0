"""Everything shown to a person, rendered from run records: the summary rows, the
terminal table, the Markdown report and the plots."""
from __future__ import annotations

import io
import statistics

import numpy as np
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

COLUMNS = ("framework", "model", "mode", "devices", "status", "test acc", "train loss", "sec/epoch", "samples/s",
           "speed-up", "efficiency", "peak MB", "note")


SHORT = {"devices": "dev", "test acc": "test\nacc", "train loss": "train\nloss",
         "sec/epoch": "sec/\nepoch", "samples/s": "img/s", "speed-up": "speed\n-up",
         "efficiency": "eff.", "peak MB": "peak\nMB"}


def _median(xs):
    return statistics.median(xs) if xs else None


def ideal_speedup(record: dict) -> int:
    """What the hardware allows: k on k GPUs; 1 for k virtual CPU devices, which share
    the same cores (a 1-device run already uses them all)."""
    return record["devices"] if record.get("device_kind") == "gpu" else 1


def summarize(records: list[dict]) -> list[dict]:
    """One row per record; speed-up and scaling efficiency against the same
    framework's and mode's 1-device run of this comparison."""
    def key(r):
        return r["framework"], r.get("model", "lenet"), r["mode"], bool(r.get("sync_bn"))
    base = {key(r): _median(r["sec_per_epoch"])
            for r in records if r["devices"] == 1 and r["status"] == "ok"}
    rows = []
    for r in records:
        sec = _median(r["sec_per_epoch"]) if r["status"] == "ok" else None
        one = base.get(key(r))
        speedup = one / sec if (sec and one) else None
        rows.append({
            "framework": r["framework"], "model": r.get("model", "lenet"),
            "mode": r["mode"] + (" sync-bn" if r.get("sync_bn") else ""), "devices": r["devices"],
            "status": r["status"], "test acc": r.get("test_accuracy"),
            "train loss": r["train_loss"][-1] if r.get("train_loss") else None, "sec/epoch": sec,
            "samples/s": r.get("samples_per_sec"), "speed-up": speedup,
            "efficiency": speedup / ideal_speedup(r) if speedup else None,
            "peak MB": r.get("peak_memory_mb"),
            "note": (r.get("error") or "").splitlines()[0][:160] if r.get("error") else "",
        })
    return rows


def _fmt(key, value):
    if value is None:
        return "-"
    if key in ("test acc", "train loss"):
        return f"{value:.4f}"
    if key in ("sec/epoch", "speed-up", "efficiency"):
        return f"{value:.2f}"
    if key in ("samples/s", "peak MB"):
        return f"{value:,.0f}"
    return str(value)


def table(rows: list[dict], title: str | None = None, markdown: bool = False) -> Table:
    """The summary table; on a terminal the notes go below it (see notes())."""
    # the terminal table names the model in its title, to fit 80 columns
    columns = COLUMNS if markdown else tuple(c for c in COLUMNS[:-1] if c != "model")
    t = (Table(title=title, box=box.MARKDOWN) if markdown else
         Table(title=title, box=box.SIMPLE_HEAD, padding=0, pad_edge=False,
               show_edge=False))
    cells = [[_fmt(c, row[c]) for c in columns] for row in rows]
    for i, c in enumerate(columns):
        # short two-line headers and no padding keep the terminal table within 80 columns
        header = c if markdown else SHORT.get(c, c)
        width = max([len(line) for line in header.splitlines()] + [len(r[i]) for r in cells])
        t.add_column(header, justify="left" if c in ("framework", "mode", "status", "note") else "right",
                     no_wrap=c != "note", min_width=None if c == "note" else width)
    for r in cells:
        t.add_row(*(Text(c) for c in r))    # text from data (errors, hints) shown literally
    return t


def notes(rows: list[dict]) -> list[str]:
    """One line per distinct note, naming the rows it belongs to."""
    by_note: dict[str, list[str]] = {}
    for row in rows:
        if row["note"]:
            by_note.setdefault(row["note"], []).append(
                f"{row['framework']} {row['mode']} x{row['devices']}")
    return [f"{', '.join(names)}: {note}" for note, names in by_note.items()]


def markdown_report(rows: list[dict], records: list[dict], command: str) -> str:
    buf = io.StringIO()
    Console(file=buf, width=400, color_system=None).print(table(rows, markdown=True))
    env = next((r["env"] for r in records if r.get("env")), {})
    libs = ", ".join(f"{k} {v}" for k, v in env.get("libraries", {}).items())
    cfg = records[0] if records else {}
    model_names = ", ".join(dict.fromkeys(r.get("model", "lenet") for r in records))
    if cfg.get("batch_per_device"):
        batch = (f"batch {cfg['batch_per_device']} per device (weak scaling: the global batch and "
                 f"the learning rate grow with the device count; lr {cfg['lr'] / cfg['devices']:g} "
                 "per device)")
    else:
        batch = f"batch {cfg.get('batch_size')} (fixed global batch, split over the devices), lr {cfg.get('lr')}"
    return "\n".join([
        f"# Framework comparison: {model_names}, data-parallel training", "",
        f"Command: `{command}`", "",
        f"Machine: {env.get('cpu_model', '?')} ({env.get('cpu_count', '?')} CPUs), "
        f"GPU: {env.get('gpu_model') or 'none'}; {env.get('os', '?')}, Python {env.get('python', '?')}",
        f"Libraries: {libs}", "",
        f"Dataset {cfg.get('dataset')}, {cfg.get('epochs')} epoch(s), {batch}, "
        f"seed {cfg.get('seed')}, {cfg.get('threads')} threads per run"
        + (f", test accuracy on the first {cfg['eval_samples']} test images" if cfg.get("eval_samples")
           else "") + ".", "",
        "sec/epoch is the median over epochs, timed with the device synchronised; warm-up "
        "is excluded (in each record as warmup_sec). Speed-up is the same framework and "
        "mode's 1-device sec/epoch over this row's; efficiency is speed-up over the ideal the "
        "hardware allows: k on k GPUs, 1 on CPU-only machines, where the k virtual devices "
        "share the same cores (a 1-device run already uses them all). Train loss is the last epoch's mean. Peak memory is the device allocator's peak on "
        "GPUs, else the process's maximum resident set.", "",
        buf.getvalue().strip(), ""])


def plots(records: list[dict], out_dir: Path) -> list[Path]:
    """Throughput bars and the first step losses; returns the files written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return []
    written = []
    fig, ax = plt.subplots(figsize=(max(6, len(ok) * 0.7), 4))
    labels = [f"{r['framework']}\n{r['mode']} x{r['devices']}" for r in ok]
    ax.bar(range(len(ok)), [r["samples_per_sec"] for r in ok], color="tab:blue")
    ax.set_xticks(range(len(ok)), labels, fontsize=7)
    ax.set_ylabel("training samples / s")
    ax.set_title("Throughput (higher is better)")
    written.append(_save(plt, fig, out_dir / "throughput.png"))

    n = min(len(r["step_losses"]) for r in ok)
    losses = np.array([r["step_losses"][:n] for r in ok])
    median = np.median(losses, axis=0)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    colours = {f: plt.cm.tab10(i) for i, f in enumerate(dict.fromkeys(r["framework"] for r in ok))}
    for r, row in zip(ok, losses):
        style = dict(color=colours[r["framework"]], lw=1,
                     ls="-" if r["mode"] == "scratch" else "--", marker="." if r["devices"] > 1 else None)
        label = f"{r['framework']} {r['mode']} x{r['devices']}"
        top.plot(row, label=label, **style)
        bottom.plot(row - median, **style)
    top.set_ylabel("loss (batch mean)")
    top.set_title("First steps, same weights and batches: the frameworks should agree")
    top.legend(fontsize=6, ncol=3)
    bottom.set_ylabel("minus the median of all runs")
    bottom.set_xlabel("step")
    written.append(_save(plt, fig, out_dir / "step_losses.png"))
    return written


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# Without repeats to measure it, the noise a timing is assumed to carry: the same run
# on these shared machines varies by 10-40% from one time to the next.
DEFAULT_NOISE = 0.15


def _key(r: dict) -> tuple:
    return (r["framework"], r.get("model", "lenet"), r["mode"], bool(r.get("sync_bn")), r["devices"])


def _spread(r: dict) -> float:
    """Relative spread (max - min) / median of a run's epoch times; 0 with one epoch."""
    xs = r.get("sec_per_epoch") or []
    return (max(xs) - min(xs)) / statistics.median(xs) if len(xs) > 1 else 0.0


def compare_folders(before: list[dict], after: list[dict], noise: float = DEFAULT_NOISE) -> list[dict]:
    """Rows present in both, with after/before sec/epoch and a verdict: slower or faster
    beyond the noise (the larger of `noise` and either run's own epoch spread), else
    within noise."""
    old = {_key(r): r for r in before if r["status"] == "ok"}
    rows = []
    for r in after:
        a = old.get(_key(r))
        if r["status"] != "ok" or a is None:
            continue
        ta, tb = _median(a["sec_per_epoch"]), _median(r["sec_per_epoch"])
        band = max(noise, _spread(a), _spread(r))
        ratio = tb / ta
        verdict = ("slower" if ratio > 1 + band else "faster" if ratio < 1 / (1 + band)
                   else "within noise")
        rows.append({"framework": r["framework"], "model": r.get("model", "lenet"),
                     "mode": r["mode"] + (" sync-bn" if r.get("sync_bn") else ""),
                     "devices": r["devices"], "before": ta, "after": tb, "ratio": ratio,
                     "noise": band, "verdict": verdict})
    return rows


def comparison_table(rows: list[dict], markdown: bool = False) -> Table:
    t = Table(title=None if markdown else "sec/epoch, after vs before",
              box=box.MARKDOWN if markdown else box.SIMPLE_HEAD)
    for c in ("framework", "model", "mode", "devices", "before", "after", "ratio", "noise", "verdict"):
        t.add_column(c, justify="right" if c in ("devices", "before", "after", "ratio", "noise") else "left")
    for r in rows:
        t.add_row(*(Text(x) for x in (r["framework"], r["model"], r["mode"], str(r["devices"]),
                                      f"{r['before']:.2f}", f"{r['after']:.2f}", f"{r['ratio']:.2f}",
                                      f"±{r['noise']:.0%}", r["verdict"])))
    return t
