"""The Keras chapter's device-scopes example in every framework: `python -m benchmarks.device_scopes`.

A shared LSTM(64) encodes two sequences (140, 256), branch a on one device, branch b
on another, the merge (concatenation, Dense(1, sigmoid)) on the CPU; trained a few
SGD steps on a synthetic task, on one device and on the two-branch placement (see
common.experiments.scopes). Each framework runs in a worker process of its own
(benchmarks.workers.device_scopes). Results: one JSON record per framework and
placement and report.md in --out; the table on the terminal (on stderr with
--json, which keeps stdout for the JSON list of records)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from common.experiments import scopes
from common.facts import registry
from common.reports import scopes as scopes_report
from common.facts.machine import env_info
from common.results.record import write_atomic

from .cli import (COMMAND_FILE, Parser, command_parser, finish, names, non_negative, positive,
                  positive_float, run_command)
from .runner import Interrupts, run_worker, worker_env

ROOT = Path(__file__).resolve().parent.parent


def build_parser() -> Parser:
    p = command_parser("benchmarks.device_scopes", __doc__)
    p.add_argument("--steps", type=positive, default=scopes.DEFAULT_STEPS,
                   help="timed SGD steps per placement (after the warm-up)")
    p.add_argument("--batch", type=positive, default=scopes.DEFAULT_BATCH,
                   help="sequence pairs per step")
    p.add_argument("--lr", type=positive_float, default=scopes.DEFAULT_LR, help="SGD learning rate")
    p.add_argument("--warmup", type=non_negative, default=scopes.DEFAULT_WARMUP,
                   help="untimed steps before the timed ones (the parameters are reset after them)")
    p.add_argument("--seed", type=non_negative, default=0, help="initial weights and batches")
    p.add_argument("--threads", type=positive, default=os.cpu_count() or 1,
                   help="CPU threads per framework")
    p.add_argument("--timeout", type=positive, default=600, help="seconds allowed per framework")
    p.add_argument("--out", default=None, help="results folder (default: results/scopes-<time>)")
    p.add_argument("--json", action="store_true",
                   help="print the JSON list of records on stdout, and nothing else there")
    return p


def _failed(cfg: dict, placement: str, why: str, status: str = "failed") -> dict:
    return scopes.new_record(scopes.Config(**cfg), placement, status=status, error=why,
                             env=env_info())


def run_framework(cfg: dict, out: Path, timeout: int, stop: Interrupts) -> tuple[list[dict], bool]:
    """One framework's placements in a worker process. Records of placements it did
    not finish (a crash, a time-out, Ctrl-C) are written here. Returns its records and
    whether the user interrupted."""
    fw = cfg["framework"]
    env = worker_env(cfg["threads"])
    for name in scopes.PLACEMENTS:
        (out / scopes.record_filename(fw, name)).unlink(missing_ok=True)
    state = {"current": None}

    def on_line(line):
        if line.startswith("@begin "):
            state["current"] = line.split()[1]
        elif line.startswith("@end "):
            state["current"] = None

    log = out / "logs" / f"{fw}.log"
    ex = run_worker(["-m", "benchmarks.workers.device_scopes", json.dumps(cfg), str(out)], log,
                    timeout, on_line, env=env, cwd=ROOT, stop=stop, python=registry.python(fw))
    if ex.interrupted:
        why, status = "stopped by the user before it finished", "interrupted"
    elif ex.timed_out:
        why, status = f"timed out (the worker is given {timeout} s per framework)", "failed"
    elif ex.code is not None and ex.code < 0:
        why, status = f"worker crashed with signal {-ex.code}", "failed"
    else:
        why, status = f"worker exited with code {ex.code} before it", "failed"
    records = []
    for name in scopes.PLACEMENTS:
        path = out / scopes.record_filename(fw, name)
        if path.exists():
            records.append(json.loads(path.read_text()))
        elif not ex.interrupted or name == state["current"]:
            where = "during this placement" if name == state["current"] else "before this placement"
            record = _failed(cfg, name, f"{why} ({where}); log {log}: {ex.log_tail}", status)
            write_atomic(path, record)
            records.append(record)
    return records, ex.interrupted


def summary_table(records: list[dict]) -> Table:
    t = Table(title="device scopes: one shared LSTM, two branches")
    for _, header in scopes_report.COLUMNS:
        t.add_column(header)
    for row in scopes_report.summary_rows(records):
        t.add_row(*[str(row[k]) for k, _ in scopes_report.COLUMNS])
    return t


def render(out: Path, command: str, console: Console, records: list[dict]) -> None:
    (out / COMMAND_FILE).write_text(command + "\n")
    (out / "report.md").write_text(scopes_report.markdown_report(records, command))
    console.print(summary_table(records))
    console.print(f"results: {out} (report.md)")


def main(argv=None) -> int:
    return run_command("device_scopes", build_parser(), argv,
                       lambda args: names(args.framework, registry.NAMES, "framework"),
                       "scopes-",
                       lambda args, frameworks, out: _measure(args, argv, frameworks, out))


def _measure(args, argv, frameworks: list[str], out: Path) -> int:
    err = Console(stderr=True)
    shown = err if args.json else Console(width=None if sys.stdout.isatty() else 200)
    records, interrupted = [], False
    with Interrupts() as stop:
        for fw in frameworks:
            cfg = scopes.Config(fw, steps=args.steps, batch=args.batch, lr=args.lr,
                                seed=args.seed, warmup=args.warmup, threads=args.threads).to_dict()
            if not registry.is_installed(fw):
                for name in scopes.PLACEMENTS:
                    r = _failed(cfg, name, registry.not_installed(fw),
                                status="not-installed")
                    write_atomic(out / scopes.record_filename(fw, name), r)
                    records.append(r)
                continue
            err.print(f"{fw}: running", highlight=False)
            done, interrupted = run_framework(cfg, out, args.timeout, stop)
            records += done
            err.print(f"{fw}: " + ", ".join(f"{r['placement']} {r['status']}" for r in done),
                      highlight=False)
            if interrupted:
                break
    return finish("benchmarks.device_scopes", argv, out, records,
                  lambda command: render(out, command, shown, records), args.json, interrupted,
                  stop, err)


if __name__ == "__main__":
    sys.exit(main())
