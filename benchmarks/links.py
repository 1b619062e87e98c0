"""Compute against communication across emulated links: `python -m benchmarks.links`.

The chapters' lesson for training on several machines: a step is the compute of a
batch, t1, plus the gradients' all-reduce, t2, less what the engine hides behind the
backward pass; keep t1 about 20 % above t2 (a larger per-device batch raises t1, not t2),
and a parameter server's links carry more than a ring's. For each model, this measures
on 2 emulated nodes (compare --network netns, 1 core per node, synthetic data):

- t1: one device on one node, 1 core, at each --compute-batches size (compare runs);
- t2: the link's own all-reduce of the model's gradient bytes P alone, at each rate
  (benchmarks.workers.link_probe: torch's gloo ring, no compute beside it);
- the step of every engine at each --rates link rate, with the bytes each node sent;

with --modes, the node runs of every split (data parallelism, fsdp and tp: issue 52's
lesson for the transformer), at each of --nodes' counts;
then, on the slow --ps-rate link, the parameter server (MXNet, a server per node and one
server) against a ring (PyTorch's DDP) at each --ps-nodes count. DIR/links.md (tables,
the predictor validated across links out of sample) and DIR/links-<model>.png, rebuilt
from the records alone with --report DIR. Runs are compare's own processes (records and
reports in DIR/<model>/...); a failed or not-applicable run is a row that says so.
--runs picks which of the three kinds run (compute, nodes, ps), so that a folder can
add rows to another: `--report DIR --merge NEW` copies NEW's records into DIR (never
over one already there) and rebuilds DIR's page from both."""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from common import models
from common.core import perf
from common.core.modes import MODES
from common.facts import registry
from common.launch import netns

from .cli import Parser, UsageError, add_models, int_list, names, positive, run_command
from .probe import PS_RING, can_emulate, probe

ROOT = Path(__file__).resolve().parent.parent


def _one_per_engine() -> tuple[str, ...]:
    """One framework per engine across machines: the registry's first with each engine
    starter (Keras on TensorFlow rides on TensorFlow's)."""
    first: dict[str, str] = {}
    for n in registry.NAMES:
        if registry.facts(n).engine_starter:
            first.setdefault(registry.facts(n).engine_starter, n)
    return tuple(first.values())


ENGINES = _one_per_engine()
PS = "mxnet"
RUNS = ("compute", "nodes", "ps")
# how the node runs split the model (--modes): data parallelism (the framework's engine),
# and the two splits of issue 52 where the framework runs them a process per device
SPLITS = ("native", "fsdp", "tp")
# per model (its COMMANDS["links"]): the per-device batch of the node runs, the compute
# batches, the rates and the steps per epoch
DEFAULTS = {name: models.get(name).COMMANDS["links"] for name in models.NAMES}


