"""Model mode's benchmark: `python -m benchmarks.pipeline [--framework all] [--out DIR]`.

For LeNet and ResNet-18: each framework's native 1-device step against its model
mode on 2 stages (and 4, ResNet-18 only: LeNet has two units) with M = 1, 4, 8
micro-batches, GPipe's schedule and 1F1B's, and against model mode on 1 stage (M = 1:
the whole model on one device, the same arithmetic as the pipeline's: the summed loss
backpropagated, SGD scaled after). Per run: the step time, the measured bubble against
(k-1)/(M+k-1), and per stage the micro-batches whose activations it held at once
(watched; GPipe M, 1F1B min(k-s, M) by the formula) and their bytes (measured where
the framework tells what its tape keeps, else calculated). Each run is a worker
process of its own (benchmarks.workers.run, as compare runs it), 2 epochs of a few steps on
synthetic data, the second epoch timed (the first pays the kernels' warm-up of every
micro-batch shape); --rounds N runs everything N times, interleaved, and reports the
median and range. Also the per-unit cost of ResNet-18 measured by the pipeline itself
(one stage per unit, busy seconds per stage) against the multiply-adds the cuts are
balanced on. Writes the records, report.md and each configuration's measured schedule
(schedule-*.png, the last round's last step) to --out (default
results/pipeline-<time>). A benchmark, not a test: nothing is asserted.
--probe-engines only says whether the frameworks' own pipeline engines
(torch.distributed.pipelining, Paddle's fleet PipelineParallel) run here."""
from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from common import models
from common.facts import registry
from common.core.pipeline import PipelineTrainer
from common.core.schedules import SCHEDULES
from common.core.plan import RunConfig
from common.facts.machine import cpu_line, env_info
from common.launch import launcher
from common.reports.plots import schedule_plots
from common.results.record import schedule_of
from common.results.timing import last_step_sec

from .cli import Parser, UsageError, add_models, int_list, names, results_dir
from .runner import run_config, worker_env
from .workers.run import QUIET_ENV

ROOT = Path(__file__).resolve().parent.parent
MICRO_BATCHES = (1, 4, 8)
STAGES = (2, 4)
# per model (its COMMANDS["pipeline"]): batch, steps per epoch (2 epochs, the second timed)
SHAPE = {name: (models.get(name).COMMANDS["pipeline"]["batch"],
                models.get(name).COMMANDS["pipeline"]["steps"]) for name in models.NAMES}


def record_of(cfg: RunConfig, out: Path, timeout: int, rnd: int) -> dict:
    """The record of one configuration: run in a worker, or the one --out already holds."""
    name = (f"{cfg.model}-{cfg.framework}-{cfg.mode}-{cfg.devices}dev-m{cfg.micro_batches}"
            f"{'-' + cfg.schedule if cfg.mode == 'model' else ''}-r{rnd}.json")
    path = out / name
    if path.exists() and json.loads(path.read_text()).get("status") == "ok":
        return json.loads(path.read_text())
    record, done = run_config(cfg.to_dict(), path, timeout)
    if record is None:
        why = f"timed out after {timeout} s" if done.timed_out else f"exit code {done.code}"
        return {**cfg.to_dict(), "status": "failed", "error": f"worker: {why}: {done.log_tail}"}
    return record


def median(records: list[dict], get) -> float | None:
    values = [v for v in (get(r) for r in records if r.get("status") == "ok") if v is not None]
    return statistics.median(values) if values else None


def spread(records: list[dict]) -> str:
    secs = [s for s in map(last_step_sec, records) if s is not None]
    return f"{min(secs):.3f}-{max(secs):.3f}" if len(secs) > 1 else "-"


