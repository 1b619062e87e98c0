"""The report's utilisation table: per row, the model's GFLOP per sample, samples/s per
device with its 95 % interval over the repeats, achieved GFLOP/s per device, the device's
peak and MFU, and peak memory per device; with the lines that define them and name the
peaks. Rendered from the summary rows (common.reports.runs.summarize) and their records."""
from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from common import models
from common.results.record import model_of
from common.results.utilisation import interval95

COLUMNS = ("framework", "model", "mode", "execution", "devices", "GFLOP/sample", "samples/s/dev",
           "95% interval", "GFLOP/s/dev", "peak GFLOP/s/dev", "MFU", "peak MB/dev")
SHORT = {"execution": "exec", "devices": "dev", "samples/s/dev": "img/s\n/dev",
         "+-95%": "+-95%\nof mean", "GFLOP/s/dev": "GFLOP/s\n/dev", "peak GFLOP/s/dev": "peak\nGFLOP/s",
         "peak MB/dev": "peak MB\nmax/dev"}


# what a record written before these figures existed gets instead of its reasons
OLD = "not in the record (written before the suite recorded it)"


def flops_per_sample(record: dict) -> int:
    """The record's model FLOPs per training sample (a record older than the key: its model's)."""
    return record.get("flops_per_sample") or models.get(model_of(record)).TRAIN_FLOPS_PER_IMAGE


def rows(summary: list[dict], records: list[dict]) -> list[dict]:
    """One row per successful run: summary (runs.summarize's rows) and records side by side."""
    out = []
    for row, r in zip(summary, records):
        if r["status"] != "ok" or not row["samples/s"]:
            continue
        k = row["devices"]
        per_device = row["samples/s"] / k
        # each repeat's samples/s per device: the images of an epoch over its median epoch time
        images = row["samples/s"] * row["sec/epoch"]
        achieved = flops_per_sample(r) * per_device
        peak = r.get("peak_flops_per_device")
        memory = r.get("peak_memory_mb_per_device")
        out.append({key: row[key] for key in ("framework", "model", "mode", "execution", "devices")}
                   | {"GFLOP/sample": flops_per_sample(r) / 1e9, "samples/s/dev": per_device,
                      "95% interval": interval95([images / s / k for s in row["runs"]]),
                      "repeats": len(row["runs"]), "GFLOP/s/dev": achieved / 1e9,
                      "peak GFLOP/s/dev": peak / 1e9 if peak else None,
                      "MFU": achieved / peak if peak else None,
                      "peak MB/dev": memory,
                      "peak source": r.get("peak_flops_source"),
                      "mfu note": r.get("mfu_note") or (None if "mfu" in r else OLD),
                      "memory source": r.get("peak_memory_per_device_source")
                      or (None if "peak_memory_per_device_source" in r else OLD)})
    return out


def _cell(key: str, value) -> str:
    if value is None:
        return "-"
    if key == "GFLOP/sample":
        return f"{value:.4g}"
    if key in ("samples/s/dev", "GFLOP/s/dev", "peak GFLOP/s/dev"):
        return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    if key == "95% interval":
        return f"{_cell('samples/s/dev', value[0])}-{_cell('samples/s/dev', value[1])}"
    if key == "MFU":
        return f"{value:.1%}"
    if key == "peak MB/dev":        # every device's, up to four; else the largest
        return " / ".join(f"{x:,.0f}" for x in value) if len(value) <= 4 else f"max {max(value):,.0f}"
    return str(value)


# the terminal's columns, within 80: the GFLOP per sample goes in the title, the interval
# as its half-width about the mean, memory as the largest device's
TERMINAL = ("framework", "mode", "execution", "devices", "samples/s/dev", "+-95%", "GFLOP/s/dev",
            "peak GFLOP/s/dev", "MFU", "peak MB/dev")


