"""ResNet-18 training step time per framework and mode, against plain eager PyTorch:

    python -m benchmarks.resnet18_steps [--framework all] [--batch 64] [--steps 5] [--rounds 3]

One device, synthetic 28x28 batches, the suite's workers (the compare command's
path, each run in a fresh process) and the neutral reference
benchmarks/reference/resnet18.py (the chapter's concise nn.Module, nothing from
the suite) in alternating rounds, so machine noise hits all alike. Each figure is
the median seconds per step over the rounds (warm-up excluded, device
synchronised), with its range; `vs torch` is the ratio to the reference and
`scratch/native` the same framework's ratio of its two modes."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from common.facts import registry
from common.core.modes import MODES

from .runner import run_config, worker_env

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "benchmarks" / "reference" / "resnet18.py"


def _reference(args, env) -> float:
    out = subprocess.run([sys.executable, str(REFERENCE), "--batch", str(args.batch), "--steps",
                          str(args.steps), "--threads", str(args.threads)],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["sec_per_step"]


def _suite(framework, mode, args, env) -> tuple[float | None, str]:
    cfg = {"framework": framework, "mode": mode, "devices": 1, "model": "resnet18",
           "dataset": "synthetic", "batch_size": args.batch, "steps_per_epoch": args.steps,
           "eval_samples": 1, "threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        rec, _ = run_config(cfg, Path(tmp) / "r.json", 3600, env=env)
    if rec is None:
        return None, "worker died"
    if rec["status"] != "ok":
        return None, f"{rec['status']}: {(rec['error'] or '').splitlines()[0][:80]}"
    return rec["sec_per_epoch"][0] / rec["steps_per_epoch"][0], ""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.resnet18_steps",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", default="all")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--json", action="store_true", help="print the figures as JSON too")
    return p


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    names = registry.installed() if args.framework == "all" else args.framework.split(",")
    try:
        for n in names:
            registry.check_name(n)
    except registry.UnknownFramework as e:
        print(f"resnet18_steps: error: {e}", file=sys.stderr)
        return 2
    env = worker_env(args.threads)
    runs = [(f, m) for f in names for m, mode in MODES.items()
            if mode.default and (f, m) not in registry.KNOWN_GAPS]
    times: dict = {("torch reference", ""): []}
    notes: dict = {}
    console = Console(stderr=True)
    for r in range(args.rounds):
        times[("torch reference", "")].append(_reference(args, env))
        for f, m in runs:
            t, note = _suite(f, m, args, env)
            times.setdefault((f, m), [])
            if t is None:
                notes[(f, m)] = note
            else:
                times[(f, m)].append(t)
        console.print(f"round {r + 1}/{args.rounds} done", highlight=False)
    ref = statistics.median(times[("torch reference", "")])
    med = {k: statistics.median(v) for k, v in times.items() if v}
    table = Table(title=f"ResNet-18 training step, batch {args.batch}, 1 device, "
                        f"{args.threads} threads, {args.rounds} rounds")
    for c in ("framework", "mode", "sec/step", "range", "vs torch", "scratch/native", "note"):
        table.add_column(c, justify="left" if c in ("framework", "mode", "note") else "right")
    result = []
    for (f, m), v in times.items():
        s = med.get((f, m))
        ratio = None
        if m == "scratch" and (f, "native") in med and s:
            ratio = s / med[(f, "native")]
        table.add_row(f, m, f"{s:.3f}" if s else "-",
                      f"{min(v):.3f}-{max(v):.3f}" if v else "-",
                      f"{s / ref:.2f}" if s else "-", f"{ratio:.2f}" if ratio else "",
                      Text(notes.get((f, m), "")))   # shown literally, never as markup
        result.append({"framework": f, "mode": m, "sec_per_step": s, "all": v,
                       "vs_reference": s / ref if s else None, "scratch_over_native": ratio,
                       "note": notes.get((f, m), "")})
    Console().print(table)
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
