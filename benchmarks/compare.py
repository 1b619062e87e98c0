"""Compare the frameworks side by side: `python -m benchmarks.compare --framework all`.

Each (framework, mode, device count) runs in a worker process of its own
(benchmarks.worker); a crash or time-out there is recorded in that run's record
and the others go on. Results: one JSON record per run, report.md and plots in
--out; a table on the terminal (on stderr with --json, which keeps stdout for
the JSON list of records)."""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from common import data, models, registry
from common.modes import MODES
from common.results import FAILED, RunConfig, env_info, new_record, record_filename, write_atomic

from .report import render
from .runner import Interrupts, run_worker
from .worker import QUIET_ENV, thread_env

ROOT = Path(__file__).resolve().parent.parent


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):            # one line, exit code 2
        raise UsageError(message)


def _integer(minimum, rule):
    """An argparse type: an integer of at least `minimum`, else `rule` in the message."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{text} must be {rule}")
        return v
    return parse


_positive = _integer(1, "at least 1")
_non_negative = _integer(0, "0 or more")


def _positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
    return v


def _device_counts(text):
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--devices takes device counts like 1,2; got {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"device counts must be 1 or more; got {text!r}")
    return counts


def build_parser() -> Parser:
    p = Parser(prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0],
               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--framework", default="all",
                   help=f"all, or a comma-separated list of: {', '.join(registry.NAMES)}")
    p.add_argument("--model", default="lenet", choices=models.NAMES,
                   help="the network to train (resnet18 costs about 200x LeNet per image)")
    p.add_argument("--mode", default=",".join(m.name for m in MODES.values() if m.default),
                   help="all, or a comma-separated list of: " +
                        "; ".join(f"{m.name} ({m.description})" for m in MODES.values()))
    p.add_argument("--devices", type=_device_counts, default=None,
                   help="device counts to run, e.g. 1,2; repeats are dropped (default: 1 and "
                        "every GPU; 1 and 2 virtual CPU devices without GPUs)")
    p.add_argument("--epochs", type=_positive, default=1)
    p.add_argument("--batch-size", type=_positive, default=256,
                   help="global batch, split over the devices (fixed whatever the device count)")
    p.add_argument("--batch-per-device", type=_positive, default=None,
                   help="weak scaling instead: the batch grows with the device count (this "
                        "times k on k devices) and so does the learning rate (--lr times k); "
                        "--batch-per-device 256 --lr 0.1 is the chapter's ResNet protocol")
    p.add_argument("--lr", type=_positive_float, default=0.2)
    p.add_argument("--sync-bn", action="store_true",
                   help="synchronised BatchNorm across replicas (native mode, models with BatchNorm)")
    p.add_argument("--dataset", default="fashion-mnist", choices=("fashion-mnist", "synthetic"))
    p.add_argument("--data-dir", default=None, help="folder with the four Fashion-MNIST IDX files")
    p.add_argument("--steps-per-epoch", type=_positive, default=None,
                   help="cap on steps per epoch, for quick runs")
    p.add_argument("--eval-samples", type=_positive, default=None,
                   help="evaluate on the first N test images only (default: all), for quick looks")
    p.add_argument("--seed", type=_non_negative, default=0)
    p.add_argument("--threads", type=_positive, default=os.cpu_count() or 1,
                   help="CPU threads per run (split between the processes of a multi-process run)")
    p.add_argument("--timeout", type=_positive, default=3600, help="seconds allowed per run")
    p.add_argument("--out", default=None, help="results folder (default: results/<time>)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--json", action="store_true",
                   help="print the JSON list of run records on stdout, and nothing else there")
    return p


def gpu_count() -> int:
    """GPUs on this machine, asked of the driver (importing no framework)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def resolve(args) -> tuple[list[str], list[str], list[int]]:
    """Validate the arguments that argparse cannot; raise UsageError with the fix."""
    if args.framework == "all":
        frameworks = list(registry.NAMES)
    else:
        frameworks = [f.strip() for f in args.framework.split(",")]
        if "" in frameworks:
            raise UsageError(f"--framework {args.framework!r} has an empty name; give names "
                             f"separated by single commas, e.g. pytorch,mxnet")
        frameworks = list(dict.fromkeys(frameworks))
        for f in frameworks:
            try:
                registry.check_name(f)
            except registry.UnknownFramework as e:
                raise UsageError(f"{e} (or all)") from None
    modes = list(MODES) if args.mode == "all" else list(dict.fromkeys(
        m.strip() for m in args.mode.split(",") if m.strip()))
    for m in modes:
        if m not in MODES:
            raise UsageError(f"unknown mode {m!r}; choose from: {', '.join(MODES)} (or all)")
    gpus = gpu_count()
    counts = args.devices or (sorted({1, gpus}) if gpus else [1, 2])
    if args.sync_bn and not models.get(args.model).STATE_NAMES:
        raise UsageError(f"--sync-bn needs a model with BatchNorm; {args.model} has none")
    if args.batch_per_device is None and args.batch_size < max(counts):
        raise UsageError(f"--batch-size {args.batch_size} is smaller than {max(counts)} devices: "
                         "every device needs at least one example; raise --batch-size")
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise UsageError(f"--data-dir {args.data_dir} does not exist; give the folder holding "
                         "the Fashion-MNIST IDX files")
    if args.dataset == "fashion-mnist":
        try:
            data.locate_fashion_mnist(args.data_dir)
        except data.DataError as e:
            raise UsageError(str(e)) from None
    if args.out is not None:          # last: it is the one check that creates something
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
            probe = out / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise UsageError(f"--out {args.out} cannot be created or written ({e.strerror}); "
                             "choose a writable folder") from None
    return frameworks, modes, counts


