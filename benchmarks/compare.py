"""Compare the frameworks side by side: `python -m benchmarks.compare --framework all`.

Each (framework, mode, device count) runs in a worker process of its own
(benchmarks.workers.run); a crash or time-out there is recorded in that run's record
and the others go on. Results: one JSON record per run, report.md and plots in
--out; a table on the terminal (on stderr with --json, which keeps stdout for
the JSON list of records). Ctrl-C or SIGTERM stops the running worker, records it
as interrupted and writes the report of what finished (exit 130 / 143);
--resume DIR finishes such a comparison, --repeat N measures every configuration
N times."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from common.facts import data, registry
from common import models
from common.core.modes import MODES
from common.core.perf import SERVER_PLACEMENTS
from common.core.schedules import SCHEDULES
from common.core.plan import RunConfig
from common.experiments import gemm
from common.facts.machine import env_info, gpu_count
from common.launch import networks, progress as progress_lines
from common.results import utilisation
from common.results.record import (FAILED, REPEAT_KEYS, RecordError, mark_not_installed, new_record,
                                   ok_repeats, read_record, record_filename, write_atomic)

from .cli import (LOCK_FILE, Parser, UsageError, claim_out, fraction, lock_holder, names,
                  non_negative, positive, positive_float, results_dir)
from . import tuned
from .rendering import render
from .runner import Interrupts, run_config

PLAN_FILE = "comparison.json"      # what a results folder was asked to hold (for --resume)
# Chosen so that `make compare` on a 2-core CPU ends within 15 minutes and every
# row shows a model that learned (docs/compare.md, "Defaults, and why"): from the
# default Glorot weights every framework and mode is at 0.765-0.772 test accuracy after
# the first epoch and 0.75-0.78 after the second (measured, with full kernels and capped
# at AVX2; docs/results/cpu-2core-default.md). Without GPUs the default runs 1 device:
# virtual devices share the same cores (ideal speed-up 1).
DEFAULT_EPOCHS = 2
CPU_DEFAULT_DEVICES = [1]
# The CPU peak's product (--peak-gemm-size): measured here on 1 and 2 threads, n = 2048
# reached 84-88 GFLOP/s against 92-94 at benchmarks.speed's 4096 (within the machine's
# noise) in an eighth of the time (about 1 s of products; 3 s with torch's import)
PEAK_GEMM_SIZE = 2048
# Across machines, the modes run unless --mode names others: each framework's engine
CLUSTER_MODES = "native"
# what each option shared by every run means when it is not given (and when a stored
# plan is older than the option): RunConfig's defaults
RUN_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}


def _device_counts(text):
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--devices takes device counts like 1,2; got {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"device counts must be 1 or more; got {text!r}")
    return counts


class OldNetwork(argparse.Action):
    """--launcher, --network's name before it, with its old values: mapped to the new
    ones, saying so in one line on stderr."""

    def __call__(self, parser, namespace, value, option_string=None):
        new = networks.OLD_NAMES[value]
        print(f"compare: note: {option_string} {value} is now --network {new} (the old name "
              "is accepted for one release)", file=sys.stderr)
        setattr(namespace, self.dest, new)


def build_parser() -> Parser:
    p = Parser(prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0],
               allow_abbrev=False, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--framework", default="all",
                   help=f"all, or a comma-separated list of: {', '.join(registry.NAMES)}; "
                        "keras: every installed Keras backend")
    p.add_argument("--model", default="lenet", choices=models.choices(),
                   help="the network to train (resnet18 costs about 200x LeNet per image; vit is "
                        "d2l's Vision Transformer at the default size, vit_d2l at the book's, its "
                        "images resized to 96 pixels)")
    p.add_argument("--init", default=RUN_DEFAULTS["init"], choices=models.INITS,
                   help="how the weights start, the same NumPy arrays in every framework: " +
                        "; ".join(f"{k}: {v}" for k, v in models.INITS.items()))
    p.add_argument("--mode", default=None,
                   help="all, or a comma-separated list of (default: " +
                        ",".join(m.name for m in MODES.values() if m.default) +
                        f"; {CLUSTER_MODES} with --nodes): " +
                        "; ".join(f"{m.name} ({m.description}" + "".join(
                            f"; takes --{o.replace('_', '-')}" for o in m.options) + ")"
                                  for m in MODES.values()))
    p.add_argument("--execution", default="default",
                   help="default (what each framework's mode runs: named in every row), all, or "
                        "a comma-separated list of: " +
                        "; ".join(f"{k} ({v})" for k, v in registry.EXECUTIONS.items()) +
                        ". Where a framework lacks one, its row says not-applicable and why")
    p.add_argument("--devices", type=_device_counts, default=None,
                   help="device counts to run, e.g. 1,2; repeats are dropped (default: 1 and "
                        "every GPU; 1 alone without GPUs, where virtual devices would share "
                        "the same cores)")
    p.add_argument("--epochs", type=positive, default=DEFAULT_EPOCHS,
                   help="epochs per run (the chapter's protocol: 10, with --init chapter)")
    p.add_argument("--batch-size", type=positive, default=256,
                   help="global batch, split over the devices (fixed whatever the device count)")
    p.add_argument("--batch-per-device", type=positive, default=None,
                   help="weak scaling instead: the batch grows with the device count (this "
                        "times k on k devices) and so does the learning rate (--lr times k); "
                        "--batch-per-device 256 --lr 0.1 is the chapter's ResNet protocol")
    p.add_argument("--lr", type=positive_float, default=0.2)
    p.add_argument("--micro-batches", type=positive, default=1,
                   help="model mode: each batch flows through the stages in this many "
                        "micro-batches (at most the batch)")
    p.add_argument("--schedule", default=RUN_DEFAULTS["schedule"],
                   help="model mode: the micro-batches' order, all or a comma-separated list "
                        "(each a row of its own; the other modes run once) of: " +
                        "; ".join(f"{k}: {v}" for k, v in SCHEDULES.items()))
    p.add_argument("--sync-bn", action="store_true",
                   help="synchronised BatchNorm across replicas (native mode, models with BatchNorm)")
    p.add_argument("--dataset", default="fashion-mnist", choices=("fashion-mnist", "synthetic"))
    p.add_argument("--data-dir", default=None, help="folder with the four Fashion-MNIST IDX files")
    p.add_argument("--steps-per-epoch", type=positive, default=None,
                   help="cap on steps per epoch, for quick runs")
    p.add_argument("--eval-samples", type=positive, default=None,
                   help="evaluate on the first N test images only (default: all), for quick looks")
    p.add_argument("--seed", type=non_negative, default=0)
    p.add_argument("--threads", type=positive, default=os.cpu_count() or 1,
                   help="CPU threads per run (split between the processes of a multi-process run)")
    p.add_argument("--cores-per-device", type=positive, default=None, metavar="C",
                   help="honest CPU scaling: pin every device (a process, or its share of one) "
                        "to C cores of its own with C threads, so that k devices use k x C "
                        "cores and the ideal speed-up is k (without it every run shares all "
                        "the cores: ideal 1); --threads is then C x devices")
    p.add_argument("--target-accuracy", type=fraction, default=None, metavar="A",
                   help="also record the training time and epochs until test accuracy (evaluated "
                        "after every epoch) first reaches A, e.g. 0.7; --epochs is the most it gets")
    p.add_argument("--nodes", type=positive, default=1,
                   help="run across this many machines, each framework on its own engine "
                        "(torchrun, paddle.distributed.launch, TF_CONFIG workers, MXNet's "
                        "dist_sync parameter server): run the same command on every machine "
                        "with its --node-rank and node 0's --master; --devices is then per "
                        "machine, and --mode defaults to native")
    p.add_argument("--node-rank", type=non_negative, default=None,
                   help="this machine's place among the --nodes (0 is the master)")
    p.add_argument("--master", default=None, metavar="HOST:PORT",
                   help="node 0's address and a free port there, the same on every machine")
    p.add_argument("--node-hosts", default=None, metavar="HOST,HOST,...",
                   help="every machine's address in node order; TensorFlow and Keras need it "
                        "(TF_CONFIG lists every worker)")
    p.add_argument("--network", choices=networks.NETWORKS, default=RUN_DEFAULTS["network"],
                   help="; ".join(f"{k.name}: {k.about}" for k in networks.NETWORKS.values()))
    p.add_argument("--launcher", dest="network", choices=networks.OLD_NAMES, action=OldNetwork,
                   default=argparse.SUPPRESS,
                   help="--network's old name, with its old values (" + ", ".join(
                       f"{old} for {new}" for old, new in networks.OLD_NAMES.items())
                   + "): accepted for one release")
    p.set_defaults(slurm=None)        # the allocation, filled in by --network slurm
    p.add_argument("--link", default=None, metavar="RATE",
                   help=f"with --network {networks.Netns.name}: each node's egress shaped to "
                        "RATE (tc's units: 10mbit, 100mbit, 1gbit) or `unshaped` (the default)")
    p.add_argument("--servers", choices=SERVER_PLACEMENTS, default=RUN_DEFAULTS["servers"],
                   help="MXNet's parameter servers across machines: a server on every node "
                        "(per-node, as MXNet's launcher does), or one on node 0")
    p.add_argument("--stall-timeout", type=positive_float, default=None, metavar="SECONDS",
                   help="across machines: end the run when a joined node shows no progress "
                        "(a step) for this long: a stalled collective, a cut link (default: "
                        "--join-timeout)")
    p.add_argument("--join-timeout", type=positive_float, default=RUN_DEFAULTS["join_timeout"],
                   metavar="S", help="a run fails when a node has not joined within S seconds, "
                                     "or a joined one shows no progress for S seconds")
    p.add_argument("--trace", action="store_true",
                   help="write each run's timeline (steps per process, evaluation, warm-up, "
                        "all-reduce, pipeline stages) as a Chrome trace beside its record, "
                        "for Perfetto or chrome://tracing; the device is then synchronised "
                        "after every step, which perturbs the times")
    p.add_argument("--settings", default="none", help=tuned.OPTION_HELP)
    p.add_argument("--repeat", type=positive, default=1,
                   help="runs of every configuration, each in a fresh process, interleaved "
                        "across frameworks; the table shows their median and spread")
    p.add_argument("--peak-gemm-size", type=non_negative, default=PEAK_GEMM_SIZE, metavar="N",
                   help="the CPU peak of the utilisation (MFU) figures: an N x N float32 "
                        "product, measured once before the workers with a device's threads "
                        "and kept in the results folder (cpu_peak.json); 0: not measured, "
                        "MFU on the CPU left out")
    p.add_argument("--timeout", type=positive, default=3600, help="seconds allowed per run")
    p.add_argument("--out", default=None, help="results folder (default: results/<time>)")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="finish the comparison in DIR: rerun only what is missing, failed, "
                        "diverged or interrupted there, with DIR's configuration")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--json", action="store_true",
                   help="print the JSON list of run records on stdout, and nothing else there")
    return p


def _executions(text: str) -> list[str | None]:
    """--execution as a list of execution names; None stands for each mode's default."""
    chosen = list(registry.EXECUTIONS) if text.strip() == "all" else names(
        text, ("default", *registry.EXECUTIONS), "execution")
    return [None if e == "default" else e for e in chosen]


