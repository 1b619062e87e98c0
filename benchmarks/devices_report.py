"""Render a device-experiments results folder again: `python -m benchmarks.devices_report DIR`.

Reads the JSON records that benchmarks.devices wrote there and rewrites
report.md and the plots, printing the summary; nothing is measured."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from .cli import recorded_command
from .rendering import render_devices


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.devices_report",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--no-plots", action="store_true")
    return p


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    out = Path(args.folder)
    if not any(out.glob("*.devices.json")):
        print(f"devices_report: error: no records (*.devices.json) in {out}; "
              "give a benchmarks.devices results folder", file=sys.stderr)
        return 2
    render_devices(out, recorded_command(out), Console(), plots=not args.no_plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
