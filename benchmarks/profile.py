"""Every row's training step, op by op, from each framework's own profiler:
`python -m benchmarks.profile`.

For each model and each framework and mode that compare runs by default, on 1 device
with the same threads: one worker process (compare's) warms up as compare does, runs a
window of steps without the profiler and one under the framework's own profiler
(torch.profiler, TensorFlow's and JAX's profilers, paddle.profiler, mxnet.profiler),
and attributes the profiled window's time to op classes by its rules
(common/results/profile.py). The machine's limits are measured first (a float32 GEMM
and a streaming copy on the run's threads) for each class's roofline. DIR/profile.md and
DIR/profile-<model>.png, rebuilt from the records alone with --report DIR. A framework
whose profiler cannot run is a row that says why."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from common import models
from common.core.modes import MODES
from common.experiments import gemm
from common.facts import registry
from common.facts.machine import gpu_count
from common.reports import profile as report
from common.results.record import write_atomic

from .cli import UsageError, add_models, command_parser, names, positive, recorded_command, run_command
from . import tuned
from .runner import Interrupts, run_config

TIMEOUT = 1800.0                   # one row's worker (ResNet-18's Paddle: minutes)
LIMITS_FILE = "limits.json"


def build_parser():
    p = command_parser("benchmarks.profile", __doc__)
    add_models(p, "lenet,resnet18")
    p.add_argument("--mode", default="default",
                   help="modes to profile: default (compare's), or a comma-separated list")
    p.add_argument("--steps", type=positive, default=None,
                   help="profiled steps per row (default per model: its COMMANDS['profile'])")
    p.add_argument("--batch-size", type=positive, default=None,
                   help="images per step (default per model: its COMMANDS['profile'])")
    p.add_argument("--threads", type=positive, default=os.cpu_count() or 1)
    p.add_argument("--dataset", default="synthetic",
                   help="synthetic (op time does not depend on the pixels) or fashion-mnist")
    p.add_argument("--settings", default="none", help=tuned.OPTION_HELP)
    p.add_argument("--out", default=None, help="results folder (default: results/profile-<time>)")
    p.add_argument("--report", default=None, metavar="DIR",
                   help="rebuild DIR/profile.md and its plots from DIR's records; runs nothing")
    return p


def plan(args) -> list[dict]:
    """The worker configurations, in order: every model, framework and mode."""
    frameworks = names(args.framework, registry.NAMES, "framework", registry.groups())
    modes = ([m for m, mode in MODES.items() if mode.default] if args.mode == "default"
             else names(args.mode, MODES, "mode"))
    runs = []
    for model in names(args.model, models.NAMES, "model"):
        own = models.get(model).COMMANDS["profile"]
        chosen = tuned.resolve(args.settings, frameworks, modes, model)
        for f in frameworks:
            for m in modes:
                if (f, m) in registry.KNOWN_GAPS:
                    continue
                runs.append({"framework": f, "mode": m, "devices": 1, "model": model,
                             "dataset": args.dataset, "batch_size": args.batch_size or own["batch"],
                             "threads": args.threads,
                             "profile_steps": args.steps or own["steps"],
                             **tuned.applied(f, m, None, chosen.get(f"{f}/{model}/{m}")
                                             or chosen.get(f) or [])})
    return runs


def limits(out: Path, threads: int) -> dict:
    """This machine's GEMM peak and memory bandwidth on the run's threads, measured once
    per results folder (nothing else should be running); the GPU's where one runs the
    rows (a row on 1 device takes the first GPU)."""
    if gpu_count():
        peak, stream = gemm.gpu_limits(out)
        return {"gflops": peak.get("gflops"), "gemm_library": peak.get("library", peak.get("error")),
                "gb_per_s": stream.get("gb_per_s"),
                "stream_library": stream.get("library", stream.get("error")), "device": "gpu:0"}
    peak = gemm.cpu_peak(out, threads, gemm.GEMM_SIZE)
    stream = gemm.cpu_bandwidth(out, threads)
    return {"gflops": peak.get("gflops"), "gemm_library": peak.get("library", peak.get("error")),
            "gb_per_s": stream.get("gb_per_s"),
            "stream_library": stream.get("library", stream.get("error")), "threads": threads}


def record_name(cfg: dict) -> str:
    tuned_ = "".join(f"+{s}" for s in cfg.get("settings") or ())
    return f"{cfg['model']}-{cfg['framework']}-{cfg['mode']}{tuned_}.json"


def measure(args, runs: list[dict], out: Path) -> int:
    (out / "command.txt").write_text(" ".join(["python -m benchmarks.profile", *args.argv]))
    write_atomic(out / LIMITS_FILE, limits(out, args.threads))
    code = 0
    with Interrupts() as stop:
        for cfg in runs:
            path = out / record_name(cfg)
            print(f"{cfg['model']} {cfg['framework']} {cfg['mode']} ...", flush=True)
            record, done = run_config(cfg, path, TIMEOUT, out / "logs" / path.with_suffix(".log").name,
                                      stop=stop)
            if record is None:
                record = {**cfg, "status": "failed", "error": (
                    f"the worker {'timed out' if done.timed_out else 'ended'} without a "
                    f"record (exit {done.code}): {done.log_tail}")}
                write_atomic(path, record)
            if record["status"] == "failed":
                code = 1
            if stop.signum:
                break
    write_page(out)
    return stop.exit_code or code


def write_page(out: Path) -> int:
    # a folder's subfolders count too: one run each (a framework at two versions)
    records = report.labelled([json.loads(p.read_text()) for p in sorted(out.rglob("*.json"))
                               if p.name not in (LIMITS_FILE, gemm.PEAK_FILE, gemm.BANDWIDTH_FILE,
                                                 gemm.GPU_PEAK_FILE, gemm.GPU_BANDWIDTH_FILE)])
    if not records:
        print(f"profile: error: no records in {out}", file=sys.stderr)
        return 2
    lims = json.loads((out / LIMITS_FILE).read_text()) if (out / LIMITS_FILE).exists() else {}
    plots = {}
    for model in dict.fromkeys(r["model"] for r in records):
        rows = sorted(report.ok([r for r in records if r["model"] == model]),
                      key=lambda r: r["profile"]["window_ms"])
        if rows:
            plots[model] = f"profile-{model}.png"
            report.plot(rows, out / plots[model], f"{model}: ms per step by op class")
    page = report.markdown(records, lims, recorded_command(out), plots)
    (out / "profile.md").write_text(page)
    print(page)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--report" or a.startswith("--report=") for a in argv):
        try:
            args = build_parser().parse_args(argv)
            if not Path(args.report).is_dir():
                raise UsageError(f"--report {args.report} is not a folder; give a profile "
                                 "results folder")
        except UsageError as e:
            print(f"profile: error: {e}", file=sys.stderr)
            return 2
        return write_page(Path(args.report))

    def resolve(args):
        args.argv = argv
        if args.dataset not in ("synthetic", "fashion-mnist"):
            raise UsageError(f"unknown --dataset {args.dataset!r}; choose synthetic or fashion-mnist")
        runs = plan(args)
        if not runs:
            raise UsageError("nothing to profile: every framework and mode named is a known gap")
        return runs
    return run_command("profile", build_parser(), argv, resolve, "profile-", measure)


if __name__ == "__main__":
    sys.exit(main())
