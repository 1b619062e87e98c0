"""The ViT's defaults that differ between frameworks, measured as the loss they move:

    python -m benchmarks.vit_defaults [--framework all] [--steps 5] [--out DIR]

One process per framework (its own interpreter: benchmarks/workers/vit_defaults.py)
finds what its defaults compute (which GELU, which LayerNorm epsilon, attention biases
or not, which attention kernel runs on this CPU) and trains the default-size ViT for
--steps SGD steps in its native mode, with the oracle's choices and with each default
that differs swapped in. Writes DIR/<framework>.json, DIR/oracle.json (the float64
oracle's losses, the machine, this command) and the page DIR/vit-defaults.md rendered
from them (common/reports/vit_defaults.py). Measured: docs/results/cpu-2core-vit-defaults.md."""
from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from common import models
from common.facts import data, machine, registry
from common.reports import vit_defaults as page

from .cli import Parser, UsageError, names, positive, run_command
from .runner import run_worker, worker_env

ROOT = Path(__file__).resolve().parent.parent
BATCH, LR = 64, 0.1          # d2l's lr; the batch the ViT's other commands train


def build_parser() -> Parser:
    p = Parser(prog="python -m benchmarks.vit_defaults", description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", default="all",
                   help=f"all, or a comma-separated list of: {', '.join(registry.NAMES)}; "
                        "keras: every installed Keras backend")
    p.add_argument("--steps", type=positive, default=5)
    p.add_argument("--threads", type=positive, default=os.cpu_count() or 1)
    p.add_argument("--timeout", type=positive, default=900, help="seconds per framework")
    p.add_argument("--out", default=None, help="results folder (default: results/vit-defaults-<time>)")
    return p


def resolve(args) -> list[str]:
    """The frameworks to run (all: the installed ones), read by every command's list rule
    (benchmarks.cli.names: "keras" for its backends); an uninstalled one is a UsageError."""
    chosen = (registry.installed() if args.framework.strip() == "all"
              else names(args.framework, registry.NAMES, "framework", registry.groups()))
    for n in chosen:
        if not registry.is_installed(n):
            raise UsageError(registry.not_installed(n))
    return chosen


def oracle(args, command: str) -> dict:
    """The float64 oracle's losses on the same batches, and where and how they were run."""
    m, ds = models.get("vit"), data.synthetic(0)
    order = data.batch_order(len(ds.y_train), BATCH, 0, 0)[:args.steps]
    losses, _ = models.sgd_steps(m, m.init_params(0, "glorot"),
                                 [(ds.X_train[i], ds.y_train[i]) for i in order], LR)
    return {"losses": [float(v) for v in losses], "steps": args.steps, "batch": BATCH, "lr": LR,
            "threads": args.threads, "command": command, "env": machine.env_info()}


def measure(args, frameworks: list[str], out: Path) -> int:
    command = "python -m benchmarks.vit_defaults " + " ".join(map(shlex.quote, args.argv))
    (out / page.ORACLE_FILE).write_text(json.dumps(oracle(args, command), indent=1))
    code = 0
    for f in frameworks:
        cfg = {"framework": f, "steps": args.steps, "batch": BATCH, "lr": LR}
        record = out / f"{f}.json"
        record.unlink(missing_ok=True)           # a record left by an earlier run is not this one
        done = run_worker(["-m", "benchmarks.workers.vit_defaults", json.dumps(cfg), str(record)],
                          out / "logs" / f"{f}.log", args.timeout, lambda line: None,
                          env=worker_env(args.threads), cwd=ROOT, python=registry.python(f))
        ok = record.exists()
        print(f"{f}: {'done' if ok else f'failed (exit {done.code}): {done.log_tail}'}", file=sys.stderr)
        code = code if ok else 1
    print(page.write_page(out))
    return code


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)

    def resolved(args):
        args.argv = argv                         # the command line, for the page
        return resolve(args)
    return run_command("vit_defaults", build_parser(), argv, resolved, "vit-defaults-", measure)


if __name__ == "__main__":
    sys.exit(main())
