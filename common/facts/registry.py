"""One table of facts per framework, and which are installed -- found without
importing any. Every other list of framework names, of the executions a framework
has and of what it cannot do derives from it."""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


# How a run's steps execute; each framework says how it does each one it has.
EXECUTIONS = {
    "eager": "op by op, as Python calls them",
    "graph": "traced once into a dataflow graph that the runtime optimises, no compiler "
             "(TensorFlow's tf.function)",
    "compiled": "the framework's compiler or graph optimiser (torch.compile, XLA, MXNet "
                "hybridize, Paddle to_static, jax.jit)",
}

# The features a framework may lack besides modes and executions
FEATURES = {
    "sync-bn": "BatchNorm synchronised over the replicas of native mode",
    "multi-device": "native mode on several devices",
    "replica-bn": "native mode on several devices with each replica's own BatchNorm "
                  "statistics (what runs without --sync-bn)",
    "devices": "the device experiments (benchmarks.devices: frameworks/<name>/ops.py)",
    "scopes": "the device-scopes example (benchmarks.device_scopes: frameworks/<name>/scopes.py)",
    "nodes": "native mode across several machines (--nodes N: the facts' engine starter)",
}

_KERAS_SCRATCH = ("Keras has no from-scratch training loop of its own: its data "
                  "parallelism is model.fit under a distribution")
_SINGLE_PROCESS = "{}'s single-process multi-device data parallelism is its native mode"
_NOT_DATAPARALLEL = "nn.DataParallel is PyTorch's; " + _SINGLE_PROCESS
_KERAS_JAX_BN = ("keras.distribution.DataParallel on JAX runs one program over the global "
                 "batch: BatchNorm normalises over every device's rows, never one replica's "
                 "alone (run several devices with --sync-bn)")


def _keras_lacks(name: str, **own: str) -> dict[str, str]:
    """What every Keras row lacks (a scratch loop; nn.DataParallel is PyTorch's), with the
    row's own gaps."""
    return {"scratch": _KERAS_SCRATCH, "sharded": _KERAS_SCRATCH, "tensor": _KERAS_SCRATCH,
            "dataparallel": _NOT_DATAPARALLEL.format(name), **own}


# fsdp and tp are keras.distribution.ModelParallel with a LayoutMap: JAX's alone (measured)
_KERAS_TF_LAYOUTS = ("keras.distribution.ModelParallel is JAX's alone in Keras 3.15: its "
                     "TensorFlow distribution_lib is a prototype (\"!!!DO NOT USE!!! ... This is "
                     "just a prototype\") without distribute_tensor "
                     "(keras.distribution.distribute_tensor fails with \"module "
                     "'keras.src.backend.tensorflow.distribution_lib' has no attribute "
                     "'distribute_tensor'\"), and TensorFlow's Variable never asks the "
                     "distribution for a layout: a kernel laid out ('batch', None) stays one "
                     "whole ResourceVariable on CPU:0, and fit runs as if no layout were given")


def _keras_on_tensorflow_only(backend: str, model: str) -> dict[str, str]:
    """What frameworks/keras writes on TensorFlow alone: on `backend`, gaps (`model`: why
    its model mode is not there)."""
    written = "frameworks/keras/{} is written on TensorFlow under Keras ({}); on " + backend + \
              " it is not written yet"
    return {"model": model,
            "devices": written.format("ops.py", "variables written with assign, TensorFlow's "
                                      "MirroredStrategy for the native all-reduce: Keras 3 "
                                      "has no collective of its own"),
            "scopes": written.format("scopes.py", "the gradients taken with TensorFlow's "
                                     "GradientTape")}


_KERAS_JAX_STAGES = ("frameworks/keras/pipeline.py backpropagates through a stage with "
                     "TensorFlow's GradientTape; on JAX a stage's backward is jax.vjp over "
                     "Model.stateless_call, not written: run eagerly (as model mode runs), "
                     "every primitive of every micro-batch shape compiles on its own (measured: "
                     "ResNet-18's first forward and backward at batch 8 on 1 thread, 15 s op by "
                     "op against 6 s in jax.jit)")
_KERAS_TORCH_STAGES = ("frameworks/keras/pipeline.py backpropagates through a stage with "
                       "TensorFlow's GradientTape; on torch, with one CPU device per process, "
                       "stages on the CPU need a process each and a hand-over between them "
                       "(torch.distributed send/recv) that Keras does not give: not written")
