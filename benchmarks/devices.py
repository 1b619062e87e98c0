"""The chapters' device experiments in every framework: `python -m benchmarks.devices`.

Matrix products small to large beside NumPy's BLAS, a log read every step versus
kept on the device, two devices at once versus in sequence, asynchronous
execution, computation/copy overlap and copy bandwidth, parameters to a file and
back, and all-reduce by size (see common.experiments.device_experiments). Each framework runs in a
worker process of its own (benchmarks.workers.devices); an experiment that crashes
or times out is recorded as failed and a new worker goes on with the rest.
Results: one JSON record per framework and experiment, report.md and plots in
--out; a summary on the terminal (on stderr with --json, which keeps stdout for
the JSON list of records)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from common.experiments.device_experiments import EXPERIMENTS, new_record, record_filename
from common.facts import registry
from common.facts.machine import env_info
from common.results.record import write_atomic

from .cli import Parser, command_parser, finish, names, positive, run_command
from .rendering import render_devices
from .runner import Interrupts, run_worker, worker_env

ROOT = Path(__file__).resolve().parent.parent


def build_parser() -> Parser:
    p = command_parser("benchmarks.devices", __doc__)
    p.add_argument("--experiment", default="all",
                   help=f"all, or a comma-separated list of: {', '.join(EXPERIMENTS)}")
    p.add_argument("--device", default="all", choices=("cpu", "gpu", "all"),
                   help="device kinds to measure (all: the CPU and every GPU a framework sees)")
    p.add_argument("--repeat", type=positive, default=5,
                   help="timed repeats per measurement after the warm-up (the median is reported)")
    p.add_argument("--threads", type=positive, default=os.cpu_count() or 1,
                   help="CPU threads per framework (split between the ranks of a multi-process collective)")
    p.add_argument("--timeout", type=positive, default=600, help="seconds allowed per experiment")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes (seconds per framework): checks that everything runs and is right")
    p.add_argument("--out", default=None, help="results folder (default: results/devices-<time>)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--json", action="store_true",
                   help="print the JSON list of records on stdout, and nothing else there")
    return p


def resolve(args) -> tuple[list[str], list[str], list[str]]:
    frameworks = names(args.framework, registry.NAMES, "framework")
    experiments = names(args.experiment, EXPERIMENTS, "experiment")
    kinds = ["cpu", "gpu"] if args.device == "all" else [args.device]
    return frameworks, experiments, kinds


def _failed_record(framework: str, name: str, why: str, cfg: dict, status: str = "failed") -> dict:
    """The record of an experiment that did not run to its end (with the run's settings)."""
    return new_record(framework, name, status=status, error=why, env=env_info(),
                      device_kinds=cfg["kinds"], threads=cfg["threads"], repeat=cfg["repeat"],
                      quick=cfg["quick"])


def run_framework(framework: str, experiments: list[str], cfg: dict, out: Path, timeout: int,
                  on_done, stop: Interrupts | None = None) -> tuple[list[dict], bool]:
    """All of one framework's experiments, in as few worker processes as crashes allow.
    Returns its records and whether the user interrupted."""
    env = worker_env(cfg["threads"])
    remaining = list(experiments)
    records: dict[str, dict] = {}
    attempt = 0
    for name in remaining:
        (out / record_filename(framework, name)).unlink(missing_ok=True)
    while remaining:
        attempt += 1
        state = {"current": None, "begun": []}

        def on_line(line):
            if line.startswith("@begin "):
                state["current"] = line.split()[1]
                state["begun"].append(state["current"])
            elif line.startswith("@end "):
                name = line.split()[1]
                state["current"] = None
                on_done(name)

        log = out / "logs" / f"{framework}{'' if attempt == 1 else f'-{attempt}'}.log"
        argv = ["-m", "benchmarks.workers.devices",          # run_worker prepends python
                json.dumps({**cfg, "framework": framework, "experiments": remaining}), str(out)]
        ex = run_worker(argv, log, timeout * len(remaining), on_line, env=env, cwd=ROOT, stop=stop,
                        python=registry.python(framework))
        for name in state["begun"]:
            path = out / record_filename(framework, name)
            if path.exists() and name != state["current"]:
                records[name] = json.loads(path.read_text())
        if ex.interrupted:
            if state["current"] is not None:     # recorded as compare records its running run
                name = state["current"]
                records[name] = _failed_record(framework, name, "stopped by the user before it "
                                               "finished", cfg, status="interrupted")
                write_atomic(out / record_filename(framework, name), records[name])
            return [records[n] for n in experiments if n in records], True
        current = state["current"]
        if current is None and not state["begun"] and ex.code != 0:
            # it died before its first experiment (an import crash): all of them failed
            why = f"worker died before its first experiment (exit code {ex.code}); log {log}: {ex.log_tail}"
            for name in remaining:
                records[name] = _failed_record(framework, name, why, cfg)
                write_atomic(out / record_filename(framework, name), records[name])
                on_done(name)
            break
        if current is not None:
            if ex.timed_out:
                why = f"timed out (the worker is given {timeout} s per experiment)"
            elif ex.code is not None and ex.code < 0:
                why = f"worker crashed with signal {-ex.code}"
            else:
                why = f"worker died with exit code {ex.code}"
            records[current] = _failed_record(framework, current,
                                              f"{why} during this experiment; log {log}: {ex.log_tail}",
                                              cfg)
            write_atomic(out / record_filename(framework, current), records[current])
            on_done(current)
        before, remaining = len(remaining), [n for n in remaining if n not in records]
        if remaining and (ex.code == 0 or len(remaining) == before):
            # it exited without reaching them, or made no progress: don't loop
            for name in remaining:
                records[name] = _failed_record(
                    framework, name, f"the worker did not reach it (exit code {ex.code}); "
                    f"log {log}: {ex.log_tail}", cfg)
                write_atomic(out / record_filename(framework, name), records[name])
            break
    return [records[n] for n in experiments if n in records], False


def main(argv=None) -> int:
    return run_command("devices", build_parser(), argv, resolve,
                       "devices-",
                       lambda args, chosen, out: _measure(args, argv, *chosen, out))


def _measure(args, argv, frameworks, experiments, kinds, out: Path) -> int:
    err = Console(stderr=True)
    shown = err if args.json else Console(width=None if sys.stdout.isatty() else 160)
    cfg = {"kinds": kinds, "repeat": args.repeat, "quick": args.quick, "threads": args.threads}

    records, interrupted = [], False
    columns = (TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[status]}"))
    with Interrupts() as stop, Progress(*columns, console=err, transient=False) as progress:
        for fw in frameworks:
            task = progress.add_task(fw, total=len(experiments), status="")
            if not registry.is_installed(fw):
                for name in experiments:
                    r = _failed_record(fw, name, registry.not_installed(fw),
                                       cfg, status="not-installed")
                    write_atomic(out / record_filename(fw, name), r)
                    records.append(r)
                progress.update(task, completed=len(experiments), status="not installed")
                continue
            done, interrupted = run_framework(
                fw, experiments, cfg, out, args.timeout,
                lambda name, t=task: progress.update(t, advance=1, status=name), stop)
            records += done
            failed = sum(r["status"] == "failed" for r in done)
            progress.update(task, status=f"{failed} failed" if failed else "done")
            progress.stop_task(task)
            if interrupted:
                break

    return finish("benchmarks.devices", argv, out, records,
                  lambda command: render_devices(out, command, shown, plots=not args.no_plots,
                                                 records=records),
                  args.json, interrupted, stop, err)


if __name__ == "__main__":
    sys.exit(main())
