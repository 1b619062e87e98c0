"""Where a run went (issue 28): the CPU's vector extensions, which pick its kernels and so
its rounding, and the kernel-path variables that were set, in the pytest header, every
record's env and every report's Machine line."""
import json
import subprocess
import sys

import pytest

from common.facts import machine, registry, settings
from tests.conftest import ROOT, pytest_report_header, subprocess_env

AMD_AVX2 = {"fpu", "sse4_2", "avx", "avx2", "fma", "bmi2"}
INTEL_AVX512 = {"avx", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512_fp16", "amx_tile",
                "amx_bf16"}


def test_vector_extensions_as_lscpu_names_them():
    assert machine.cpu_vector_extensions(AMD_AVX2) == "AVX2, no AVX-512, no AMX"
    assert machine.cpu_vector_extensions(INTEL_AVX512) == (
        "AVX2, AVX-512 (avx512_fp16 avx512bw avx512f avx512vl), AMX (amx_bf16 amx_tile)")
    assert machine.cpu_vector_extensions(set()) == "unknown"


# The CPU kinds sessions and CI have met (DESIGN.md, "Machine kinds"): model name and the
# vector flags of /proc/cpuinfo, as their records show them (docs/results/**/*.json env)
# with a few of the older flags every such CPU has
_OLD = {"sse4_1", "sse4_2", "avx", "fma", "f16c", "bmi2"}
_AVX512 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi",
           "avx512_vbmi2", "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq", "avx512_bf16"}
KINDS_MET = {
    "amd-epyc-2core-avx2": ("amd-epyc-2core-avx2", "AMD EPYC", _OLD | {"avx2"}),
    # CPU family 25 (the kind's settings file was measured there) and family 26, which
    # adds avx512_vp2intersect: one kind, since the kind is read from the widest ISA
    "amd-epyc-2core-avx512": ("amd-epyc-2core-avx512", "AMD EPYC", _OLD | {"avx2"} | _AVX512),
    "amd-epyc-2core-avx512-family26": ("amd-epyc-2core-avx512", "AMD EPYC",
                                       _OLD | {"avx2", "avx512_vp2intersect"} | _AVX512),
    "intel-r-xeon-r-processor-2core-avx512": (
        "intel-r-xeon-r-processor-2core-avx512", "Intel(R) Xeon(R) Processor",
        _OLD | {"avx2", "avx_vnni", "avx512_fp16", "amx_bf16", "amx_int8", "amx_tile"} | _AVX512),
}


@pytest.mark.parametrize("met", sorted(KINDS_MET))
def test_the_machine_kind_is_read_from_the_cpus_flags(met):
    """Each CPU met, from its flags as env_info() records them, and from a record written
    before the flags were kept (its cpu_vector_extensions read back). Planted: the kind
    read from the formatted line ("AVX-512" in it) takes the AVX2-only EPYC, whose line is
    "AVX2, no AVX-512, no AMX", for an AVX-512 one."""
    kind, model, flags = KINDS_MET[met]
    env = {"cpu_model": model, "cpu_count": 2, "gpu_model": None}
    assert settings.machine_kind({**env, "cpu_flags": machine.vector_flags(flags)}) == kind
    legacy = {**env, "cpu_vector_extensions": machine.cpu_vector_extensions(flags)}
    assert machine.flags_of(legacy) == set(machine.vector_flags(flags))
    assert settings.machine_kind(legacy) == kind
    # a GPU's model names the kind wherever one ran the rows
    assert settings.machine_kind({**env, "gpu_model": "NVIDIA H100 80GB HBM3"}) == "nvidia-h100-80gb-hbm3"


def test_this_machines_kind_is_its_records_kind():
    env = machine.env_info()
    assert env["cpu_flags"] == machine.vector_flags(machine.cpu_flags())
    assert settings.machine_kind(env) == settings.machine_kind()
    assert settings.machine_kind().endswith(machine.widest_isa(machine.cpu_flags()))


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