_KERAS_TORCH_DEVICES = ("Keras 3.15's torch backend has no keras.distribution (no "
                        "distribution_lib: keras.distribution.list_devices() fails with "
                        "\"'NoneType' object has no attribute 'list_devices'\", and model.fit "
                        "under a DataParallel scope runs as if it were not there), so "
                        "model.fit runs on one device")


@dataclass(frozen=True)
class Framework:
    name: str
    package: str                  # our package: frameworks.<name>
    imports: tuple[str, ...]      # modules that must be importable for it to run
    dists: tuple[str, ...]        # distributions whose versions a record keeps (first found
                                  # is the framework's version)
    extra: str                    # pip extra of this project
    native: str                   # how its native data parallelism runs
    native_processes: bool        # native mode runs one process per device
    # how the framework runs each execution it has (EXECUTIONS), and which one a mode
    # runs when none is asked for ("*": every mode not named)
    executions: dict[str, str]
    default_execution: dict[str, str]
    # how its engine starts on each of several machines (the name of one of
    # common.launch.engines.ENGINES; "" where it has none: its `lacks` says why under "nodes")
    engine_starter: str = ""
    # what it cannot do, with the reason: a mode, an execution (every one of EXECUTIONS
    # is either in `executions` or here) or a feature (FEATURES)
    lacks: dict[str, str] = field(default_factory=dict)
    # environment that must be set before the framework's modules load (Keras's backend)
    env: dict[str, str] = field(default_factory=dict)
    # more of it for a process that runs the framework's op-level profiler (benchmarks.profile's
    # workers, the conformance process): set by get(name, profiled=True), so both of the
    # profile's windows run with it, the one without the profiler too
    profile_env: dict[str, str] = field(default_factory=dict)
    # the Python environment its processes run in: "" the main one (the interpreter that
    # runs the suite), else one of its own (see python() below)
    environment: str = ""


