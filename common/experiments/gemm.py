"""The CPU's limits, measured: its float32 GEMM rate (the compute floor of
benchmarks.speed, the CPU peak of benchmarks.compare's utilisation (MFU) figures and of
benchmarks.profile's roofline) and its memory bandwidth (the roofline's other side). An
n x n float32 product, or a streaming copy, in a fresh process with the run's thread
count: PyTorch's where installed, else NumPy's; named with its library and size wherever
it is used."""
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
n, reps, dev = int(sys.argv[1]), 5, sys.argv[2]
try:
    import torch
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    run, lib = (lambda: torch.mm(a, b)), f"torch {torch.__version__} sgemm"
    if dev == "cuda":    # float32 as the suite trains: no TF32 tensor cores
        torch.backends.cuda.matmul.allow_tf32 = False
        run, lib = (lambda: (torch.mm(a, b), torch.cuda.synchronize())), \
            f"{lib} on {torch.cuda.get_device_name()}"
except ImportError:
    assert dev == "cpu", "a GPU's limits need torch"
    import numpy as np
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32); b = a.copy()
    run, lib = (lambda: a @ b), f"numpy {np.__version__} BLAS"
run()
best = min((lambda t: (run(), time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(reps))
print(json.dumps({"gflops": 2 * n ** 3 / best / 1e9, "library": lib}))
"""
# A streaming copy of STREAM_MB megabytes (far beyond any cache) in a fresh process
# with the run's threads: the memory bandwidth of a roofline, measured the same way as
# the GEMM (torch's copy_, which uses the intra-op threads, where installed; else NumPy's,
# on one thread); bytes moved = read + write
STREAM_MB = 512
_STREAM = r"""
import json, sys, time
n, reps, dev = int(sys.argv[1]) * 2**20 // 4, 5, sys.argv[2]
try:
    import torch
    a, b = torch.ones(n, device=dev), torch.empty(n, device=dev)
    run, lib = (lambda: b.copy_(a)), f"torch {torch.__version__} copy_"
    if dev == "cuda":
        run, lib = (lambda: (b.copy_(a), torch.cuda.synchronize())), \
            f"{lib} on {torch.cuda.get_device_name()}"
except ImportError:
    assert dev == "cpu", "a GPU's limits need torch"
    import numpy as np
    a, b = np.ones(n, np.float32), np.empty(n, np.float32)
    run, lib = (lambda: np.copyto(b, a)), f"numpy {np.__version__} copyto (1 thread)"
run()
best = min((lambda t: (run(), time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(reps))
print(json.dumps({"gb_per_s": 2 * 4 * n / best / 1e9, "library": lib}))
"""
# a results folder's CPU peak (benchmarks.compare), kept so that a resumed comparison
# measures its new records against the same peak as the ones it keeps
PEAK_FILE = "cpu_peak.json"
BANDWIDTH_FILE = "cpu_bandwidth.json"
GPU_PEAK_FILE, GPU_BANDWIDTH_FILE = "gpu_peak.json", "gpu_bandwidth.json"


def _measure(program: str, threads: int, size: int, device: str = "cpu") -> dict:
    env = {**os.environ, **thread_env(threads)}
    out = subprocess.run([sys.executable, "-c", program, str(size), device], capture_output=True,
                         text=True, env=env, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def gemm_rate(threads: int, size: int = GEMM_SIZE) -> dict:
    return _measure(_GEMM, threads, size)


def _kept_or_measured(path: Path, program: str, threads: int, size: int, what: str,
                      key: str, device: str = "cpu") -> dict:
    """A limit kept in `path` where it was measured the same way on this CPU, else
    measured now (nothing else should be running) and written there; on failure
    {"error": why}."""
    same = {"size": size, "threads": threads, "cpu_model": cpu_model(), "device": device}
    try:
        kept = json.loads(path.read_text())
        kept.setdefault("device", "cpu")       # a file from before GPUs had limits of their own
        if {k: kept.get(k) for k in same} == same and kept.get(key):
            return kept
    except (OSError, ValueError, AttributeError):
        pass
    try:
        value = {**_measure(program, threads, size, device), **same,
                 "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        return {"error": f"the {what} measurement failed: {type(e).__name__}: {str(e)[:200]}"}
    write_atomic(path, value)
    return value


def cpu_peak(folder: Path, threads: int, size: int) -> dict:
    """The CPU peak of a results folder (a float32 GEMM of size x size):
    {"gflops", "library", "size", "threads", "cpu_model", "measured"} or {"error"}, which
    the records then give as the reason MFU is missing."""
    return _kept_or_measured(Path(folder) / PEAK_FILE, _GEMM, threads, size,
                             f"CPU peak (a {size}x{size} float32 GEMM)", "gflops")


def cpu_bandwidth(folder: Path, threads: int, size_mb: int = STREAM_MB) -> dict:
    """The memory bandwidth of a results folder (a streaming copy of size_mb MB):
    {"gb_per_s", "library", "size", "threads", "cpu_model", "measured"} or {"error"}."""
    return _kept_or_measured(Path(folder) / BANDWIDTH_FILE, _STREAM, threads, size_mb,
                             f"memory bandwidth (a {size_mb} MB copy)", "gb_per_s")


def gpu_limits(folder: Path, size: int = GEMM_SIZE, size_mb: int = STREAM_MB) -> tuple[dict, dict]:
    """The first GPU's float32 GEMM rate (no TF32) and device memory bandwidth, measured
    as the CPU's are (torch, in a fresh process): the roofline of a profile on a GPU."""
    return (_kept_or_measured(Path(folder) / GPU_PEAK_FILE, _GEMM, 1, size,
                              f"GPU peak (a {size}x{size} float32 GEMM)", "gflops", "cuda"),
            _kept_or_measured(Path(folder) / GPU_BANDWIDTH_FILE, _STREAM, 1, size_mb,
                              f"GPU memory bandwidth (a {size_mb} MB copy)", "gb_per_s", "cuda"))
