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


# The instruction-set extensions that pick a CPU's kernels, and so its float rounding
# (docs/testing.md): lscpu's names, and the /proc/cpuinfo flags that make each one.
VECTOR_EXTENSIONS = {"AVX2": "avx2", "AVX-512": "avx512", "AMX": "amx_"}
# The variables that cap or choose those kernels: torch's dispatch, oneDNN (torch,
# TensorFlow, Paddle), MKL, NumPy's own dispatch and OpenBLAS under it, TensorFlow's
# oneDNN switch, XLA (JAX; --xla_cpu_max_isa caps its code generation).
KERNEL_PATH_VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                    "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "NPY_DISABLE_CPU_FEATURES",
                    "OPENBLAS_CORETYPE", "TF_ENABLE_ONEDNN_OPTS", "XLA_FLAGS")


def _cpuinfo_field(name: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(name):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_flags() -> set[str]:
    return set((_cpuinfo_field("flags") or "").split())


def cpu_vector_extensions(flags: set[str] | None = None) -> str:
    """The CPU's vector extensions as lscpu names them, each with the flags that make it
    (e.g. "AVX2, AVX-512 (avx512f avx512bw ... avx512_fp16), no AMX"); "unknown" where
    /proc/cpuinfo has no flags (not Linux on x86)."""
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return "unknown"
    parts = []
    for name, prefix in VECTOR_EXTENSIONS.items():
        have = sorted(f for f in flags if f.startswith(prefix))
        if not have:
            parts.append(f"no {name}")
        elif have == [prefix]:
            parts.append(name)
        else:
            parts.append(f"{name} ({' '.join(have)})")
    return ", ".join(parts)


def vector_flags(flags: set[str] | None = None) -> list[str]:
    """The flags of VECTOR_EXTENSIONS among the CPU's (or those given), sorted: what a
    record keeps of the CPU's flags, and what its machine kind is read from."""
    flags = cpu_flags() if flags is None else flags
    return sorted(f for f in flags if f.startswith(tuple(VECTOR_EXTENSIONS.values())))


def flags_of(env: dict) -> set[str]:
    """The vector flags an env record (env_info()) names: its "cpu_flags"; for a record
    written before those were kept, cpu_vector_extensions() read back (every flag it
    lists in brackets, and the flag a bare name stands for: "AVX2" is avx2), so that
    "no AVX-512" names no flag."""
    if env.get("cpu_flags") is not None:
        return set(env["cpu_flags"])
    flags = set()
    for part in (env.get("cpu_vector_extensions") or "").split(", "):
        name, _, listed = part.partition(" (")
        if name in VECTOR_EXTENSIONS:
            flags |= set(listed.rstrip(")").split()) if listed else {VECTOR_EXTENSIONS[name]}
    return flags


def widest_isa(flags: set[str]) -> str:
    """The widest vector instruction set the flags give: "avx512" (avx512f, which every
    AVX-512 CPU has), "avx2" or "sse"; the kernels' float rounding differs between them."""
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "sse"


def kernel_path_env(environ=None) -> dict[str, str]:
    """The kernel-path variables that are set (an empty dict: every library picks the
    CPU's own best kernels)."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in KERNEL_PATH_VARS if k in environ}


# What a kernel path caps below AVX-512 (make test-kernel-paths: torch's dispatch, oneDNN's
# and XLA's ISA at AVX2): the CPU's AVX-512 and AMX flags then name no kernel a library
# will pick (measured: with ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 BF16 CPU, TensorFlow's
# bfloat16 convolution fails, "could not create a primitive descriptor")
_CAPS = {"ATEN_CPU_CAPABILITY": ("default", "avx2"),
         "ONEDNN_MAX_CPU_ISA": ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2"),
         "DNNL_MAX_CPU_ISA": ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")}


def usable_flags(environ=None) -> set[str]:
    """The CPU's flags that its libraries' kernels may use: cpu_flags(), less AVX-512's and
    AMX's where a kernel-path variable caps torch, oneDNN or XLA below AVX-512."""
    environ = os.environ if environ is None else environ
    capped = any(environ.get(k, "") in values for k, values in _CAPS.items()) or any(
        f"--xla_cpu_max_isa={isa}" in environ.get("XLA_FLAGS", "") for isa in ("AVX2", "AVX", "SSE4_2"))
    flags = cpu_flags()
    return {f for f in flags if not f.startswith(("avx512", "amx"))} if capped else flags


def cpu_line(env: dict) -> str:
    """Where a run went, in one line, from an env record (env_info()): the CPU model, its
    vector extensions and the kernel-path variables that were set."""
    paths = env.get("kernel_path_env")
    paths = ("none set" if paths == {} else "not recorded" if paths is None else
             " ".join(f"{k}={v}" for k, v in paths.items()))
    return (f"{env.get('cpu_model', '?')} ({env.get('cpu_count', '?')} CPUs; "
            f"{env.get('cpu_vector_extensions') or 'vector extensions not recorded'}); "
            f"kernel-path variables: {paths}")


def cpu_model() -> str:
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


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


def cpu_info() -> dict:
    """The CPU part of env_info(): what cpu_line() prints."""
    return {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "cpu_vector_extensions": cpu_vector_extensions(), "cpu_flags": vector_flags(),
            "kernel_path_env": kernel_path_env()}


def env_info() -> dict:
    """Where a figure was measured."""
    dists = ["numpy", *dict.fromkeys(d for f in registry.FRAMEWORKS.values() for d in f.dists)]
    return {
        "python": platform.python_version(),
        "os": platform.platform(),
        **cpu_info(),
        "gpu_model": gpu_model(),
        "libraries": {d: v for d in dists if (v := version(d))},
        "cxx": cxx(),
        "commit": commit(),
    }


def framework_version(framework: str, env: dict) -> str | None:
    """The framework's version as the environment record has it (no import)."""
    return next((env["libraries"][d] for d in registry.facts(framework).dists
                 if d in env["libraries"]), None)
