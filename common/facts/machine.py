"""The machine a figure was measured on, read without importing any framework: CPU
and GPU models (asked of the driver), the C++ compiler, library versions, and the
suite's own commit. Every run record keeps this as its "env"."""
from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import shutil
import subprocess
from pathlib import Path

from common.facts import registry


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def gpu_names() -> tuple[str, ...]:
    """The NVIDIA GPUs on this machine, asked of the driver (nvidia-smi), importing no
    framework; () without a driver. Asked once per process."""
    if not shutil.which("nvidia-smi"):
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line.strip() for line in out.splitlines() if line.strip())


def gpu_count() -> int:
    return len(gpu_names())


def gpu_model() -> str | None:
    return ", ".join(gpu_names()) or None


def cxx() -> str | None:
    """The C++ compiler that compilers such as torch.compile's inductor build CPU kernels
    with (CXX, else c++ / g++ / clang++ on PATH), with its version; None without one."""
    for name in filter(None, (os.environ.get("CXX"), "c++", "g++", "clang++")):
        path = shutil.which(name)
        if path:
            try:
                out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
                return f"{name}: {out.stdout.splitlines()[0]}" if out.stdout else name
            except (OSError, subprocess.SubprocessError):
                return name
    return None


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def commit() -> str | None:
    """The suite's git commit (12 hex digits, "-dirty" with uncommitted changes), asked
    of git once per process; None outside a git checkout or without git."""
    root = Path(__file__).resolve().parents[2]
    if not shutil.which("git"):
        return None
    try:
        # every tag excluded: the commit's own name, never a tag's
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty",
                              "--abbrev=12", "--exclude=*"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def env_info() -> dict:
    """Where a figure was measured."""
    dists = ["numpy", *dict.fromkeys(d for f in registry.FRAMEWORKS.values() for d in f.dists)]
    return {
        "python": platform.python_version(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_model": gpu_model(),
        "libraries": {d: v for d in dists if (v := version(d))},
        "cxx": cxx(),
        "commit": commit(),
    }


def framework_version(framework: str, env: dict) -> str | None:
    """The framework's version as the environment record has it (no import)."""
    return next((env["libraries"][d] for d in registry.facts(framework).dists
                 if d in env["libraries"]), None)