def resolve(args) -> tuple[list[str], list[str], list[int]]:
    """Validate the arguments that argparse cannot; raise UsageError with the fix."""
    frameworks = names(args.framework, registry.NAMES, "framework", registry.groups())
    check_nodes(args)
    if args.mode is None:
        args.mode = (CLUSTER_MODES if args.nodes > 1 else
                     ",".join(m.name for m in MODES.values() if m.default))
    modes = names(args.mode, MODES, "mode")
    gpus = gpu_count()
    counts = args.devices or (sorted({1, gpus}) if gpus else list(CPU_DEFAULT_DEVICES))
    if args.cores_per_device:
        have = len(os.sched_getaffinity(0))
        # nodes simulated here share them
        here = len(networks.get(args.network).local_nodes(args)) if args.nodes > 1 else 1
        need = args.cores_per_device * max(counts) * here
        if need > have:
            raise UsageError(f"--cores-per-device {args.cores_per_device} x {max(counts)} devices"
                             + (f" x {here} nodes" if here > 1 else "") + f" needs {need} cores; "
                             f"this machine lets us use {have}: lower --cores-per-device or "
                             "--devices")
    for m in set(modes) & set(args.mode.split(",")):   # named: under "all", a row says why
        why = MODES[m].bad_input(args.model, counts)
        if why:
            raise UsageError(f"--mode {m}: {why}")
    if args.sync_bn and not models.get(args.model).STATE_NAMES:
        raise UsageError(f"--sync-bn needs a model with BatchNorm; {args.model} has none")
    if args.batch_per_device is None and args.batch_size < max(counts):
        raise UsageError(f"--batch-size {args.batch_size} is smaller than {max(counts)} devices: "
                         "every device needs at least one example; raise --batch-size")
    smallest = args.batch_per_device * counts[0] if args.batch_per_device else args.batch_size
    if args.micro_batches > smallest:
        raise UsageError(f"--micro-batches {args.micro_batches} is more than the batch of "
                         f"{smallest}: every micro-batch needs at least one example")
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise UsageError(f"--data-dir {args.data_dir} does not exist; give the folder holding "
                         "the Fashion-MNIST IDX files")
    if args.dataset == "fashion-mnist":
        try:
            data.locate_fashion_mnist(args.data_dir)
        except data.DataError as e:
            raise UsageError(str(e)) from None
    return frameworks, modes, counts


