"""Render a results folder again, or compare two: `python -m benchmarks.report DIR [NEW_DIR]`.

With one folder: reads the JSON records that benchmarks.compare wrote there and
rewrites report.md and the plots, printing the table; nothing is measured.
With two: the rows both hold, NEW_DIR's sec/epoch over DIR's and a verdict (faster,
slower, within noise), printed and written to NEW_DIR/comparison.md; with
--fail-on-slower the exit code is 1 when a row got slower beyond the noise."""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from rich.console import Console

from common.reports import runs as report, utilisation
from common.results.record import RecordError, load_records

from .cli import COMMAND_FILE, recorded_command


def render(out: Path, command: str, console: Console, plots: bool = True,
           records: list[dict] | None = None) -> list[dict]:
    """Write report.md (and plots) for `records`, by default every record in `out`."""
    records = load_records(out) if records is None else records
    rows = report.summarize(records)
    (out / COMMAND_FILE).write_text(command + "\n")
    (out / "report.md").write_text(report.markdown_report(rows, records, command))
    if plots:
        report.plots(records, out)
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
    console.print(f"results: {out}", highlight=False, markup=False)
    return records


def main(argv=None) -> int:
    try:
        return _main(argv)
    except RecordError as e:          # a corrupt record: one line naming the file
        print(f"report: error: {e}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("new_folder", nargs="?", help="a second results folder to compare with the first")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--noise", type=float, default=report.DEFAULT_NOISE,
                   help="relative change taken as noise when the runs do not show their own")
    p.add_argument("--fail-on-slower", action="store_true",
                   help="exit 1 when a row got slower beyond the noise (for a CI gate)")
    return p


def _main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    folders = [Path(f) for f in (args.folder, args.new_folder) if f]
    for out in folders:
        if not any(out.glob("*dev.json")):
            print(f"report: error: no run records (*dev.json) in {out}; give a compare results "
                  "folder", file=sys.stderr)
            return 2
    if args.new_folder:
        rows = report.compare_folders(load_records(folders[0]), load_records(folders[1]), args.noise)
        # a pipe or log gets a width that fits the table, not rich's 80 columns
        Console(width=None if sys.stdout.isatty() else 140).print(report.comparison_table(rows))
        buf = io.StringIO()
        Console(file=buf, width=300, color_system=None).print(report.comparison_table(rows, True))
        (folders[1] / "comparison.md").write_text(
            f"# {folders[1]} against {folders[0]}\n\nsec/epoch (median over epochs); noise: the "
            f"larger of {args.noise:.0%} and either row's own spread (over its repeats, else its "
            f"epochs).\n\n"
            + buf.getvalue())
        slower = [r for r in rows if r["verdict"] == "slower"]
        return 1 if (slower and args.fail_on_slower) else 0
    out = folders[0]
    render(out, recorded_command(out), Console(), plots=not args.no_plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