# JAX's profile names XLA's fused instructions from the live executables' HLO: one loaded
# from the persistent compilation cache (JAX_COMPILATION_CACHE_DIR) ran under names that
# HLO does not give (measured: 74.6 % of LeNet's op time unmapped, ynn_fusion.10 ...,
# where the same program compiled in the process was all mapped), so a profiled process
# compiles its own
_JAX_PROFILE_ENV = {"JAX_ENABLE_COMPILATION_CACHE": "false"}

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("pytorch", "frameworks.pytorch", ("torch",), ("torch",), "pytorch",
              "torch.nn.parallel.DistributedDataParallel, one process per device "
              "(gloo on CPU, nccl on GPU)", True,
              {"eager": "PyTorch eager: autograd op by op",
               "compiled": "torch.compile (TorchDynamo + inductor: C++/OpenMP kernels on CPU, "
                           "Triton on GPUs)"},
              {"*": "eager"}, "torchrun",
              {"graph": "PyTorch's graph capture is its compiler (--execution compiled: "
                        "torch.compile); TorchScript, the older graph mode, is deprecated"}),
    Framework("tensorflow", "frameworks.tensorflow", ("tensorflow",), ("tensorflow",), "tensorflow",
              "tf.distribute.MirroredStrategy, custom loop with strategy.run and "
              "strategy.reduce in a tf.function", False,
              {"eager": "TensorFlow eager: ops run as Python calls them",
               "graph": "tf.function: traced once into a TensorFlow graph (grappler, no XLA)",
               "compiled": "XLA: each device's forward and backward in a "
                           "tf.function(jit_compile=True), the rest in a tf.function"},
              {"*": "graph", "model": "eager", "sharded": "eager", "tensor": "eager"}, "tf-config",
              {"dataparallel": _NOT_DATAPARALLEL.format("tensorflow")}),
    Framework("mxnet", "frameworks.mxnet", ("mxnet",), ("mxnet",), "mxnet",
              "gluon.Trainer over a context list, gradients reduced by a KVStore", False,
              {"eager": "MXNet imperative NDArray ops under autograd.record (queued "
                        "asynchronously to its engine)",
               "compiled": "HybridBlock.hybridize(static_alloc, static_shape): a cached "
                           "symbolic graph"},
              {"*": "eager", "native": "compiled"}, "dmlc",
              {"dataparallel": _NOT_DATAPARALLEL.format("mxnet"),
               "fsdp": "MXNet 1.9 has no sharded data parallelism: its KVStore reduces the "
                       "gradients (on the devices or in parameter servers) and every worker "
                       "keeps every parameter",
               "tp": "MXNet 1.9 has no tensor parallelism: a gluon block's parameters live "
                     "whole on each of its contexts (Parameter.initialize(ctx=[...]) copies "
                     "them), and no layer cuts its weights over devices",
               "graph": "MXNet's graph mode is hybridize(), run as --execution compiled"},
              # 1.9.1, its last release, needs NumPy 1; every other framework runs NumPy 2
              environment="mxnet",
              # engine bulking off, read when libmxnet loads: bulked, mxnet.profiler shows a
              # hybridized forward or backward as one event ("Activation,Pooling,...") and
              # eager autograd's as "ImperativeBulk" (measured: 98.9 % of LeNet's op time)
              profile_env={"MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN": "0"}),
    Framework("paddle", "frameworks.paddle", ("paddle",), ("paddlepaddle", "paddlepaddle-gpu"),
              "paddle", "paddle.DataParallel, one process per device "
              "(gloo on CPU, nccl on GPU)", True,
              {"eager": "Paddle dynamic graph (dygraph): ops run as Python calls them",
               "compiled": "paddle.jit.to_static: the forward as a static program, run by "
                           "Paddle's executor"},
              {"*": "eager"}, "paddle-launch",
              {"dataparallel": "Paddle has no single-process multi-device data parallelism: "
                               "paddle.DataParallel (its native mode) runs a process per device",
               "graph": "Paddle's graph mode is paddle.jit.to_static, run as --execution compiled",
               # tried in Paddle 3.3.1, CPU, gloo, 2 processes
               "fsdp": "Paddle's sharded data parallelism has no CPU path: "
                       "paddle.distributed.sharding.group_sharded_parallel, at each level (os, "
                       "os_g, p_g_os), asserts 'group_sharded_parallel only support gpu, xpu and "
                       "custom_device now' (its GroupShardedStage3 given device='cpu': 'Only "
                       "support CUDA / XPU / CustomDevice.'), and auto-parallel's "
                       "dist.shard_optimizer(opt, dist.ShardingStage3(...)) stops in LeNet's and "
                       "the ViT's forward pass: 'Unimplemented cpu kernel for all_to_all.' (two "
                       "plain Linears get to the backward pass: 'Unimplemented cpu kernel for "
                       "CReduceScatterOp.')"}),
    # JAX: functional, so the chapter's in-place allreduce writes into mutable slots
    # (frameworks/jax/devices.py Slot); its native data parallelism is the compiler's
    Framework("jax", "frameworks.jax", ("jax",), ("jax", "jaxlib"), "jax",
              "jax.jit over a Mesh of the devices: the batch sharded "
              "(NamedSharding(mesh, P('data'))), the parameters replicated; XLA's SPMD "
              "partitioner inserts the all-reduce of the gradients", False,
              {"eager": "JAX op by op: every jax.numpy call and jax.vjp dispatched as Python "
                        "calls it, no jax.jit",
               "compiled": "jax.jit: a shard's forward and backward (scratch, model mode) or "
                           "the whole step (native) traced once and compiled by XLA"},
              {"*": "compiled", "model": "eager", "tensor": "eager"}, "jax-distributed",
              {"graph": "JAX's graph is its compiler's input: jax.jit traces a jaxpr that XLA "
                        "compiles (--execution compiled)",
               "dataparallel": _NOT_DATAPARALLEL.format("jax")},
              profile_env=_JAX_PROFILE_ENV),
    # Keras 3, one row per backend (KERAS_BACKEND, set before Keras loads), one package
    Framework("keras-tensorflow", "frameworks.keras", ("keras", "tensorflow"), ("keras", "tensorflow"),
              "keras-tensorflow", "model.fit under tf.distribute.MirroredStrategy "
              "(keras.distribution.DataParallel is a prototype on this backend)", False,
              {"eager": "Model.compile(run_eagerly=True): train_step op by op",
               "graph": "Model.compile(jit_compile=False): train_step in a tf.function",
               "compiled": "Model.compile(jit_compile=True): train_step compiled by XLA"},
              {"*": "graph", "model": "eager"}, "tf-config",
              _keras_lacks("keras-tensorflow",
                           fsdp="sharded parameters: " + _KERAS_TF_LAYOUTS,
                           tp="weights cut over a model axis: " + _KERAS_TF_LAYOUTS),
              env={"KERAS_BACKEND": "tensorflow"}),
    Framework("keras-jax", "frameworks.keras", ("keras", "jax"), ("keras", "jax", "jaxlib"),
              "keras-jax", "model.fit under keras.distribution.DataParallel (a DeviceMesh of "
              "the devices: the batch sharded, the weights replicated; XLA inserts the "
              "all-reduce)", False,
              {"eager": "Model.compile(run_eagerly=True): train_step op by op in JAX, no jax.jit",
               "compiled": "Model.compile(jit_compile=True): train_step in jax.jit (XLA)"},
              {"*": "compiled", "model": "eager"}, "",
              _keras_lacks(
                  "keras-jax",
                  graph="Keras on JAX has no graph mode of its own: jit_compile=False without "
                        "run_eagerly runs train_step op by op, as eager does; JAX's graph is "
                        "its compiler's input (--execution compiled)",
                  # measured: one SPMD program over the global batch, so BatchNorm's mean
                  # and variance span every device's rows
                  **{"replica-bn": _KERAS_JAX_BN},
                  nodes="Keras on JAX across machines starts with keras.distribution.initialize "
                        "(jax.distributed: coordinator address, process count and id per "
                        "node); the suite's 'jax-distributed' engine starter "
                        "(common/launch/engines.py, which the jax row uses) is not wired to "
                        "keras-jax's trainer yet",
                  **_keras_on_tensorflow_only("JAX", _KERAS_JAX_STAGES)),
              env={"KERAS_BACKEND": "jax"}, profile_env=_JAX_PROFILE_ENV),
    Framework("keras-torch", "frameworks.keras", ("keras", "torch"), ("keras", "torch"),
              "keras-torch", "model.fit on one device (Keras 3.15's torch backend has no "
              "keras.distribution)", False,
              {"eager": "Model.compile(run_eagerly=True): train_step op by op in PyTorch",
               "compiled": "Model.compile(jit_compile=True): train_step in torch.compile "
                           "(TorchDynamo + inductor)"},
              {"*": "eager"}, "",
              _keras_lacks(
                  "keras-torch",
                  graph="Keras on PyTorch has no graph mode: jit_compile=False runs train_step "
                        "eagerly; its graph capture is torch.compile (--execution compiled)",
                  **{"multi-device": _KERAS_TORCH_DEVICES,
                     "sync-bn": "synchronised BatchNorm needs several devices: " + _KERAS_TORCH_DEVICES},
                  fsdp="sharded parameters need several devices: " + _KERAS_TORCH_DEVICES,
                  tp="weights cut over devices need several devices: " + _KERAS_TORCH_DEVICES,
                  nodes="Keras 3.15's torch backend has no keras.distribution: "
                        "keras.distribution.initialize fails with \"'NoneType' object has no "
                        "attribute 'initialize'\"; several processes would need "
                        "DistributedDataParallel around the model, outside Keras",
                  **_keras_on_tensorflow_only("torch", _KERAS_TORCH_STAGES)),
              env={"KERAS_BACKEND": "torch"}),
)}
NAMES = tuple(FRAMEWORKS)