def check_nodes(args) -> None:
    """The several-machine options: consistent, or a UsageError with the fix (the
    network's own options: its kind's check; a kind whose nodes an allocation gives fills
    them in first)."""
    network = networks.get(args.network)
    try:
        network.place(args)
        if args.nodes > 1:
            network.check(args)
    except networks.NetworkError as e:
        raise UsageError(str(e)) from None
    if args.nodes == 1:
        given = networks.placement_given(args)
        given += [f"--network {args.network}"] * (args.network != RUN_DEFAULTS["network"])
        given += ["--link"] * (args.link is not None)
        given += ["--servers one"] * (args.servers != RUN_DEFAULTS["servers"])
        if given:
            raise UsageError(f"{given[0]} is for runs across machines: add --nodes N (2 or more)")


@dataclass
class Plan:
    """What one comparison runs: its rows, its repeats and the options shared by every
    run (stored in PLAN_FILE, so that --resume can finish it)."""
    frameworks: list[str]
    modes: list[str]
    devices: list[int]
    repeat: int
    run: dict            # model, dataset, data_dir, epochs, batch_size, batch_per_device, lr, ...
    executions: list     # execution names; None: each mode's default
    schedules: list      # pipeline schedules, each a row of the modes that take one
    # --settings: "FRAMEWORK" or "FRAMEWORK/MODEL/MODE" -> the settings its runs apply
    # (common/facts/settings.py); a row named by neither runs the defaults
    settings: dict = field(default_factory=dict)

    # the options shared by every run: RunConfig's fields (each one an option of the
    # same name) but a row's own and the warm-up, which no option sets
    RUN_KEYS = tuple(f for f in RUN_DEFAULTS
                     if f not in ("framework", "mode", "devices", "execution", "schedule",
                                  "warmup_steps", "profile_steps",    # profile: benchmarks.profile's
                                  "settings"))                        # per row: Plan.settings

    @classmethod
    def from_args(cls, args, frameworks, modes, counts) -> "Plan":
        return cls(frameworks, modes, counts, args.repeat,
                   {k: getattr(args, k) for k in cls.RUN_KEYS}, _executions(args.execution),
                   names(args.schedule, SCHEDULES, "schedule"),
                   tuned.resolve(args.settings, frameworks, modes, args.model, args.nodes,
                                 args.network, args.link))

    def settings_of(self, framework: str, mode: str) -> list[str]:
        return (self.settings.get(f"{framework}/{self.run['model']}/{mode}")
                or self.settings.get(framework) or [])

    def configs(self) -> list[RunConfig]:
        # an option unset, or absent from a plan written before it: RunConfig's default
        r = {k: v for k, v in self.run.items() if k in self.RUN_KEYS and v is not None}

        def per_row(n: int) -> dict:
            """What grows with the device count: under weak scaling the batch and lr, with
            --cores-per-device the threads (C per device)."""
            weak = r.get("batch_per_device") is not None
            return {**r, "batch_size": r["batch_per_device"] * n if weak else r["batch_size"],
                    "lr": r["lr"] * n if weak else r["lr"],
                    "threads": r["cores_per_device"] * n if r.get("cores_per_device") else r["threads"]}

        def schedules(mode: str) -> list[str]:
            # a mode without a schedule runs once, with RunConfig's default in its record
            return (self.schedules if "schedule" in MODES[mode].options
                    else [RUN_DEFAULTS["schedule"]])
        configs = [RunConfig(framework=f, mode=m, devices=n, schedule=s, **per_row(n),
                             **tuned.applied(f, m, e, self.settings_of(f, m)))
                   for f in self.frameworks for m in self.modes for e in self.executions
                   for s in schedules(m) for n in self.devices]
        # an execution named that is the mode's default is the default run (the same
        # file): run once
        files = [record_filename(new_record(c)) for c in configs]
        return [c for i, c in enumerate(configs) if files[i] not in files[:i]]

    def to_dict(self) -> dict:
        return {"frameworks": self.frameworks, "modes": self.modes, "devices": self.devices,
                "repeat": self.repeat, "run": self.run,
                "executions": ["default" if e is None else e for e in self.executions],
                "schedules": self.schedules, "settings": self.settings}

    def as_options(self) -> dict:
        """The plan as the options that would give it (argparse dests)."""
        return {"framework": ",".join(self.frameworks), "mode": ",".join(self.modes),
                "execution": ",".join("default" if e is None else e for e in self.executions),
                "schedule": ",".join(self.schedules), "devices": self.devices,
                "repeat": self.repeat, **self.run}


