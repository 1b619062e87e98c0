"""The whole suite once per CPU kernel path: `python -m tests.helpers.kernel_paths [PYTEST ARGS]`
(`make test-kernel-paths`).

The instruction set a CPU offers picks the frameworks' kernels, and the kernels decide
float rounding, so a check that rests on rounding passes on one CPU kind and fails on
another (issue 28: AMD EPYC with AVX2, with AVX-512, Intel Xeon with AVX-512; issue 49: a
ratio's last bit from np.log and np.exp). On one machine, the libraries' own caps stand
in for the others: torch's dispatch (ATEN_CPU_CAPABILITY), oneDNN's (ONEDNN_MAX_CPU_ISA,
used by torch, TensorFlow and Paddle), MKL's (MKL_ENABLE_INSTRUCTIONS), NumPy's
(NPY_DISABLE_CPU_FEATURES: NumPy 2.4 names its dispatch targets, X86_V3, X86_V4,
AVX512_ICL, AVX512_SPR, and turning X86_V4 off leaves the ICL and SPR kernels on where the
CPU has them; NumPy 1.26, MXNet's, names AVX512F ... AVX512_ICL) and XLA's code
generation
(--xla_cpu_max_isa). A path this CPU cannot run is left out with the reason (torch asked
for AVX-512 on a CPU without it stops with an illegal instruction). Exit 1 if any path
failed."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from common.facts.machine import cpu_flags, cpu_info, cpu_line

# NumPy's dispatch targets above AVX2: NumPy 2.4's (X86_V4, AVX512_ICL, AVX512_SPR) and
# MXNet's NumPy 1.26's (AVX512F ... AVX512_ICL); each version ignores the other's names
NUMPY_AVX512 = "X86_V4 AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"
# An AVX2-only CPU as nearly as the caps make one: every library's kernels at AVX2
AVX2_EVERYWHERE = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                   "MKL_ENABLE_INSTRUCTIONS": "AVX2", "NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512,
                   "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}
# (the variables, the /proc/cpuinfo flags the path needs, whether it differs from the
# CPU's own kernels only on a CPU with AVX-512): the machine's own kernels first, then
# every cap docs/testing.md lists
PATHS = [({}, (), False),
         ({"ATEN_CPU_CAPABILITY": "default"}, (), False),
         ({"ATEN_CPU_CAPABILITY": "avx2"}, ("avx2",), False),
         ({"ATEN_CPU_CAPABILITY": "avx512"}, ("avx512f", "avx512bw", "avx512vl", "avx512dq"), False),
         (AVX2_EVERYWHERE, ("avx2",), True)]

CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
        "NPY_DISABLE_CPU_FEATURES", "XLA_FLAGS")


def describe(variables: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in variables.items()) or "the CPU's own kernels"


def main(pytest_args: list[str]) -> int:
    flags = cpu_flags()
    print("CPU:", cpu_line(cpu_info()), flush=True)
    results = []
    for variables, needs, only_avx512 in PATHS:
        missing = [f for f in needs if f not in flags]
        if missing:
            results.append((variables, f"left out: this CPU lacks {' '.join(missing)}", True))
            continue
        if only_avx512 and "avx512f" not in flags:
            results.append((variables, "left out: this CPU has no AVX-512, so its own kernels "
                            "are these", True))
            continue
        print(f"\n== {describe(variables)} ==", flush=True)
        # each path from the CPU's own kernels: a cap set in this shell is not inherited
        # (the others, OPENBLAS_CORETYPE among them, stay as the machine has them)
        env = {**{k: v for k, v in os.environ.items() if k not in CAPS}, **variables}
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile",
                               *pytest_args], env=env)
        results.append((variables, f"exit {proc.returncode} after {time.monotonic() - t0:.0f} s",
                        proc.returncode == 0))
    print("\nkernel path: outcome")
    for variables, outcome, ok in results:
        print(f"  {describe(variables)}: {outcome}{'' if ok else '  FAILED'}")
    return 0 if all(ok for _, _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
