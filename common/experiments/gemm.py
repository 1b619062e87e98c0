"""The CPU's float32 GEMM rate, measured: the compute floor of benchmarks.speed and the CPU
peak of benchmarks.compare's utilisation (MFU) figures. An n x n float32 product in a
fresh process with the run's thread count: PyTorch's sgemm where installed, else
NumPy's BLAS; named with its library and size wherever it is used."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common.facts.machine import cpu_model
from common.launch.launcher import thread_env
from common.results.record import write_atomic

GEMM_SIZE = 4096
# measured in a fresh process: the best of a few products after a warm-up, so that
# neither thread start-up nor a scheduler hiccup sets the rate
_GEMM = r"""
import json, sys, time
n, reps = int(sys.argv[1]), 5
try:
    import torch
    a, b = torch.randn(n, n), torch.randn(n, n)
    run, lib = (lambda: torch.mm(a, b)), f"torch {torch.__version__} sgemm"
except ImportError:
    import numpy as np
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32); b = a.copy()
    run, lib = (lambda: a @ b), f"numpy {np.__version__} BLAS"
run()
best = min((lambda t: (run(), time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(reps))
print(json.dumps({"gflops": 2 * n ** 3 / best / 1e9, "library": lib}))
"""
# a results folder's CPU peak (benchmarks.compare), kept so that a resumed comparison
# measures its new records against the same peak as the ones it keeps
PEAK_FILE = "cpu_peak.json"


def gemm_rate(threads: int, size: int = GEMM_SIZE) -> dict:
    env = {**os.environ, **thread_env(threads)}
    out = subprocess.run([sys.executable, "-c", _GEMM, str(size)], capture_output=True,
                         text=True, env=env, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_peak(folder: Path, threads: int, size: int) -> dict:
    """The CPU peak of a results folder: its PEAK_FILE where it was measured the same way
    on this CPU, else measured now (nothing else should be running) and written there.
    {"gflops", "library", "size", "threads", "cpu_model", "measured"}; on failure
    {"error": why}, which the records then give as the reason MFU is missing."""
    path = Path(folder) / PEAK_FILE
    same = {"size": size, "threads": threads, "cpu_model": cpu_model()}
    try:
        kept = json.loads(path.read_text())
        if {k: kept.get(k) for k in same} == same and kept.get("gflops"):
            return kept
    except (OSError, ValueError, AttributeError):
        pass
    try:
        peak = {**gemm_rate(threads, size), **same,
                "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        return {"error": f"the CPU peak measurement (a {size}x{size} float32 GEMM) failed: "
                         f"{type(e).__name__}: {str(e)[:200]}"}
    write_atomic(path, peak)
    return peak