def _given(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The options named on the command line (as argparse dests)."""
    given = set()
    for token in argv:
        if token.startswith("--"):
            action = parser._option_string_actions.get(token.split("=", 1)[0])
            if action is not None:
                given.add(action.dest)
    return given


def resume_plan(args, given: set[str]) -> Plan:
    """The plan stored in --resume DIR; an option given that contradicts it is an error."""
    folder = Path(args.resume)
    if args.out is not None and Path(args.out).resolve() != folder.resolve():
        raise UsageError(f"--resume {folder} writes into {folder}; drop --out {args.out}")
    plan_path = folder / PLAN_FILE
    if not plan_path.is_file():
        raise UsageError(f"--resume {folder}: no {PLAN_FILE} there, so not a folder that "
                         "benchmarks.compare wrote; give a compare results folder")
    try:
        stored = json.loads(plan_path.read_text())
        # a plan saved before --schedule took a list kept its one schedule with the shared
        # options (before --schedule existed: none, RunConfig's default)
        plan = Plan(stored["frameworks"], stored["modes"], stored["devices"], stored["repeat"],
                    # (a plan older than --network: its kind under "launcher")
                    {**{k: stored["run"].get(k) for k in Plan.RUN_KEYS},
                     "network": networks.of(stored["run"]).name},
                    [None if e == "default" else e for e in stored.get("executions", ["default"])],
                    stored.get("schedules")
                    or [stored["run"].get("schedule") or RUN_DEFAULTS["schedule"]],
                    stored.get("settings") or {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"--resume {folder}: {plan_path} is unreadable ({e}); start a new "
                         "comparison with --out") from None
    options = {*Plan.RUN_KEYS, "framework", "mode", "execution", "schedule", "devices", "repeat"}
    if given & options:
        frameworks, modes, counts = resolve(args)
        mine = Plan.from_args(args, frameworks, modes, counts).as_options()
        theirs = plan.as_options()
        for dest in sorted(given & options):
            if mine[dest] != theirs[dest]:
                option = "--" + dest.replace("_", "-")
                raise UsageError(f"--resume {folder} was run with {option} {theirs[dest]}, not "
                                 f"{mine[dest]}; drop {option}, or start a new comparison with --out")
    return plan


# record fields that must agree between the runs of one results folder (not the
# schedule: like the execution, each is a row of its own, named in the file name)
SAME_IN_A_FOLDER = ("model", "init", "dataset", "epochs", "batch_size", "batch_per_device", "lr",
                    "sync_bn", "seed", "cores_per_device", "eval_samples", "micro_batches")


def check_out(out: Path, plan: Plan, resuming: bool) -> None:
    """Refuse an --out that cannot hold this comparison; writes nothing."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder; give a folder")
    pid = lock_holder(out / LOCK_FILE)
    if pid:
        raise UsageError(f"--out {out} is being written by another comparison (pid {pid}, "
                         f"{out / LOCK_FILE}); wait for it to end or give another --out")
    if not out.is_dir():
        return
    hint = "give a new --out" + ("" if resuming else f", or --resume {out} to finish that comparison")
    stored = out / PLAN_FILE
    if stored.is_file() and not resuming:
        try:
            # (the defaults of options newer than the folder: RunConfig's)
            run = json.loads(stored.read_text())["run"]
            theirs = {**RUN_DEFAULTS, **run, "network": networks.of(run).name}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise UsageError(f"--out {out}: {stored} is unreadable ({e}); give a new --out") from None
        diff = [k for k in Plan.RUN_KEYS if theirs.get(k) != plan.run.get(k)]
        if diff:
            raise UsageError(f"--out {out} holds a comparison of another configuration "
                             f"({diff[0]} {theirs.get(diff[0])!r}, here {plan.run.get(diff[0])!r}); {hint}")
    expected = {record_filename(new_record(c)): c for c in plan.configs()}
    for path in sorted(out.glob("*dev.json")):
        try:
            record = read_record(path)
        except RecordError as e:
            raise UsageError(str(e)) from None
        cfg = expected.get(path.name)
        # under weak scaling the batch and lr grow with the device count (and with
        # --cores-per-device the thread count): compare those only for a record of a
        # configuration that this plan runs too
        keys = ((*SAME_IN_A_FOLDER, "threads") if cfg else
                [k for k in SAME_IN_A_FOLDER if k not in ("batch_size", "lr")])
        want = new_record(cfg or next(iter(expected.values())))
        diff = [k for k in keys if k in record and record[k] != want[k]]
        if diff:
            raise UsageError(f"--out {out} holds records of another configuration ({path.name} has "
                             f"{diff[0]} {record[diff[0]]!r}, here {want[diff[0]]!r}); {hint}")