def measure_units(framework: str, model: str, batch: int, steps: int, threads: int) -> list[float]:
    """Busy seconds per step of each unit of `model`, one pipeline stage per unit on one
    device (in this process: run it in a fresh one)."""
    m = models.get(model)
    b = registry.get(framework)
    b.setup(cpu_devices=len(m.UNITS), threads=threads)
    devices = [b.devices(1)[0]] * len(m.UNITS)
    trainer = PipelineTrainer(b, model, m.init_params(0, "chapter"), m.init_state(), devices, 0.1, 1)
    rng = np.random.default_rng(0)
    X = rng.random((batch, *m.IMAGE_SHAPE), dtype=np.float32)
    y = rng.integers(0, 10, batch).astype(np.int64)
    for _ in range(2):
        trainer.losses([trainer.step(X, y)])
    trainer.load_params(m.init_params(0, "chapter"), m.init_state())
    for _ in range(steps):
        trainer.losses([trainer.step(X, y)])
    return trainer.figures()["stage_sec"]


# Each model of more than two units has them measured one stage each (two units have one
# cut only), in this framework, at the model's own pipeline batch
UNITS_BY = "pytorch"


def units_batch(model: str) -> int:
    return models.get(model).COMMANDS["pipeline"]["batch"]


def with_units(names) -> list[str]:
    """The models among `names` whose units are worth measuring: more than two."""
    return [m for m in names if len(models.get(m).UNITS) > 2]


def _cut(model: str, costs, k: int = 2) -> list[str]:
    m = models.get(model)
    fake = SimpleNamespace(NAME=model, UNITS=m.UNITS, UNIT_COST=tuple(costs))
    return [f"{m.UNITS[lo][0]}..{m.UNITS[hi - 1][0]}" for lo, hi in models.stage_cuts(fake, k)]