def table(util_rows: list[dict], markdown: bool = False) -> Table | None:
    if not util_rows:
        return None
    if markdown:
        t, columns = Table(box=box.MARKDOWN), COLUMNS
        cells = [[_cell(c, row[c]) for c in columns] for row in util_rows]
    else:
        gflop = ", ".join(f"{row['model']} {row['GFLOP/sample']:.4g}"
                          for row in {row["model"]: row for row in util_rows}.values())
        t = Table(title=f"per device (GFLOP/sample: {gflop})", box=box.SIMPLE_HEAD, padding=0,
                  pad_edge=False, show_edge=False)
        # as the main table: no column without a value in any row, no padding
        columns = tuple(c for c in TERMINAL if c not in ("+-95%", "peak GFLOP/s/dev", "MFU",
                                                         "peak MB/dev")
                        or any(_terminal_cell(c, row) != "-" for row in util_rows))
        cells = [[_terminal_cell(c, row) for c in columns] for row in util_rows]
    for i, c in enumerate(columns):
        header = c if markdown else SHORT.get(c, c)
        width = max([len(line) for line in header.splitlines()] + [len(r[i]) for r in cells])
        t.add_column(header, no_wrap=True, min_width=width,
                     justify="left" if c in ("framework", "model", "mode", "execution") else "right")
    for r in cells:
        t.add_row(*(Text(x) for x in r))
    return t


def _terminal_cell(key: str, row: dict) -> str:
    if key == "+-95%":
        lo_hi = row["95% interval"]
        return "-" if lo_hi is None else "+-" + _cell("samples/s/dev", (lo_hi[1] - lo_hi[0]) / 2)
    if key == "peak MB/dev":
        return "-" if not row[key] else f"{max(row[key]):,.0f}"
    return _cell(key, row[key])


def _label(row: dict) -> str:
    return f"{row['framework']} {row['mode']} {row['execution'] or ''} x{row['devices']}".replace("  ", " ")


def _grouped(util_rows: list[dict], key: str) -> list[str]:
    """Each distinct value of `key`, with the rows it belongs to."""
    by: dict[str, list[str]] = {}
    for row in util_rows:
        if row[key]:
            by.setdefault(row[key], []).append(_label(row))
    return [f"{value} ({', '.join(labels)})" for value, labels in by.items()]


def definitions(util_rows: list[dict]) -> list[str]:
    if not util_rows:
        return []
    repeats = max(row["repeats"] for row in util_rows)
    gflop = ", ".join(f"{m} {models.get(m).TRAIN_FLOPS_PER_IMAGE / 1e9:.4g}"
                      for m in dict.fromkeys(row["model"] for row in util_rows))
    lines = [
        "GFLOP/sample: the model's training FLOPs per sample, counted from its layer shapes "
        "(convolutions and dense layers only; a multiply-add is 2 FLOPs; forward + backward "
        f"taken as 3 x the forward pass): a calculation, not a measurement ({gflop}).",
        "samples/s/dev: samples/s over the row's devices (from the median sec/epoch); 95% "
        "interval: of the mean over the repeats' samples/s per device, mean +- t sd / "
        "sqrt(n) with Student's t at n - 1 degrees of freedom (12.7 at 2 repeats, 4.3 at 3), "
        + (f"over the {repeats} repeats" if repeats > 1 else "'-' with one repeat (--repeat N)")
        + " (on the terminal its half-width, +-, about the mean; report.md gives the interval).",
        "GFLOP/s/dev: GFLOP/sample x samples/s/dev, the achieved rate. MFU (model FLOPs "
        "utilisation): GFLOP/s/dev over the device's peak, peak GFLOP/s: "
        + "; ".join(_grouped(util_rows, "peak source") or ["none known"]) + ".",
    ]
    missing = _grouped([row for row in util_rows if row["MFU"] is None], "mfu note")
    if missing:
        lines.append("MFU '-': " + "; ".join(missing) + ".")
    lines.append("peak MB/dev: each device's peak memory during the run, in device order: "
                 + "; ".join(_grouped(util_rows, "memory source")) + " (on the terminal the "
                 "largest device's). peak MB in the table above keeps its meaning: the largest "
                 "device's allocator peak on GPUs, else the process's max RSS.")
    return lines
