"""Where a run went (issue 28): the CPU's vector extensions, which pick its kernels and so
its rounding, and the kernel-path variables that were set, in the pytest header, every
record's env and every report's Machine line."""
import json
import subprocess
import sys

from common.facts import machine
from tests.conftest import ROOT, pytest_report_header, subprocess_env

AMD_AVX2 = {"fpu", "sse4_2", "avx", "avx2", "fma", "bmi2"}
INTEL_AVX512 = {"avx", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512_fp16", "amx_tile",
                "amx_bf16"}


def test_vector_extensions_as_lscpu_names_them():
    assert machine.cpu_vector_extensions(AMD_AVX2) == "AVX2, no AVX-512, no AMX"
    assert machine.cpu_vector_extensions(INTEL_AVX512) == (
        "AVX2, AVX-512 (avx512_fp16 avx512bw avx512f avx512vl), AMX (amx_bf16 amx_tile)")
    assert machine.cpu_vector_extensions(set()) == "unknown"


def test_the_pytest_header_names_the_cpu_and_its_kernel_paths():
    header = pytest_report_header(None)
    assert header.startswith(f"CPU: {machine.cpu_model()} (")
    assert machine.cpu_vector_extensions() in header and "kernel-path variables: " in header


def test_kernel_path_variables_reach_the_record_and_the_report():
    """A process started with two of them set (and the others unset, whatever this one
    runs under) records exactly those two, and the report's Machine line shows them."""
    env = {k: v for k, v in subprocess_env().items() if k not in machine.KERNEL_PATH_VARS}
    env.update(ATEN_CPU_CAPABILITY="default", ONEDNN_MAX_CPU_ISA="AVX2")
    code = ("import json; from common.facts.machine import env_info; "
            "from common.reports.runs import machine_lines; e = env_info(); "
            "print(json.dumps({'env': e, 'line': machine_lines([{'env': e}])[0]}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    cwd=ROOT, env=env, check=True).stdout)
    assert out["env"]["kernel_path_env"] == {"ATEN_CPU_CAPABILITY": "default",
                                             "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert out["env"]["cpu_vector_extensions"] == machine.cpu_vector_extensions()
    assert (f"{machine.cpu_vector_extensions()}); kernel-path variables: "
            "ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=AVX2;") in out["line"]
    assert "kernel-path variables: none set" in machine.cpu_line({**out["env"], "kernel_path_env": {}})