def report(records: list[dict], units: dict, env: dict, load: tuple, command: str,
           wall: float) -> str:
    lines = ["# Model mode (pipeline) against the native 1-device step", "",
             f"Command: `{command}` ({wall / 60:.1f} min)", "",
             f"Machine: {cpu_line(env)}; GPU: "
             f"{env.get('gpu_model') or 'none'}; load average {load[0]} before, {load[1]} after "
             "(a machine shared with other work: figures move by 10-40 % from run to run)",
             "Libraries: " + ", ".join(f"{k} {v}" for k, v in env["libraries"].items()), ""]
    for model in dict.fromkeys(r["model"] for r in records):
        batch, steps = SHAPE[model]
        rows = [r for r in records if r["model"] == model]
        lines += [f"## {model}: batch {batch}, {steps} steps per epoch, the second epoch timed; "
                  "s/step: the median of the rounds (their range)", "",
                  "| framework | native x1 s/step | 1 stage s/step | stages | schedule | M | "
                  "pipeline s/step | vs native | vs 1 stage | stage s | hand-over s | MB/step | "
                  "bubble | (k-1)/(M+k-1) | held (formula) | activation MB (formula) | processes |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for fw in dict.fromkeys(r["framework"] for r in rows):
            def runs(mode, devices, M=1, schedule=None):
                return [r for r in rows if r["framework"] == fw and r["mode"] == mode
                        and r["devices"] == devices and r.get("micro_batches", 1) == M
                        and (schedule is None or schedule_of(r) == schedule)]
            base, one = median(runs("native", 1), last_step_sec), median(runs("model", 1), last_step_sec)
            for k, schedule, M in dict.fromkeys((r["devices"], schedule_of(r),
                                                 r["micro_batches"])
                                                for r in rows if r["framework"] == fw
                                                and r["mode"] == "model" and r["devices"] > 1):
                rs = runs("model", k, M, schedule)
                sec = median(rs, last_step_sec)
                lead = f"| {fw} | {_f(base)} | {_f(one)} | {k} | {schedule} | {M} |"
                if sec is None:
                    bad = next((r for r in rs if r.get("status") != "ok"), {})
                    lines.append(f"{lead} {bad.get('status')}: {(bad.get('error') or '')[:80]} "
                                 "| | | | | | | | | | |")
                    continue
                r = next(r for r in rs if r.get("status") == "ok")
                calc = " calc." if (r.get("activation_bytes_source") or "").startswith("calculation") else ""
                lines.append(
                    f"{lead} {_f(sec)} ({spread(rs)}) | "
                    f"{_f(base / sec if base else None, 2)} | {_f(one / sec if one else None, 2)} | "
                    + "/".join(_f(median(rs, lambda r, s=s: r["stage_sec"][s])) for s in range(k)) + " | "
                    f"{_f(median(rs, lambda r: r['handover_sec']), 4)} | "
                    f"{sum(r['bytes_between_stages']) / 1e6:.2f} | "
                    f"{_f(median(rs, lambda r: r['bubble']), 2)} | {r['bubble_gpipe']:.2f} | "
                    f"{_slash(r.get('stage_peak_micro_batches'))} "
                    f"({_slash(r.get('stage_peak_micro_batches_predicted'))}) | "
                    f"{_slash(r.get('stage_activation_bytes'), 1e6)} "
                    f"({_slash(r.get('stage_activation_bytes_predicted'), 1e6)}){calc} | "
                    f"{r['processes']} |")
        sources = dict.fromkeys(f"{r['framework']}: {r['activation_bytes_source']}" for r in rows
                                if r.get("activation_bytes_source"))
        lines += ["", "Activation bytes per stage at its peak (the micro-batches held x each one's "
                      "tape): " + "; ".join(sources) + ".", ""]
    for model, measured in units.items():
        m = models.get(model)
        macs = m.UNIT_COST
        lines += [f"## {model}'s units: multiply-adds and measured time", "",
                  f"One pipeline stage per unit on one device ({measured['framework']}, batch "
                  f"{measured['batch']}, busy seconds per step: forward, backward and SGD).", "",
                  "| unit | M multiply-adds / image | share | measured s/step | share |",
                  "|---|---|---|---|---|"]
        total_m, total_t = sum(macs), sum(measured["sec"])
        for u, c, t in zip(m.UNITS, macs, measured["sec"]):
            lines.append(f"| {u[0]} | {c / 1e6:.1f} | {c / total_m:.1%} | {t:.4f} | {t / total_t:.1%} |")
        lines += ["", f"2 stages balanced on multiply-adds: {' | '.join(_cut(model, macs))}; "
                      f"on the measured times: {' | '.join(_cut(model, measured['sec']))}.", ""]
    return "\n".join(lines)


def _engine_probe_rank(framework: str) -> None:
    """A rank of the probe of a framework's own pipeline engine: its pipeline.py's
    engine_probe_rank, imported in the rank (the parent imports no framework)."""
    importlib.import_module(f"{registry.facts(framework).package}.pipeline").engine_probe_rank()


def probe_engines() -> None:
    """Do the frameworks' own pipeline engines run here? Prints one line each."""
    for fw in ("pytorch", "paddle"):
        if not registry.is_installed(fw):
            print(f"{fw}: not installed")
            continue
        try:
            launcher.launch(_engine_probe_rank, 2, (fw,), env={"OMP_NUM_THREADS": "1", **QUIET_ENV})
        except launcher.LaunchError as e:
            print(f"{fw}: {e}")


def _f(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


def _slash(values, scale=None) -> str:
    """Per-stage figures as a/b/c (in millions with a scale)."""
    if not values:
        return "-"
    return "/".join(f"{v / scale:.2f}" if scale else str(v) for v in values)


def build_parser() -> Parser:
    p = Parser(prog="python -m benchmarks.pipeline", description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", default="all")
    add_models(p, "lenet,resnet18")
    # --schedule, as compare names it (--schedules: this command's first name for it)
    p.add_argument("--schedule", "--schedules", default=",".join(SCHEDULES),
                   help="the pipeline schedules to run, all or a comma-separated list of: "
                        + ", ".join(SCHEDULES))
    p.add_argument("--stages", type=int_list("--stages", "stage counts like 2,4", "must be 2 or more"),
                   default=list(STAGES), help="stage counts (at most each model's units: " + ", ".join(
                       f"{m} {len(models.get(m).UNITS)}" for m in models.NAMES) + ")")
    p.add_argument("--micro-batches", type=int_list("--micro-batches", "counts like 1,4,8",
                                                    "must be 1 or more"),
                   default=list(MICRO_BATCHES), help="micro-batch counts")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--out", default=None)
    p.add_argument("--rounds", type=int, default=2, help="runs of every configuration, interleaved")
    p.add_argument("--probe-engines", action="store_true",
                   help="only say whether torch.distributed.pipelining and Paddle's fleet "
                        "PipelineParallel run here (2 processes, gloo)")
    p.add_argument("--measure-units", default=None, metavar="FRAMEWORK",
                   help="only print the per-unit busy seconds of the first --model of more "
                        "than two units, at its pipeline batch, in FRAMEWORK (JSON)")
    return p


def main(argv=None) -> int:
    p = build_parser()
    try:
        args = p.parse_args(argv)
        schedules = names(args.schedule, SCHEDULES, "schedule")
        model_names = names(args.model, models.NAMES, "model")
        if args.stages[0] < 2:
            raise UsageError(f"--stages {args.stages[0]}: a pipeline has 2 stages or more")
    except UsageError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    if args.probe_engines:
        probe_engines()
        return 0
    if args.measure_units:
        several = with_units(model_names)
        if not several:
            have = ", ".join(with_units(models.NAMES))
            print(f"{p.prog}: error: --measure-units: none of --model {args.model} has more than "
                  f"two units; name one that has ({have})", file=sys.stderr)
            return 2
        print(json.dumps(measure_units(args.measure_units, several[0], units_batch(several[0]), 5,
                                       args.threads)))
        return 0
    frameworks = [f for f in (registry.NAMES if args.framework == "all" else args.framework.split(","))
                  if registry.is_installed(f)]
    out = results_dir(args.out, "pipeline-")
    out.mkdir(parents=True, exist_ok=True)
    start, load0 = time.time(), os.getloadavg()[0]
    records = []
    for rnd in range(1, args.rounds + 1):
        for model in model_names:
            batch, steps = SHAPE[model]
            # LeNet has two units: 2 stages at most
            ks = [k for k in args.stages if k <= len(models.get(model).UNITS)]
            for fw in frameworks:
                shared = dict(framework=fw, model=model, dataset="synthetic", epochs=2,
                              batch_size=batch, lr=0.1, steps_per_epoch=steps, eval_samples=64,
                              threads=args.threads)
                for cfg in [RunConfig(mode="native", devices=1, **shared),
                            RunConfig(mode="model", devices=1, **shared)] + [
                        RunConfig(mode="model", devices=k, micro_batches=m, schedule=schedule, **shared)
                        for k in ks for schedule in schedules for m in args.micro_batches]:
                    records.append(record_of(cfg, out, args.timeout, rnd))
                    r = records[-1]
                    print(f"round {rnd} {model} {fw} {cfg.mode} x{cfg.devices} M={cfg.micro_batches}"
                          f"{' ' + cfg.schedule if cfg.mode == 'model' and cfg.devices > 1 else ''}: "
                          f"{r['status']} {_f(last_step_sec(r))} s/step", flush=True)
    # the measured schedules of the last round (one panel per schedule and M)
    last = [r for r in records[-len(records) // args.rounds:]
            if r.get("mode") == "model" and r.get("devices", 1) > 1]
    schedule_plots(last, out)
    units = {}
    for model in with_units(model_names) if UNITS_BY in frameworks else []:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.pipeline", "--measure-units", UNITS_BY,
                               "--model", model, "--threads", str(args.threads)], cwd=ROOT,
                              env=worker_env(args.threads), capture_output=True, text=True,
                              timeout=args.timeout)
        if proc.returncode == 0:
            units[model] = {"framework": UNITS_BY, "batch": units_batch(model),
                            "sec": json.loads(proc.stdout.splitlines()[-1])}
    command = "python -m benchmarks.pipeline " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(records, units, env_info(), (f"{load0:.1f}", f"{os.getloadavg()[0]:.1f}"), command,
                  time.time() - start)
    (out / "report.md").write_text(text)
    print(text)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
