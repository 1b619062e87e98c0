"""Render a results folder again, or compare two: `python -m benchmarks.report DIR [NEW_DIR]`.

With one folder: reads the JSON records that benchmarks.compare wrote there and
rewrites report.md and the plots, printing the table; nothing is measured.
With two: the rows both hold, NEW_DIR's sec/epoch over DIR's and a verdict (faster,
slower, within noise, or too few repeats: common.reports.verdict), printed and written
to NEW_DIR/comparison.md; with --fail-on-slower the exit code is 1 when a row is slower.
For other programs and over time: --format csv|json (one row per run),
--append-history FILE.jsonl, --plot-history FILE.jsonl, and --against-history
FILE.jsonl, the gate against the history instead of a second folder."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from rich.console import Console

from common.reports import comparison, export, history, runs as report
from common.results.record import RecordError, load_records, read_record

from .cli import Parser, UsageError, positive, positive_float, recorded_command
from .rendering import render


def main(argv=None) -> int:
    try:
        return _main(argv)
    except (RecordError, history.HistoryError, UsageError) as e:   # one line naming the file
        print(f"report: error: {e}", file=sys.stderr)
        return 2


def build_parser() -> Parser:
    p = Parser(prog="python -m benchmarks.report", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", nargs="?", help="a compare results folder")
    p.add_argument("new_folder", nargs="?", help="a second results folder to compare with the first")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--noise", type=positive_float, default=comparison.DEFAULT_NOISE,
                   help="the band: the smallest relative change of sec/epoch called slower or "
                        "faster, however certain a smaller one")
    p.add_argument("--fail-on-slower", action="store_true",
                   help="exit 1 when a row is slower (for a CI gate); a row with too few "
                        "repeats for a verdict is named, not counted")
    p.add_argument("--format", choices=export.FORMATS, default=None,
                   help="write the folder's runs as rows (one per run; columns in "
                        "docs/report.md) instead of rendering the report")
    p.add_argument("--output", default=None, metavar="FILE",
                   help="where --format writes (default: stdout) or --plot-history draws "
                        "(default: the history file's name with .png)")
    p.add_argument("--append-history", default=None, metavar="FILE.jsonl",
                   help="append the folder's successful runs to a history file, each with its "
                        "commit, date, library versions and machine (a run already there is "
                        "not added again)")
    p.add_argument("--against-history", default=None, metavar="FILE.jsonl",
                   help="compare the folder with the history instead of a second folder: each "
                        "run against the same configuration's last --last runs there, on the "
                        "same machine kind")
    p.add_argument("--last", type=positive, default=1, metavar="N",
                   help="--against-history: the baseline is the repeats of the last N "
                        "matching runs together (1: the last run's)")
    p.add_argument("--plot-history", default=None, metavar="FILE.jsonl",
                   help="plot sec/epoch and test accuracy of each configuration over the "
                        "history's commits (or --by version) to a PNG")
    p.add_argument("--framework", default=None,
                   help="--plot-history: only these frameworks (comma-separated)")
    p.add_argument("--by", choices=("commit", "version"), default="commit",
                   help="--plot-history: the x axis, the suite's commits in the order appended "
                        "or the framework's versions (one framework)")
    return p


def _check(args) -> None:
    """The options that argparse cannot check together; a UsageError with the fix."""
    one_folder = [o for o, v in (("--format", args.format), ("--append-history", args.append_history),
                                 ("--against-history", args.against_history)) if v]
    if args.folder is None and not args.plot_history:
        raise UsageError("give a results folder (or --plot-history FILE.jsonl)")
    if args.new_folder and one_folder:
        raise UsageError(f"{one_folder[0]} reads one folder; drop {args.new_folder} "
                         "(or compare two folders without it)")
    if args.folder is None and one_folder:
        raise UsageError(f"{one_folder[0]} needs a results folder")
    if args.last != 1 and not args.against_history:
        raise UsageError("--last N is for --against-history")
    if args.output and not (args.format or args.plot_history):
        raise UsageError("--output is where --format or --plot-history write")
    if args.output and args.format and args.plot_history:
        raise UsageError("--output names one file: give --format and --plot-history apart")
    if args.against_history and not Path(args.against_history).is_file():
        raise UsageError(f"--against-history {args.against_history}: no such file; append "
                         "folders to it with --append-history first")
    for name, folder in (("folder", args.folder), ("folder", args.new_folder)):
        if folder is not None and not any(Path(folder).glob("*dev.json")):
            raise UsageError(f"no run records (*dev.json) in {folder}; give a compare results folder")


def _main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    _check(args)
    code = 0
    if args.plot_history:
        entries = history.read(args.plot_history)
        frameworks = [f.strip() for f in args.framework.split(",")] if args.framework else None
        png = Path(args.output or Path(args.plot_history).with_suffix(".png"))
        print(f"history plot: {history.plot(entries, png, frameworks, args.by)}")
    if args.folder is None:
        return code
    out = Path(args.folder)
    if args.new_folder:
        return _compare_two(out, Path(args.new_folder), args)
    if args.format:
        text = export.render(export.rows(load_records(out)), args.format)
        if args.output:
            Path(args.output).write_text(text)
        else:
            sys.stdout.write(text)
    if args.against_history:
        code = _gate(out, args)
    if args.append_history:
        records = load_records(out)
        lines = history.lines_of(records, _record_paths(out, records), time.time())
        added, there = history.append(args.append_history, lines)
        print(f"history {args.append_history}: {added} run(s) appended"
              + (f", {there} already there" if there else "")
              + (f", {len(records) - len(lines)} unsuccessful left out" if len(records) > len(lines) else ""),
              file=sys.stderr if args.format and not args.output else sys.stdout)
    if not (args.format or args.against_history or args.append_history or args.plot_history):
        render(out, recorded_command(out), Console(), plots=not args.no_plots)
    return code


def _record_paths(folder: Path, records: list[dict]) -> list[Path]:
    """Each record's file in the folder, whatever its name (matched by content)."""
    files = {history.run_id(read_record(p)): p for p in folder.glob("*dev.json")}
    return [files[history.run_id(r)] for r in records]


