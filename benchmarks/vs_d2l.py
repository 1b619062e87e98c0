"""Our PyTorch scratch mode against the chapter's own PyTorch code, run in one go:

    python -m benchmarks.vs_d2l [--baseline PATH] [--epochs 2] [--rounds 2] [--devices 1]

The baseline is d2l's multi-GPU-from-scratch code as written
(shared/baselines/d2l_torch_lenet.py beside the repository). Both run on real
Fashion-MNIST at batch 256, lr 0.2, in alternating rounds (so that machine noise
hits both alike), each in a fresh process with the same thread count; the
figure is the median seconds per epoch over all rounds and epochs."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import data

from .worker import thread_env

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASELINE = ROOT.parent / "shared" / "baselines" / "d2l_torch_lenet.py"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vs_d2l", description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default=str(DEFAULT_BASELINE))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)
    if not Path(args.baseline).is_file():
        print(f"vs_d2l: error: baseline {args.baseline} not found; pass --baseline PATH", file=sys.stderr)
        return 2
    folder = str(data.locate_fashion_mnist(args.data_dir))
    env = {**os.environ, **thread_env(args.threads), "FMNIST_DIR": folder,
           "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    ours, theirs = [], []
    for r in range(args.rounds):
        out = subprocess.run([sys.executable, args.baseline, str(args.devices), str(args.epochs)],
                             capture_output=True, text=True, env=env, check=True)
        base = json.loads(out.stdout.strip().splitlines()[-1])
        theirs += base["sec_per_epoch"]
        with tempfile.TemporaryDirectory() as tmp:
            cfg = {"framework": "pytorch", "mode": "scratch", "devices": args.devices,
                   "epochs": args.epochs, "threads": args.threads, "data_dir": folder}
            subprocess.run([sys.executable, "-m", "benchmarks.worker", json.dumps(cfg),
                            f"{tmp}/r.json"], stdout=subprocess.DEVNULL, env=env, check=True, cwd=ROOT)
            rec = json.loads(Path(f"{tmp}/r.json").read_text())
        if rec["status"] != "ok":
            print(f"vs_d2l: error: our run failed: {rec['error']}", file=sys.stderr)
            return 1
        ours += rec["sec_per_epoch"]
        print(f"round {r + 1}: d2l {['%.2f' % s for s in base['sec_per_epoch']]} (acc {base['test_acc']:.4f})"
              f"  ours {['%.2f' % s for s in rec['sec_per_epoch']]} (acc {rec['test_accuracy']:.4f})")
    m_theirs, m_ours = statistics.median(theirs), statistics.median(ours)
    print(json.dumps({"d2l_sec_per_epoch": round(m_theirs, 3), "ours_sec_per_epoch": round(m_ours, 3),
                      "ratio_ours_to_d2l": round(m_ours / m_theirs, 3), "devices": args.devices,
                      "threads": args.threads, "epochs": args.epochs, "rounds": args.rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
