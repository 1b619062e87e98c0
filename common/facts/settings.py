"""The settings each framework's own documentation recommends for training, as data: one
table per framework (SETTINGS), each setting with the page it comes from, where it
applies (a CPU, a GPU), what it needs (a CPU flag, a library file) and how it is applied:
environment variables set before the framework loads, an execution (compilation) the run
switches to, or an in-process switch the framework's package applies (Backend.
apply_setting). benchmarks.settings measures each against the defaults; compare
--settings runs with them, and every record names the settings it ran with.

Imports no framework: the tables are read to plan runs and to refuse bad input."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from common.facts import machine

# What a setting changes, in the words
KINDS = ("threads", "library", "compile", "layout", "allocator", "precision", "communication")
# Environment variables that hold a list of flags: two settings' values join
JOINED = {"XLA_FLAGS": " ", "LD_PRELOAD": ":"}
# The kept settings per machine kind (machine_kind()): benchmarks.settings' decisions
# file, committed under the kind's name; what compare --settings best applies and the
# report's "best known" section reads
BEST_DIR = Path(__file__).resolve().parents[2] / "docs" / "results" / "settings"
# Debian's allocators (packages libjemalloc2, libtcmalloc-minimal4)
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"


class UnknownSetting(ValueError):
    """A setting that the framework's table does not hold, or one this machine cannot apply."""


@dataclass(frozen=True)
class Setting:
    name: str
    what: str                       # one line: what it changes
    source: str                     # the documentation page that recommends it
    kind: str                       # one of KINDS
    devices: tuple[str, ...] = ("cpu", "gpu")   # the device kinds it applies to
    env: dict = field(default_factory=dict)     # set before the framework loads
    execution: str | None = None    # the execution (registry.EXECUTIONS) it runs
    hook: bool = False              # an in-process switch: Backend.apply_setting(name)
    needs_flags: tuple[str, ...] = ()   # CPU flags, one of which must be present
    needs_file: str | None = None   # a file that must exist (a library to preload)
    # "float32" or the lower precision it computes in (its own tolerance: PRECISION)
    precision: str = "float32"
    # the part of the gradients' bytes it puts on the link (a compression), which the
    # links' check of what they carried expects (common/launch/netns.py)
    wire_share: float = 1.0


# How far a setting's run may stray from the defaults' on the same weights and batches
# (the relative difference of the first step losses, as many as the model says: its
# COMMANDS["settings"]["agree_steps"]; the defaults' being the
# run the conformance suite holds to the NumPy oracle), and how much test accuracy it may
# lose after the default epochs. float32: other kernels and summation orders, a few ulps
# per op growing over the steps (rows of different frameworks agree to 1e-4 on LeNet's
# first steps); TF32 keeps 10 mantissa bits (relative rounding 2^-11, about 5e-4 per
# product); float16 gradients on the link (a communication setting) keep 10 as well, one
# rounding of each summed gradient a step; bfloat16 keeps 7 (2^-8, about 4e-3)
PRECISION = {"float32": {"step_loss": 2e-3, "accuracy": 0.02},
             "tf32": {"step_loss": 2e-2, "accuracy": 0.02},
             "float16": {"step_loss": 2e-2, "accuracy": 0.02},
             "bfloat16": {"step_loss": 1e-1, "accuracy": 0.03}}
# The precision the defaults themselves compute in, by device kind: on NVIDIA GPUs from
# Ampere on, float32 convolutions run on TF32 tensor cores by default (PyTorch's
# torch.backends.cudnn.allow_tf32 is True; XLA's default precision of float32 products),
# so two GPU runs that differ only in their kernels' choice agree to TF32's tolerance
# (measured on an H100: LeNet's first 10 losses 2.9e-3 apart with cuDNN's auto-tuner on)
DEVICE_PRECISION = {"cpu": "float32", "gpu": "tf32"}

_TORCH_TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
_JAX_GPU = "https://docs.jax.dev/en/latest/gpu_performance_tips.html"
_XLA_FLAGS = "https://docs.jax.dev/en/latest/xla_flags.html"
# XLA 0.10's YNNPACK fusions, which made JAX's LeNet 2x slower than 0.7.1's on these CPUs
# (docs/results/cpu-2core-versions.md); the flag's empty value turns them off
_YNN_OFF = Setting("ynn-fusion-off", "XLA's CPU YNNPACK fusions off (XLA_FLAGS)", _XLA_FLAGS,
                   "compile", ("cpu",), {"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type="})