def _rates(text: str) -> list[str]:
    rates = [r for r in text.split(",") if r]
    for r in rates:
        try:
            netns.rate_bits(r)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).replace("--link", "--rates")) from None
    if not rates:
        raise argparse.ArgumentTypeError("give rates like 10mbit,100mbit,unshaped")
    return rates


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m benchmarks.links", description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", default=",".join(ENGINES),
                   help="engines to run across the links (a comma-separated list)")
    add_models(p, "lenet,resnet18")
    p.add_argument("--rates", type=_rates, default=None,
                   help="link rates in tc's units, and unshaped (default per model: " + "; ".join(
                       f"{m} {','.join(d['rates'])}" for m, d in DEFAULTS.items()) + ")")
    p.add_argument("--batch-per-device", type=positive, default=None,
                   help="each node's batch in the node runs (default per model: " + ", ".join(
                       f"{m} {d['batch']}" for m, d in DEFAULTS.items()) + ")")
    p.add_argument("--compute-batches", default=None, metavar="B,B,...",
                   type=int_list("--compute-batches", "batch sizes like 32,128,512",
                                 "needs two or more sizes of 1 or more", least=2),
                   help="one device's batches for t1 (default per model: " + "; ".join(
                       f"{m} {','.join(map(str, d['compute_batches']))}" for m, d in DEFAULTS.items())
                   + "); the predictor fits t1 on all but the node runs' batch")
    p.add_argument("--steps-per-epoch", type=positive, default=None,
                   help="steps in each timed epoch (default per model: " + ", ".join(
                       f"{m} {d['steps']}" for m, d in DEFAULTS.items()) + ")")
    p.add_argument("--modes", default="native",
                   help="how the node runs split the model: " + ", ".join(SPLITS) + " (data "
                        "parallelism, sharded, tensor parallel; a comma-separated list)")
    p.add_argument("--nodes", default=[2],
                   type=int_list("--nodes", "node counts like 2,4", "2 or more", least=1),
                   help="node counts of the node runs (default 2; the link probe runs at 2)")
    p.add_argument("--ps-nodes", default="2,3,4",
                   type=int_list("--ps-nodes", "node counts like 2,3,4", "2 or more", least=1),
                   help="node counts of the parameter server against ring runs (LeNet)")
    p.add_argument("--ps-rate", type=_rates, default=["10mbit"], help="their link rate")
    p.add_argument("--runs", default=",".join(RUNS),
                   help="which runs: compute (t1), nodes (the 2-node steps and probes at "
                        "each rate), ps (parameter server against ring); a comma-separated "
                        "list, to add rows to another folder (--merge)")
    p.add_argument("--fit-rate", default="100mbit",
                   help="the rate the predictor fits the link at (the others validate it)")
    p.add_argument("--out", default=None, help="results folder (default: results/links-<time>)")
    p.add_argument("--report", default=None, metavar="DIR",
                   help="rebuild DIR/links.md and its plots from DIR's records; runs nothing")
    p.add_argument("--merge", default=None, metavar="NEW,...",
                   help="with --report: first copy these links folders' records into DIR "
                        "(a record already in DIR is never replaced: an error, nothing copied)")
    return p


def compare(out: Path, framework: list[str], model: str, extra: list[str],
            modes: tuple[str, ...] = ("native",)) -> int:
    """One compare command (its own process, records in `out`); its exit code."""
    cmd = [sys.executable, "-m", "benchmarks.compare", "--framework", ",".join(framework),
           "--model", model, "--mode", ",".join(modes), "--dataset", "synthetic", "--epochs", "2",
           "--eval-samples", "256", "--peak-gemm-size", "0", "--no-plots", "--out", str(out),
           *extra]
    print(" ".join(cmd[1:]), flush=True)
    return run_child(cmd)


def run_child(cmd: list[str]) -> int:
    """A command's exit code; stopped with this process (SIGTERM, SIGINT: the child is
    asked to stop the same way and waited for, so that its workers and emulated network
    go with it, never left training on their own)."""
    proc = subprocess.Popen(cmd, cwd=ROOT)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()


def run(args, out: Path) -> int:
    code = 0
    frameworks = names(args.framework, ENGINES, "framework")
    runs = names(args.runs, RUNS, "runs")
    for model in names(args.model, models.NAMES, "model"):
        own = DEFAULTS[model]
        b = args.batch_per_device or own["batch"]
        batches = args.compute_batches or list(own["compute_batches"])
        rates = args.rates or list(own["rates"])
        steps = str(args.steps_per_epoch or own["steps"])
        base = out / model
        for c in batches if "compute" in runs else []:
            code = max(code, compare(base / f"compute-b{c}", frameworks, model, [
                "--batch-size", str(c), "--devices", "1", "--cores-per-device", "1",
                "--steps-per-epoch", steps]))
        modes = tuple(names(args.modes, SPLITS, "modes"))
        for n, rate in [(n, r) for n in args.nodes for r in rates] if "nodes" in runs else []:
            if n == 2:
                probe(base / f"probe-n2-{rate}.json", 2, rate, models.param_bytes(model))
            # a core per node where the machine has them; else the nodes share its threads
            own_core = ["--cores-per-device", "1"] if n <= (os.cpu_count() or 1) else []
            code = max(code, compare(base / f"n{n}-{rate}", frameworks, model, [
                "--batch-size", str(n * b), "--devices", "1", *own_core,
                "--nodes", str(n), "--network", "netns", "--link", rate,
                "--steps-per-epoch", steps], modes))
    if args.ps_nodes and "ps" in runs and "lenet" in names(args.model, models.NAMES, "model"):
        b = args.batch_per_device or DEFAULTS["lenet"]["batch"]
        rate = args.ps_rate[0]
        for n in args.ps_nodes:
            # n nodes share this machine's cores: each its share of the threads
            common = ["--batch-size", str(n * b), "--devices", "1", "--nodes", str(n),
                      "--network", "netns", "--link", rate, "--steps-per-epoch", "8"]
            code = max(code, compare(out / "ps" / f"n{n}-ring", [PS_RING], "lenet", common))
            for placement in perf.SERVER_PLACEMENTS:
                code = max(code, compare(out / "ps" / f"n{n}-{placement}", [PS], "lenet",
                                         [*common, "--servers", placement]))
            probe(out / "ps" / f"probe-n{n}-{rate}.json", n, rate, models.param_bytes("lenet"))
    return code