class UnknownFramework(ValueError):
    pass


class NotInstalled(ImportError):
    pass


def check_name(name: str) -> str:
    if name not in FRAMEWORKS:
        raise UnknownFramework(
            f"unknown framework {name!r}; choose from: {', '.join(NAMES)}")
    return name


def groups() -> dict[str, list[str]]:
    """Names that stand for several frameworks on the command line: "keras", every
    installed Keras backend (every one, where none is installed: their rows then say
    how to install them)."""
    keras = [n for n in NAMES if n.startswith("keras-")]
    return {"keras": [n for n in keras if is_installed(n)] or keras}


def facts(name: str) -> Framework:
    return FRAMEWORKS[check_name(name)]


# Where each environment lives: a framework whose pins cannot share the main environment
# runs from a virtual environment of its own in the repository, .venv-<environment>
# (`make install` builds each from constraints-<environment>.txt), or from the
# interpreter that DL_COMPARE_PYTHON_<ENVIRONMENT> names.
ROOT = Path(__file__).resolve().parents[2]


def _running(python: Path) -> bool:
    """Whether `python` is the interpreter running this process, under any of its names
    (bin/python, bin/python3): the environment it starts is this one's."""
    return (str(python) == sys.executable
            or python.parent.parent.resolve() == Path(sys.prefix).resolve())


