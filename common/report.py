"""Everything shown to a person, rendered from run records: the summary rows, the
terminal table, the Markdown report and the plots."""
from __future__ import annotations

import io
import statistics
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

COLUMNS = ("framework", "mode", "devices", "status", "test acc", "train loss", "sec/epoch", "samples/s",
           "speed-up", "efficiency", "peak MB", "note")


def _median(xs):
    return statistics.median(xs) if xs else None


def summarize(records: list[dict]) -> list[dict]:
    """One row per record; speed-up and scaling efficiency against the same
    framework's and mode's 1-device run of this comparison."""
    base = {(r["framework"], r["mode"]): _median(r["sec_per_epoch"])
            for r in records if r["devices"] == 1 and r["status"] == "ok"}
    rows = []
    for r in records:
        sec = _median(r["sec_per_epoch"]) if r["status"] == "ok" else None
        one = base.get((r["framework"], r["mode"]))
        speedup = one / sec if (sec and one) else None
        rows.append({
            "framework": r["framework"], "mode": r["mode"], "devices": r["devices"],
            "status": r["status"], "test acc": r.get("test_accuracy"),
            "train loss": r["train_loss"][-1] if r.get("train_loss") else None, "sec/epoch": sec,
            "samples/s": r.get("samples_per_sec"), "speed-up": speedup,
            "efficiency": speedup / r["devices"] if speedup else None,
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
    t = Table(title=title, box=box.MARKDOWN if markdown else box.SIMPLE_HEAVY)
    for c in COLUMNS:
        if c == "note":
            t.add_column(c, overflow="fold", ratio=1, min_width=20)
        else:
            t.add_column(c, justify="left" if c in ("framework", "mode", "status") else "right",
                         no_wrap=True)
    for row in rows:
        t.add_row(*(_fmt(c, row[c]) for c in COLUMNS))
    return t


def markdown_report(rows: list[dict], records: list[dict], command: str) -> str:
    buf = io.StringIO()
    Console(file=buf, width=400, color_system=None).print(table(rows, markdown=True))
    env = next((r["env"] for r in records if r.get("env")), {})
    libs = ", ".join(f"{k} {v}" for k, v in env.get("libraries", {}).items())
    cfg = records[0] if records else {}
    return "\n".join([
        "# Framework comparison: LeNet, data-parallel training", "",
        f"Command: `{command}`", "",
        f"Machine: {env.get('cpu_model', '?')} ({env.get('cpu_count', '?')} CPUs), "
        f"GPU: {env.get('gpu_model') or 'none'}; {env.get('os', '?')}, Python {env.get('python', '?')}",
        f"Libraries: {libs}", "",
        f"Dataset {cfg.get('dataset')}, {cfg.get('epochs')} epoch(s), batch {cfg.get('batch_size')}, "
        f"lr {cfg.get('lr')}, seed {cfg.get('seed')}, {cfg.get('threads')} threads per run.", "",
        "sec/epoch is the median over epochs, timed with the device synchronised; warm-up "
        "is excluded (in each record as warmup_sec). Speed-up and efficiency are against the "
        "same framework and mode on 1 device. Train loss is the last epoch's mean. Peak memory is the device allocator's peak on "
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
    fig.tight_layout()
    written.append(out_dir / "throughput.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in ok:
        ax.plot(r["step_losses"], label=f"{r['framework']} {r['mode']} x{r['devices']}", lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (batch mean)")
    ax.set_title("First steps: the frameworks should agree")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    written.append(out_dir / "step_losses.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written