def _console() -> Console:
    # a pipe or log gets a width that fits the table, not rich's 80 columns
    return Console(width=None if sys.stdout.isatty() else 140)


def _compare_two(before: Path, after: Path, args) -> int:
    rows = comparison.compare_folders(load_records(before), load_records(after), args.noise)
    (after / "comparison.md").write_text(
        f"# {after} against {before}\n\n" + report.render_markdown(comparison.comparison_table(rows, True)) + "\n\n"
        + "".join(line + "\n\n" for line in comparison.comparison_notes(rows, args.noise)))
    return _verdicts(rows, args, _console())


def _verdicts(rows: list[dict], args, console: Console) -> int:
    """Print the comparison and its notes; the exit code: 1 when --fail-on-slower and a
    row is slower (rows with too few repeats for a verdict are named, not counted)."""
    console.print(comparison.comparison_table(rows))
    for line in comparison.comparison_notes(rows, args.noise):
        console.print(line, highlight=False, markup=False)
    slower = [r for r in rows if r["verdict"] == "slower"]
    return 1 if (slower and args.fail_on_slower) else 0


def _gate(folder: Path, args) -> int:
    """The folder against the history (common.reports.history.against)."""
    rows, missing = history.against(load_records(folder), history.read(args.against_history),
                                     args.last, args.noise)
    if not rows:
        raise UsageError(f"none of {folder}'s successful runs has a baseline in "
                         f"{args.against_history} (the same configuration and settings, steps per epoch, "
                         "threads and machine kind)")
    console = Console(stderr=True) if args.format and not args.output else _console()
    code = _verdicts(rows, args, console)
    baseline = "the last run" if args.last == 1 else f"the last {args.last} runs, their repeats together,"
    console.print(f"before: {baseline} of each configuration in {args.against_history}; "
                  + "; ".join(f"{r['framework']} {r['mode']} x{r['devices']}: {r['baseline']}"
                              for r in rows), highlight=False, markup=False)
    for row in missing:
        console.print(f"no baseline in the history: {history.label(row)}", highlight=False,
                      markup=False)
    return code


if __name__ == "__main__":
    sys.exit(main())