def merge_repeat(previous: dict | None, new: dict, planned: int) -> dict:
    """The record of a configuration after one more repeat: the top-level fields are
    its first successful repeat's, "repeats" holds the figures of each (a failed or
    interrupted repeat stays there until it is run again)."""
    kept = ok_repeats(previous) if previous else []
    repeats = kept + [{k: new.get(k) for k in REPEAT_KEYS}]
    base = previous if (previous and kept) else new
    merged = {**base, "repeats": repeats, "repeat_planned": planned}
    bad = [r for r in repeats if r["status"] != "ok"]
    merged["status"] = bad[-1]["status"] if bad else "ok"
    merged["error"] = bad[-1]["error"] if bad else base.get("error")
    for k in ("diverged_step", "last_finite_loss"):
        merged[k] = bad[-1].get(k) if bad else None
    return merged


def run_one(cfg: RunConfig, out: Path, rep: int, timeout: int, advance, estimated,
            stop: Interrupts) -> dict:
    """Run one configuration once, in its own process; always returns a record
    (its own copy stays in logs/, beside the worker's log)."""
    stem = Path(record_filename(new_record(cfg))).stem
    out_path, log_path = out / "logs" / f"{stem}-r{rep}.json", out / "logs" / f"{stem}-r{rep}.log"
    if not registry.is_installed(cfg.framework):
        record = new_record(cfg)
        record["env"] = env_info()
        return mark_not_installed(record)
    def on_line(line):                      # '@step' lines, one per training step
        if line.startswith(progress_lines.STEP):
            advance()
        elif line.startswith(progress_lines.ESTIMATE):
            estimated(float(line.split()[1]))

    record, done = run_config(cfg.to_dict(), out_path, timeout, log_path, on_line, stop,
                              read=read_record)
    if record is not None:
        if record.get("trace"):             # the timeline goes beside the record
            timeline = out / f"{stem}{'' if rep == 1 else f'-r{rep}'}.trace.json"
            os.replace(out_path.parent / record["trace"]["file"], timeline)
            record["trace"]["file"] = timeline.name
        return record
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