_OMP_AFFINITY = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
# The gradient exchange across nodes (kind "communication"): applied in runs across
# nodes only (why_not), and benchmarks.settings measures it across emulated nodes
# (--nodes 2 --link RATE). The buffer sizes are 0.25 MB so that LeNet's gradients (516
# KB, every engine's default buffer holding them all) go in two parts: the dense layers'
# (415 KB), ready early in the backward pass, whose exchange can then run beside the
# convolutions' backward, and the convolutions' (101 KB)
COMM_BUFFER_MB = 0.25
# bfloat16 on a CPU pays where the CPU has bfloat16 instructions (AVX-512 BF16, AMX);
# elsewhere the kernels convert in software
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
_KERAS_BF16 = Setting("mixed-bf16", "Keras's mixed_bfloat16 dtype policy: layers compute in "
                      "bfloat16, weights stay float32", "https://keras.io/api/mixed_precision/",
                      "precision", ("cpu",), hook=True, needs_flags=BF16_FLAGS,
                      precision="bfloat16")

SETTINGS: dict[str, tuple[Setting, ...]] = {
    "pytorch": (
        Setting("compiled", "torch.compile (inductor) instead of eager", 
                "https://pytorch.org/docs/stable/generated/torch.compile.html", "compile",
                execution="compiled"),
        Setting("omp-affinity", "OpenMP threads bound to cores (OMP_PROC_BIND, OMP_PLACES)",
                _TORCH_TUNING, "threads", ("cpu",), _OMP_AFFINITY),
        Setting("jemalloc", "jemalloc as the allocator (LD_PRELOAD)", _TORCH_TUNING, "allocator",
                ("cpu",), {"LD_PRELOAD": JEMALLOC}, needs_file=JEMALLOC),
        Setting("tcmalloc", "tcmalloc as the allocator (LD_PRELOAD)", _TORCH_TUNING, "allocator",
                ("cpu",), {"LD_PRELOAD": TCMALLOC}, needs_file=TCMALLOC),
        Setting("bf16-autocast", "torch.autocast to bfloat16: convolutions and matrix "
                "products in bfloat16, weights and losses in float32 (on a CPU, one with "
                "bfloat16 instructions; on a GPU, its tensor cores)",
                "https://pytorch.org/docs/stable/amp.html", "precision",
                hook=True, needs_flags=BF16_FLAGS, precision="bfloat16"),
        Setting("ddp-small-buckets", f"DDP's gradient buckets of {COMM_BUFFER_MB} MB "
                "(bucket_cap_mb; default 25 MB, the first bucket 1 MB): a bucket's all-reduce "
                "starts while the backward pass goes on",
                "https://pytorch.org/docs/stable/generated/"
                "torch.nn.parallel.DistributedDataParallel.html", "communication", hook=True),
        Setting("fp16-compress", "DDP's fp16_compress_hook: gradients cross the link as "
                "float16, half the bytes", "https://pytorch.org/docs/stable/ddp_comm_hooks.html",
                "communication", hook=True, precision="float16", wire_share=0.5),
        Setting("cudnn-benchmark", "cuDNN's auto-tuner picks each convolution's algorithm "
                "(torch.backends.cudnn.benchmark)", _TORCH_TUNING, "library", ("gpu",), hook=True),
        Setting("tf32", "TF32 tensor cores for float32 matrix products "
                "(torch.backends.cuda.matmul.allow_tf32; cuDNN's convolutions use them by default)",
                "https://pytorch.org/docs/stable/notes/cuda.html"
                "#tensorfloat-32-tf32-on-ampere-and-later-devices", "precision", ("gpu",),
                hook=True, precision="tf32"),
    ),
    "tensorflow": (
        Setting("xla", "XLA: the step compiled with jit_compile=True",
                "https://www.tensorflow.org/xla", "compile", execution="compiled"),
        Setting("onednn-bf16", "Grappler's oneDNN auto mixed precision: a graph's ops in "
                "bfloat16 where safe (auto_mixed_precision_onednn_bfloat16)",
                "https://www.tensorflow.org/api_docs/python/tf/config/optimizer/"
                "set_experimental_options", "precision", ("cpu",), hook=True,
                needs_flags=BF16_FLAGS, precision="bfloat16"),
        Setting("collective-packs", "MultiWorkerMirroredStrategy's gradients all-reduced in "
                f"packs of {COMM_BUFFER_MB * 1024:g} KiB (CommunicationOptions bytes_per_pack; "
                "default 0, one pack), so that packs overlap; its effect is not seen: the "
                "suite's trainer updates each variable in its replica, so each gradient is "
                "all-reduced on its own (TensorFlow's log: num_packs = 1, with it and without)",
                "https://www.tensorflow.org/api_docs/python/tf/"
                "distribute/experimental/CommunicationOptions", "communication", hook=True),
    ),
    "mxnet": (
        Setting("hybridize", "hybridize(static_alloc, static_shape) for every mode",
                "https://mxnet.apache.org/versions/1.9.1/api/python/docs/tutorials/packages/"
                "gluon/blocks/hybridize.html", "compile", execution="compiled"),
        Setting("omp-affinity", "OpenMP threads bound to cores (OMP_PROC_BIND, OMP_PLACES)",
                "https://mxnet.apache.org/versions/1.9.1/api/faq/perf", "threads", ("cpu",),
                _OMP_AFFINITY),
        Setting("split-big-arrays", "KVStore splits every array above 2^15 elements over "
                "all servers (MXNET_KVSTORE_BIGARRAY_BOUND; default 10^6: LeNet's 102,400-element "
                "dense weight goes whole to one server)",
                "https://mxnet.apache.org/versions/1.9.1/api/faq/env_var", "communication",
                env={"MXNET_KVSTORE_BIGARRAY_BOUND": "32768"}),
    ),
    "paddle": (
        Setting("to-static", "paddle.jit.to_static: the forward as a static program",
                "https://www.paddlepaddle.org.cn/documentation/docs/en/guides/jit/"
                "basic_usage_en.html", "compile", execution="compiled"),
        # measured: its dynamic graph executes no oneDNN primitive with the flag, and
        # where Paddle 3.3.1 does run oneDNN (to_static, the old static graph) a training
        # step crashes (docs/results/cpu-2core-paddle-onednn.md, oneDNN's verbose log)
        Setting("onednn", "oneDNN kernels in dynamic graph mode (FLAGS_use_mkldnn); its effect is "
                "not seen: in Paddle 3.3.1's dynamic graph oneDNN's log shows no primitive run",
                "https://www.paddlepaddle.org.cn/documentation/docs/en/guides/flags/"
                "flags_en.html", "library", ("cpu",), {"FLAGS_use_mkldnn": "1"}),
        Setting("small-buffers", f"DataParallel's gradient buffers of {COMM_BUFFER_MB} MB "
                "(comm_buffer_size, last_comm_buffer_size; default 25 MB and 1 MB)",
                "https://www.paddlepaddle.org.cn/documentation/docs/en/api/paddle/"
                "DataParallel_en.html", "communication", hook=True),
    ),
    "jax": (
        _YNN_OFF,
        Setting("triton-gemm", "XLA's Triton GEMM emitter for every matrix product it supports",
                _JAX_GPU, "compile", ("gpu",), {"XLA_FLAGS": "--xla_gpu_triton_gemm_any=True"}),
        Setting("bf16-matmul", "bfloat16 matrix products and convolutions "
                "(JAX_DEFAULT_MATMUL_PRECISION)", _JAX_GPU, "precision", ("gpu",),
                {"JAX_DEFAULT_MATMUL_PRECISION": "bfloat16"}, precision="bfloat16"),
        # XLA:CPU has no such scheduler: its collectives run in the program's order
        Setting("latency-hiding", "XLA's latency-hiding scheduler: collectives overlap "
                "compute (--xla_gpu_enable_latency_hiding_scheduler)", _JAX_GPU,
                "communication", ("gpu",),
                {"XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=true"}),
    ),
    "keras-tensorflow": (
        Setting("xla", "Model.compile(jit_compile=True): train_step compiled by XLA",
                "https://keras.io/api/models/model_training_apis/", "compile",
                execution="compiled"),
        _KERAS_BF16,
    ),
    # measured (tests/test_setting_effects.py): Keras hands XLA bfloat16 convolutions and
    # products, which XLA:CPU's optimizations turn back into float32 ones
    "keras-jax": (_YNN_OFF, replace(_KERAS_BF16, what=_KERAS_BF16.what + "; its effect is not "
                                    "seen: XLA:CPU computes every convolution and matrix "
                                    "product of the step in float32 (bfloat16 in its HLO "
                                    "before its optimizations, float32 after), only the "
                                    "activations between them are held in bfloat16")),
    "keras-torch": (
        Setting("compiled", "Model.compile(jit_compile=True): train_step in torch.compile",
                "https://keras.io/api/models/model_training_apis/", "compile",
                execution="compiled"),
        _KERAS_BF16,
    ),
}


