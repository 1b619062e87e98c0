"""One of the suite's rows against a plain program that does the same work, run in
one go:

    python -m benchmarks.vs_reference [--against d2l|keras] [--baseline PATH]
                                      [--epochs 2] [--rounds 2] [--devices 1]

d2l: the chapter's multi-GPU-from-scratch PyTorch code as written
(benchmarks/reference/d2l.py) against the suite's
PyTorch scratch mode. keras: a plain Keras 3 program (benchmarks/reference/plain_keras.py:
a Sequential LeNet, model.fit on the NumPy arrays) against the suite's keras-tensorflow row.
Both sides train on real Fashion-MNIST at batch 256, lr 0.2, in alternating rounds
(so that machine noise hits both alike), each in a fresh process with the same
thread count. The figure is the median seconds per epoch over all rounds and
epochs; a reference whose first epoch includes tracing (Keras) is timed from its
second epoch on, as the suite's warm-up is excluded from its own."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common.facts import data

from .runner import run_config, worker_env

ROOT = Path(__file__).resolve().parent.parent
# name -> (reference program, the suite's framework and mode it is measured against,
# whether the reference's first epoch includes tracing and is left out)
REFERENCES = {
    "d2l": (ROOT / "benchmarks" / "reference" / "d2l.py", "pytorch", "scratch", False),
    "keras": (ROOT / "benchmarks" / "reference" / "plain_keras.py", "keras-tensorflow", "native", True),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vs_reference",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--against", choices=REFERENCES, default="d2l")
    p.add_argument("--baseline", default=None, help="the reference program (default: per --against)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--data-dir", default=None)
    return p


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    program, framework, mode, skip_first = REFERENCES[args.against]
    baseline = Path(args.baseline or program)
    if not baseline.is_file():
        print(f"vs_reference: error: reference {baseline} not found; pass --baseline PATH",
              file=sys.stderr)
        return 2
    if skip_first and args.epochs < 2:
        print(f"vs_reference: error: --against {args.against} times the reference from its second "
              "epoch on; give --epochs 2 or more", file=sys.stderr)
        return 2
    folder = str(data.locate_fashion_mnist(args.data_dir))
    env = worker_env(args.threads, FMNIST_DIR=folder)
    ours, theirs = [], []
    for r in range(args.rounds):
        out = subprocess.run([sys.executable, str(baseline), str(args.devices), str(args.epochs)],
                             capture_output=True, text=True, env=env, check=True)
        base = json.loads(out.stdout.strip().splitlines()[-1])
        theirs += base["sec_per_epoch"][1 if skip_first else 0:]
        with tempfile.TemporaryDirectory() as tmp:
            # the references start from the chapter's N(0, 0.01^2) weights: so do we here
            cfg = {"framework": framework, "mode": mode, "devices": args.devices, "init": "chapter",
                   "epochs": args.epochs, "threads": args.threads, "data_dir": folder}
            rec, done = run_config(cfg, Path(tmp) / "r.json", 3600, env=env)
        if rec is None:
            print(f"vs_reference: error: our worker died (exit code {done.code}): {done.log_tail}",
                  file=sys.stderr)
            return 1
        if rec["status"] != "ok":
            print(f"vs_reference: error: our run failed: {rec['error']}", file=sys.stderr)
            return 1
        ours += rec["sec_per_epoch"]
        print(f"round {r + 1}: {args.against} {['%.2f' % s for s in base['sec_per_epoch']]} "
              f"(acc {base['test_acc']:.4f})  ours {['%.2f' % s for s in rec['sec_per_epoch']]} "
              f"(acc {rec['test_accuracy']:.4f})", flush=True)
    m_theirs, m_ours = statistics.median(theirs), statistics.median(ours)
    print(json.dumps({"against": args.against, "reference_sec_per_epoch": round(m_theirs, 3),
                      "reference_range": [round(min(theirs), 3), round(max(theirs), 3)],
                      "ours": f"{framework} {mode}", "ours_sec_per_epoch": round(m_ours, 3),
                      "ours_range": [round(min(ours), 3), round(max(ours), 3)],
                      "ratio_ours_to_reference": round(m_ours / m_theirs, 3),
                      "devices": args.devices, "threads": args.threads, "epochs": args.epochs,
                      "rounds": args.rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