def _numpy_targets(python: str, caps: str | None = None) -> dict:
    """NumPy's dispatch targets (on or off) in a process of `python` started with these
    NPY_DISABLE_CPU_FEATURES."""
    # the caps asked for alone, whatever this process runs under (make test-kernel-paths)
    env = {**{k: v for k, v in subprocess_env().items() if k != "NPY_DISABLE_CPU_FEATURES"},
           **({"NPY_DISABLE_CPU_FEATURES": caps} if caps else {})}
    code = ("import json, numpy as np\n"
            "try: from numpy._core import _multiarray_umath as m\n"
            "except ImportError: from numpy.core import _multiarray_umath as m\n"
            "print(json.dumps({t: m.__cpu_features__[t] for t in m.__cpu_dispatch__}))")
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True,
                                     env=env, check=True).stdout)


def _above_avx2(targets: dict) -> list[str]:
    return [t for t, on in targets.items() if on and t.startswith(("X86_V4", "AVX512"))]


@pytest.mark.skipif("avx512f" not in machine.cpu_flags(),
                    reason="this CPU has no AVX-512: NumPy runs its AVX2 kernels already, and "
                           "asking to turn off targets it lacks is an error")
@pytest.mark.parametrize("framework", [None, "mxnet"])
def test_the_avx2_path_turns_numpys_avx512_kernels_off(framework):
    """make test-kernel-paths' AVX2 path turns off every NumPy dispatch target above AVX2
    on this AVX-512 CPU, in the main environment (NumPy 2.4) and MXNet's (1.26). Planted:
    the old names (issue 49: "AVX2", "AVX512F") under NumPy 2.4, and X86_V4 alone, which
    leave AVX-512 targets on."""
    from tests.helpers.kernel_paths import AVX2_EVERYWHERE
    if framework and not registry.is_installed(framework):
        pytest.skip(f"{framework}'s environment is not installed")
    python = registry.python(framework) if framework else sys.executable
    assert _above_avx2(_numpy_targets(python)), "this AVX-512 CPU has no AVX-512 target on"
    assert _above_avx2(_numpy_targets(python, AVX2_EVERYWHERE["NPY_DISABLE_CPU_FEATURES"])) == []
    if not framework:
        for old in ("AVX2 AVX512F", "X86_V4"):
            assert _above_avx2(_numpy_targets(python, old)), old


def test_the_avx2_path_caps_xlas_code_generation():
    """XLA takes the AVX2 path's --xla_cpu_max_isa (an unknown ISA is only warned of, and
    the flag is then nothing: planted, BOGUS)."""
    pytest.importorskip("jax")
    from tests.helpers.kernel_paths import AVX2_EVERYWHERE

    def stderr(flags):
        code = "import jax.numpy as jnp; print(float(jnp.exp(jnp.ones(8)).sum()))"
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**{k: v for k, v in subprocess_env().items()
                                      if k != "TF_CPP_MIN_LOG_LEVEL"},   # XLA's warnings too
                                   "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"},
                              cwd=ROOT, check=True).stderr
    assert "Unknown CPU ISA" not in stderr(AVX2_EVERYWHERE["XLA_FLAGS"])
    assert "Unknown CPU ISA: BOGUS" in stderr("--xla_cpu_max_isa=BOGUS")


def test_a_kernel_path_capped_below_avx512_leaves_no_avx512_flag(monkeypatch):
    """make test-kernel-paths caps torch, oneDNN and XLA at AVX2 on an AVX-512 CPU: the
    bfloat16 settings must then be refused as on an AVX2-only CPU (seen: with oneDNN
    capped at AVX2, TensorFlow's onednn-bf16 step failed, "could not create a primitive
    descriptor"), and nothing is dropped without a cap."""
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})
    assert machine.usable_flags({}) == {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
    for env in ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, {"ATEN_CPU_CAPABILITY": "avx2"},
                {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}):
        assert machine.usable_flags(env) == {"avx2"}, env
    assert machine.usable_flags({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}) == machine.cpu_flags()