def table(framework: str) -> dict[str, Setting]:
    return {s.name: s for s in SETTINGS.get(framework, ())}


def get(framework: str, names) -> list[Setting]:
    """The named settings of a framework, in table order; UnknownSetting names what is
    not in its table and what is."""
    own = table(framework)
    unknown = [n for n in names if n not in own]
    if unknown:
        raise UnknownSetting(f"{framework} has no setting {', '.join(map(repr, unknown))}; "
                             f"its settings: {', '.join(own) or 'none'} (common/facts/settings.py)")
    return [s for s in own.values() if s.name in names]


def why_not(setting: Setting, device_kind: str, flags: set[str] | None = None,
            nodes: int | None = None) -> str | None:
    """Why a setting cannot run on this machine's `device_kind` ("cpu" or "gpu"), in a run
    across `nodes` nodes where that is known, or None. A communication setting is the
    exchange across nodes (on one node, TensorFlow's and MXNet's devices share a process,
    where their engines' options do not act): it is applied and measured there only."""
    if setting.kind == "communication" and nodes is not None and nodes < 2:
        return (f"{setting.name} sets the gradient exchange across nodes: give --nodes 2 or "
                "more (benchmarks.settings: --nodes 2 --link RATE)")
    if device_kind not in setting.devices:
        return f"{setting.name} applies to {' and '.join(setting.devices)} runs, not {device_kind}"
    live = flags is None
    flags = machine.usable_flags() if live else flags
    if setting.needs_flags and device_kind == "cpu" and not flags & set(setting.needs_flags):
        capped = (" (this CPU's are capped by a kernel-path variable)"
                  if live and flags != machine.cpu_flags() else "")
        return f"{setting.name} needs a CPU with {' or '.join(setting.needs_flags)}{capped}"
    if setting.needs_file and not os.path.exists(setting.needs_file):
        return f"{setting.name} needs {setting.needs_file}, which this machine lacks"
    return None