def _worker(cfg: RunConfig, out_path: Path, log_path: Path, timeout: int, advance,
            estimated, stop: Interrupts) -> dict:
    """Run one configuration in its own process; always returns a record."""
    env = {**os.environ, **QUIET_ENV, **thread_env(cfg.threads)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out_path.unlink(missing_ok=True)

    def on_line(line):                      # '@step' lines, one per training step
        if line.startswith("@step"):
            advance()
        elif line.startswith("@estimate"):
            estimated(float(line.split()[1]))

    done = run_worker(["-m", "benchmarks.worker", json.dumps(cfg.to_dict()), str(out_path)],
                      log_path, timeout, on_line, env=env, cwd=ROOT, stop=stop)
    if out_path.exists() and not (done.timed_out or done.interrupted):
        return json.loads(out_path.read_text())
    record = new_record(cfg)
    record["env"] = env_info()
    if done.interrupted:
        record.update(status="interrupted", error=f"interrupted by {signal.Signals(stop.signum).name}")
    else:
        code = done.code
        why = (f"timed out after {timeout} s" if done.timed_out else
               f"worker died with exit code {code}" + (" (a crash: signal %d)" % -code if code < 0 else ""))
        record["error"] = f"{why}; log {log_path}: {done.log_tail}"
    write_atomic(out_path, record)
    return record


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        frameworks, modes, counts = resolve(args)
    except UsageError as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or ROOT / "results" / time.strftime("%Y%m%d-%H%M%S"))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    err = Console(stderr=True)
    # a log file or pipe gets a width that fits the table, not rich's 80 columns
    shown = err if args.json else Console(width=None if sys.stdout.isatty() else 140)

    n_train = data.train_size(args.dataset, args.data_dir, args.seed)
    weak = args.batch_per_device is not None
    runs = [RunConfig(framework=f, mode=m, devices=n, model=args.model, dataset=args.dataset,
                      data_dir=args.data_dir, epochs=args.epochs,
                      batch_size=args.batch_per_device * n if weak else args.batch_size,
                      lr=args.lr * n if weak else args.lr, batch_per_device=args.batch_per_device,
                      sync_bn=args.sync_bn, seed=args.seed, threads=args.threads,
                      steps_per_epoch=args.steps_per_epoch, eval_samples=args.eval_samples)
            for f in frameworks for m in modes for n in counts]
    records = []
    columns = (TextColumn("{task.description:<26}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[status]}"))
    with Interrupts() as stop, Progress(*columns, console=err, transient=False) as progress:
        for cfg in runs:
            if stop.signum:
                break                        # what finished stays; the rest is not started
            name = f"{cfg.framework} {cfg.mode} x{cfg.devices}"
            steps = n_train // cfg.batch_size
            steps = min(steps, cfg.steps_per_epoch) if cfg.steps_per_epoch else steps
            task = progress.add_task(name, total=steps * cfg.epochs, status="")
            path = out / record_filename(new_record(cfg))
            if not registry.is_installed(cfg.framework):
                record = new_record(cfg)
                record.update(status="not-installed", env=env_info(),
                              error=f"not installed: {registry.install_hint(cfg.framework)}")
                write_atomic(path, record)
            else:
                def estimated(seconds, name=name, epochs=cfg.epochs):
                    if seconds * epochs > 60:        # worth saying before a long run
                        progress.console.print(
                            f"{name}: about {seconds * epochs / 60:.1f} min for {epochs} epoch(s), "
                            "estimated from a timed warm-up step", highlight=False, markup=False)
                record = _worker(cfg, path, out / "logs" / (path.stem + ".log"), args.timeout,
                                 lambda t=task: progress.advance(t), estimated, stop)
            progress.update(task, status=record["status"])
            progress.stop_task(task)
            records.append(record)

    command = "python -m benchmarks.compare " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    render(out, command, shown, plots=not args.no_plots, records=records)
    if args.json:
        print(json.dumps(records, indent=1))
    if stop.signum:
        return stop.exit_code
    return 1 if any(r["status"] in FAILED for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
