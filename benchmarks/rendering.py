"""A results folder's report written and printed: shared by the command that measured
the folder and the one that renders it again (compare and report; devices and
devices_report), so that no command imports another."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from common.reports import device_experiments as device_report
from common.reports import runs as report, settings as settings_report, splits, utilisation
from common.reports.plots import plots as draw_plots
from common.results.record import load_records

from .cli import COMMAND_FILE


def render(out: Path, command: str, console: Console, plots: bool = True,
           records: list[dict] | None = None) -> list[dict]:
    """Write report.md (and plots) for `records`, by default every record in `out`."""
    records = load_records(out) if records is None else records
    rows = report.summarize(records)
    (out / COMMAND_FILE).write_text(command + "\n")
    (out / "report.md").write_text(report.markdown_report(rows, records, command))
    if plots:
        draw_plots(records, out)
    model_names = ", ".join(dict.fromkeys(r["model"] for r in rows))
    console.print(report.table(rows, title=f"{model_names}: data-parallel training"))
    for line in report.notes(rows):
        console.print(line, highlight=False, markup=False)
    for line in report.definitions(rows, records):
        console.print(line, highlight=False, markup=False, style="dim")
    util_rows = utilisation.rows(rows, records)
    if util_rows:
        console.print(utilisation.table(util_rows))
        for line in utilisation.definitions(util_rows):
            console.print(line, highlight=False, markup=False, style="dim")
    pipeline = report.pipeline_table(rows)
    if pipeline is not None:
        console.print(pipeline)
        for line in report.pipeline_definitions(rows):
            console.print(line, highlight=False, markup=False, style="dim")
    split_rows = splits.rows(records)
    if split_rows:
        console.print(splits.table(split_rows))
        for line in splits.definitions(split_rows):
            console.print(line, highlight=False, markup=False, style="dim")
    for line in settings_report.best_known_lines(records):
        console.print(line, highlight=False, markup=False)
    console.print(f"results: {out}", highlight=False, markup=False)
    return records


def render_devices(out: Path, command: str, console: Console, plots: bool = True,
           records: list[dict] | None = None) -> list[dict]:
    """Write a device-experiments folder's report.md (and plots) for `records`, by default
    every record in `out`, and print its summary."""
    records = device_report.load_records(out) if records is None else records
    (out / COMMAND_FILE).write_text(command + "\n")
    (out / "report.md").write_text(device_report.markdown_report(records, command))
    if plots:
        device_report.plots(records, out)
    console.print(device_report.summary_table(records))
    for fw, size, gflops, frac in device_report.matmul_vs_numpy(records):
        console.print(f"{fw}: {gflops:.0f} GFLOP/s at n={size} on the CPU, "
                      f"{100 * frac:.0f}% of NumPy's BLAS", highlight=False)
    for r in records:
        if r["status"] == "failed":
            console.print(f"{r['framework']} {r['experiment']}: failed: "
                          f"{(r.get('error') or '').splitlines()[0][:300]}", highlight=False)
    console.print(f"results: {out} (report.md: one table per experiment)")
    return records