def env_of(settings: list[Setting]) -> dict[str, str]:
    """The environment of several settings together: list-valued variables joined, any
    other variable set by two of them to different values refused."""
    env: dict[str, str] = {}
    for s in settings:
        for k, v in s.env.items():
            if k in env and k in JOINED:
                env[k] = env[k] + JOINED[k] + v
            elif k in env and env[k] != v:
                raise UnknownSetting(f"settings set {k} both to {env[k]!r} and {v!r}: "
                                     "apply one of them")
            else:
                env[k] = v
    return env


def wire_share(framework: str, names) -> float:
    """The part of the gradients' bytes a run with these settings puts on the link."""
    share = 1.0
    for s in get(framework, names or []):
        share *= s.wire_share
    return share


def execution_of(settings: list[Setting], default: str) -> str:
    """The execution a run with these settings runs: the one a setting names, else the default."""
    named = {s.execution for s in settings if s.execution}
    if len(named) > 1:
        raise UnknownSetting(f"settings name several executions: {', '.join(sorted(named))}")
    return named.pop() if named else default


def precision_of(settings: list[Setting], device_kind: str = "cpu") -> str:
    """The lowest precision among the settings and the device's defaults (its tolerance
    applies to the run)."""
    order = list(PRECISION)
    return max([DEVICE_PRECISION[device_kind], *(s.precision for s in settings)], key=order.index)


def machine_kind(env: dict | None = None) -> str:
    """The kind of machine settings were measured on, as a file name: the GPU's model
    where one runs the rows, else the CPU's model, core count and widest vector
    instruction set, read from its flags (AVX-512 and AVX2-only CPUs of one model differ
    twice over). Of this machine, or of the one a record's env describes."""
    if env is None:
        env = {"gpu_model": machine.gpu_model(), "cpu_model": machine.cpu_model(),
               "cpu_count": os.cpu_count(), "cpu_flags": machine.vector_flags()}
    isa = machine.widest_isa(machine.flags_of(env))
    name = env.get("gpu_model") or f"{env.get('cpu_model')} {env.get('cpu_count')}core {isa}"
    return re.sub(r"[^a-z0-9]+", "-", str(name).lower()).strip("-")


def measured_kinds() -> list[str]:
    """The machine kinds with a settings file (BEST_DIR), by name."""
    return [p.stem for p in sorted(BEST_DIR.glob("*.json"))]


# benchmarks.settings measures a row across nodes on emulated nodes (network namespaces)
ACROSS_NETWORK = "netns"


def configuration(nodes: int | None, network: str | None = None, link: str | None = None) -> tuple:
    """What a row's times depend on beside its machine kind, framework, model and mode:
    one node, or the nodes, their network and link rate. A row's best known settings are
    those measured in its own configuration, never another's."""
    return (1, None, None) if (nodes or 1) == 1 else (nodes, network, link)


def group_configuration(group: dict) -> tuple:
    """A benchmarks.settings group's configuration (across nodes: emulated, at its link)."""
    return configuration(group.get("nodes"), ACROSS_NETWORK, group.get("link"))


def describe(config: tuple) -> str:
    nodes, network, link = config
    return "one node" if nodes == 1 else f"{nodes} nodes on {network}" + (f" at {link}" if link else "")


def best_known(kind: str) -> dict | None:
    """The decisions kept for a machine kind (machine_kind()), or None."""
    path = BEST_DIR / f"{kind}.json"
    return json.loads(path.read_text()) if path.is_file() else None