def resolve(args) -> None:
    """Bad options (UsageError) before anything runs or is written."""
    names(args.framework, ENGINES, "framework")
    names(args.model, models.NAMES, "model")
    names(args.runs, RUNS, "runs")
    if args.nodes[0] < 2:
        raise UsageError(f"--nodes {','.join(map(str, args.nodes))}: node runs span 2 or "
                         "more nodes")
    for m in names(args.modes, SPLITS, "modes"):
        for model in names(args.model, models.NAMES, "model"):
            why = MODES[m].bad_input(model, args.nodes)
            if why:
                raise UsageError(f"--modes {m}: {why}")
    netns.rate_bits(args.fit_rate)        # ValueError: not a rate
    can_emulate()


def measure(args, _, out: Path) -> int:
    from common.reports.links import write_page
    (out / "command.txt").write_text(" ".join(["python -m benchmarks.links",
                                               *(args.argv or [])]))
    code = run(args, out)
    return max(code, write_page(out, args.fit_rate))


def merge(into: Path, new: Path) -> list[Path]:
    """Copy the links folder new's records (compute and node runs, probes) into `into`,
    nothing if any is already there (UsageError naming it); new's command line is added to
    into's command.txt. The files copied."""
    if not (new / "command.txt").is_file():
        raise UsageError(f"--merge {new} is not a links results folder (no command.txt)")
    files = [f for f in sorted(new.rglob("*.json"))      # records, probes, comparisons
             if f.relative_to(new).parts[0] in (*models.NAMES, "ps")]
    from common.reports.links import load
    ours, theirs = load(into)["models"], load(new)["models"]
    for model in set(ours) & set(theirs):
        if None not in (ours[model]["batch"], theirs[model]["batch"]) and \
                ours[model]["batch"] != theirs[model]["batch"]:
            raise UsageError(f"--merge {new}: its {model} node runs are at per-device batch "
                             f"{theirs[model]['batch']}, {into}'s at {ours[model]['batch']} "
                             "(one page, one batch); nothing copied")
    there = [f.relative_to(new) for f in files if (into / f.relative_to(new)).exists()]
    if there:
        raise UsageError(f"--merge {new}: {there[0]} is already in {into} (not replaced; "
                         "merge only runs the folder lacks)")
    for f in files:
        (into / f.relative_to(new)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, into / f.relative_to(new))
    command = into / "command.txt"
    lines = command.read_text().strip().splitlines() if command.is_file() else []
    command.write_text("\n".join([*lines, (new / "command.txt").read_text().strip()]) + "\n")
    return files


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--report" in argv or any(a.startswith("--report=") for a in argv):
        try:
            args = build_parser().parse_args(argv)
            if not Path(args.report).is_dir():
                raise UsageError(f"--report {args.report} is not a folder; give a links "
                                 "results folder")
            for new in (args.merge or "").split(","):
                if new:
                    merge(Path(args.report), Path(new))
        except UsageError as e:
            print(f"links: error: {e}", file=sys.stderr)
            return 2
        from common.reports.links import write_page
        return write_page(Path(args.report), args.fit_rate)

    def checked(args):
        args.argv = argv
        try:
            resolve(args)
        except ValueError as e:
            raise UsageError(str(e).replace("--link", "--fit-rate")) from None
    return run_command("links", build_parser(), argv, checked, "links-", measure)


def _stop(signum, frame):
    raise SystemExit(128 + signum)      # unwinds through run_child, which stops its child


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    sys.exit(main())