def environment_python(environment: str) -> str | None:
    """The interpreter of an environment of its own, where there is one (None: not
    built). The one running this process counts as itself, under any path."""
    own = os.environ.get(f"DL_COMPARE_PYTHON_{environment.upper()}")
    path = Path(own) if own else ROOT / f".venv-{environment}" / "bin" / "python"
    if _running(path):
        return sys.executable
    return str(path) if path.exists() else None


def python(name: str) -> str:
    """The interpreter that runs a framework's processes: its environment's, else this
    one (where its environment is not built, a framework installed beside the others
    still runs; one that is not is reported not-installed with the command that
    builds its environment)."""
    environment = facts(name).environment
    return (environment and environment_python(environment)) or sys.executable


@functools.lru_cache(maxsize=None)
def _importable(python: str, modules: tuple[str, ...]) -> bool:
    """Whether another interpreter finds every module, asked without importing any."""
    code = ("import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None "
            "for m in sys.argv[1:]))")
    try:
        return subprocess.run([python, "-c", code, *modules], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def is_installed(name: str) -> bool:
    """Whether a framework can run: its modules found by the interpreter that runs it
    (python()), none imported."""
    f, py = facts(name), python(name)
    if py == sys.executable:
        return all(importlib.util.find_spec(m) is not None for m in f.imports)
    return _importable(py, f.imports)


def installed() -> list[str]:
    return [n for n in NAMES if is_installed(n)]


def install_hint(name: str) -> str:
    """The command that installs a framework's extra, e.g. pip install -e '.[paddle]';
    in an environment of its own, the command that builds that environment."""
    f = facts(name)
    if not f.environment:
        return f"pip install -e '.[{f.extra}]'"
    venv = f".venv-{f.environment}"
    return (f"make install, or python3 -m venv {venv} && {venv}/bin/pip install "
            f"-c constraints-{f.environment}.txt -e '.[{f.extra}]'")


def not_installed(name: str) -> str:
    """Why a framework cannot run here, and the command that fixes it: the one message
    of every not-installed record and error."""
    f = facts(name)
    where = f" in {python(name)}" if f.environment else ""
    return (f"framework {name!r} is not installed (needs {', '.join(map(repr, f.imports))}"
            f"{where}); install it with: {install_hint(name)}")


def get(name: str, profiled: bool = False):
    """Import one framework package on demand and return its backend instance (after
    setting the environment its facts name, which must precede the import; `profiled`:
    with its profile_env too, for a process that runs its op-level profiler)."""
    if not is_installed(name):
        raise NotInstalled(not_installed(name))
    if python(name) != sys.executable:
        raise NotInstalled(f"framework {name!r} runs in an environment of its own: start its "
                           f"process with {python(name)} (common.facts.registry.python)")
    os.environ.update(facts(name).env)
    if profiled:
        env = facts(name).profile_env
        if any(m in sys.modules for m in facts(name).imports) and any(
                os.environ.get(k) != v for k, v in env.items()):
            raise RuntimeError(f"{name} is already loaded: {env} (its profile_env) must be set "
                               "before it loads")
        os.environ.update(env)
    return importlib.import_module(facts(name).package).BACKEND


def plugin(name: str, module: str, base: type):
    """`frameworks.<name>.<module>.<base name>` (e.g. ops.py's `class Ops(common.experiments.ops.Ops)`)
    bound to the framework's backend, imported on demand: the package that defines the
    backend holds the module beside it. A class that misses an abstract method fails
    here, loudly (TypeError naming the methods), not at the fifth call."""
    backend = get(name)
    package = importlib.import_module(type(backend).__module__).__package__
    mod = importlib.import_module(f"{package}.{module}")
    cls = getattr(mod, base.__name__, None)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{package}.{module} must define `class {base.__name__}"
                        f"({base.__module__}.{base.__name__})`")
    return cls(backend)


# What a framework cannot do, with the reason, keyed by (framework, capability): the
# facts' `lacks`, in one dict. Checked both ways by the tests: each listed gap must
# still raise NotApplicable, and no unlisted one may.
KNOWN_GAPS: dict[tuple[str, str], str] = {
    (f.name, capability): why for f in FRAMEWORKS.values() for capability, why in f.lacks.items()}


def default_execution(framework: str, mode: str) -> str:
    """The execution a framework's mode runs when none is asked for."""
    defaults = facts(framework).default_execution
    return defaults.get(mode, defaults["*"])


def gap(framework: str, capability: str) -> str | None:
    """Why a framework cannot do a capability (a mode, an execution, "sync-bn"), or None."""
    return KNOWN_GAPS.get((framework, capability))