def with_cpu_peak(record: dict, cpu_gemm: dict) -> dict:
    """A worker's record of a run on the CPU, its utilisation figures against the CPU peak
    measured by this comparison (a worker does not measure it)."""
    if record["status"] in ("ok", "diverged") and record.get("device_kind") == "cpu":
        utilisation.fill(record, *utilisation.cpu_peak(
            record, cpu_gemm, networks.of(record).shares_cores))
    return record


def run_plan(plan: Plan, out: Path, args, progress: Progress, stop: Interrupts,
             resume: bool, cpu_gemm: dict | None = None) -> dict:
    """Run every configuration plan.repeat times, repeats interleaved across frameworks
    (all configurations once, then all again), each in a fresh process, so a slow drift
    of the machine hits every framework alike. With resume, what --out already holds
    done is kept. Stops at an interrupt: what finished stays, the rest is not started."""
    n_train = data.train_size(plan.run["dataset"], plan.run["data_dir"], plan.run["seed"])
    records = {}
    planned = {record_filename(new_record(cfg)) for cfg in plan.configs()}
    for path in sorted(out.glob("*dev.json")) if resume else []:
        record = read_record(path)
        name = record_filename(record)
        if name not in planned or (path.name != name and (out / name).exists()):
            continue
        if path.name != name:
            # written before its name said all it ran (a 1F1B run before the schedule was
            # in the name): moved to its name now, so it is neither run again nor shown twice
            os.replace(path, out / name)
        records[name] = record
    settled = set()                      # would end the same way again: not repeated
    for rep in range(1, plan.repeat + 1):
        for cfg in plan.configs():
            if stop.signum:
                return records
            name = record_filename(new_record(cfg))
            previous = records.get(name)
            if name in settled or (previous is not None and (
                    previous["status"] == "not-applicable" or len(ok_repeats(previous)) >= rep)):
                continue
            label = (f"{cfg.framework} {cfg.mode}"
                     + ("" if cfg.default_execution else f" {cfg.execution}")
                     + f" x{cfg.devices}" + (f" #{rep}" if plan.repeat > 1 else ""))
            steps = n_train // cfg.batch_size
            steps = min(steps, cfg.steps_per_epoch) if cfg.steps_per_epoch else steps
            task = progress.add_task(label, total=steps * cfg.epochs, status="")

            def estimated(seconds, label=label, epochs=cfg.epochs):
                if seconds * epochs > 60:        # worth saying before a long run
                    progress.console.print(
                        f"{label}: about {seconds * epochs / 60:.1f} min for {epochs} epoch(s), "
                        "estimated from a timed warm-up step", highlight=False, markup=False)
            new = with_cpu_peak(run_one(cfg, out, rep, args.timeout,
                                        lambda t=task: progress.advance(t), estimated, stop),
                                cpu_gemm or {})
            records[name] = merge_repeat(previous, new, plan.repeat)
            write_atomic(out / name, records[name])
            progress.update(task, status=new["status"])
            progress.stop_task(task)
            if new["status"] in ("not-installed", "not-applicable", "failed", "diverged"):
                settled.add(name)
    return records


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.resume:
            plan, out = resume_plan(args, _given(parser, argv)), Path(args.resume)
        else:
            plan = Plan.from_args(args, *resolve(args))
            out = results_dir(args.out)
        check_out(out, plan, resuming=bool(args.resume))
        lock = claim_out(out)           # last: the one step that creates something
    except UsageError as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return 2
    try:
        with Interrupts() as stop:
            return _compare(args, argv, plan, out, stop)
    finally:
        lock.unlink(missing_ok=True)


