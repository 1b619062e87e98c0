"""Render a results folder again: `python -m benchmarks.report DIR`.

Reads the JSON records that benchmarks.compare wrote there and rewrites
report.md and the plots, printing the table; nothing is measured."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from common import report
from common.results import load_records


def render(out: Path, command: str, console: Console, plots: bool = True,
           records: list[dict] | None = None) -> list[dict]:
    """Write report.md (and plots) for `records`, by default every record in `out`."""
    records = load_records(out) if records is None else records
    rows = report.summarize(records)
    (out / "command.txt").write_text(command + "\n")
    (out / "report.md").write_text(report.markdown_report(rows, records, command))
    if plots:
        report.plots(records, out)
    model_names = ", ".join(dict.fromkeys(r["model"] for r in rows))
    console.print(report.table(rows, title=f"{model_names}: data-parallel training"))
    for line in report.notes(rows):
        console.print(line, highlight=False, markup=False)
    console.print(f"results: {out}", highlight=False, markup=False)
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    out = Path(args.folder)
    if not any(out.glob("*dev.json")):
        print(f"report: error: no run records (*dev.json) in {out}; give a compare results folder",
              file=sys.stderr)
        return 2
    command_file = out / "command.txt"
    command = command_file.read_text().strip() if command_file.exists() else "(unknown)"
    render(out, command, Console(), plots=not args.no_plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