def _compare(args, argv: list[str], plan: Plan, out: Path, stop: Interrupts) -> int:
    write_atomic(out / PLAN_FILE, plan.to_dict())
    err = Console(stderr=True)
    # a log file or pipe gets a width that fits the table, not rich's 80 columns
    shown = err if args.json else Console(width=None if sys.stdout.isatty() else 140)
    columns = (TextColumn("{task.description:<26}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[status]}"))
    # the CPU's peak, before any worker starts (the machine otherwise idle): once per
    # comparison with a device's threads (its own cores under --cores-per-device), kept
    # in the folder for a --resume
    cpu_gemm = ({"error": "the CPU peak was not measured (--peak-gemm-size 0)"}
                if not args.peak_gemm_size else
                gemm.cpu_peak(out, plan.run["cores_per_device"] or plan.run["threads"],
                              args.peak_gemm_size))
    with Progress(*columns, console=err, transient=False) as progress:
        records = run_plan(plan, out, args, progress, stop, resume=bool(args.resume),
                           cpu_gemm=cpu_gemm)
    if stop.signum:
        err.print(f"{signal.Signals(stop.signum).name}: stopped; the report covers the runs that "
                  f"finished. Finish with: python -m benchmarks.compare --resume {out}",
                  markup=False, highlight=False)
    command = "python -m benchmarks.compare " + " ".join(shlex.quote(a) for a in argv)
    render(out, command, shown, plots=not args.no_plots)     # every record in --out
    if args.json:
        print(json.dumps(list(records.values()), indent=1))
    if stop.signum:
        return stop.exit_code
    return 1 if any(r["status"] in FAILED + ("interrupted",) for r in records.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
