"""One table of facts per framework, and which are installed -- found without
importing any. Every other list of framework names, of the executions a framework
has and of what it cannot do derives from it."""
from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, field


# How a run's steps execute; each framework says how it does each one it has.
EXECUTIONS = {
    "eager": "op by op, as Python calls them",
    "graph": "traced once into a dataflow graph that the runtime optimises, no compiler "
             "(TensorFlow's tf.function)",
    "compiled": "the framework's compiler or graph optimiser (torch.compile, XLA, MXNet "
                "hybridize, Paddle to_static, jax.jit)",
}

_KERAS_SCRATCH = ("Keras has no from-scratch training loop of its own: its data "
                  "parallelism is model.fit under a distribution")
_SINGLE_PROCESS = "{}'s single-process multi-device data parallelism is its native mode"


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
    # how its engine starts on each of several machines (a key of common.launch.nodes.LAUNCHERS)
    cluster: str = ""
    # what it cannot do, with the reason: a mode, an execution (every one of EXECUTIONS
    # is either in `executions` or here) or a feature such as "sync-bn"
    lacks: dict[str, str] = field(default_factory=dict)
    # environment that must be set before the framework's modules load (Keras's backend)
    env: dict[str, str] = field(default_factory=dict)


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
              {"*": "graph", "model": "eager"}, "tf-config",
              {"dataparallel": "nn.DataParallel is PyTorch's; " + _SINGLE_PROCESS.format("tensorflow")}),
    Framework("mxnet", "frameworks.mxnet", ("mxnet",), ("mxnet",), "mxnet",
              "gluon.Trainer over a context list, gradients reduced by a KVStore", False,
              {"eager": "MXNet imperative NDArray ops under autograd.record (queued "
                        "asynchronously to its engine)",
               "compiled": "HybridBlock.hybridize(static_alloc, static_shape): a cached "
                           "symbolic graph"},
              {"*": "eager", "native": "compiled"}, "dmlc",
              {"dataparallel": "nn.DataParallel is PyTorch's; " + _SINGLE_PROCESS.format("mxnet"),
               "graph": "MXNet's graph mode is hybridize(), run as --execution compiled"}),
    Framework("paddle", "frameworks.paddle", ("paddle",), ("paddlepaddle", "paddlepaddle-gpu"),
              "paddle", "paddle.DataParallel, one process per device "
              "(gloo on CPU, nccl on GPU)", True,
              {"eager": "Paddle dynamic graph (dygraph): ops run as Python calls them",
               "compiled": "paddle.jit.to_static: the forward as a static program, run by "
                           "Paddle's executor"},
              {"*": "eager"}, "paddle-launch",
              {"dataparallel": "Paddle has no single-process multi-device data parallelism: "
                               "paddle.DataParallel (its native mode) runs a process per device",
               "graph": "Paddle's graph mode is paddle.jit.to_static, run as --execution compiled"}),
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
              {"*": "compiled", "model": "eager"}, "jax-distributed",
              {"graph": "JAX's graph is its compiler's input: jax.jit traces a jaxpr that XLA "
                        "compiles (--execution compiled)",
               "dataparallel": "nn.DataParallel is PyTorch's; " + _SINGLE_PROCESS.format("jax")}),
    # Keras 3 runs here on its TensorFlow backend
    Framework("keras", "frameworks.keras", ("keras", "tensorflow"), ("keras", "tensorflow"), "keras",
              "model.fit under tf.distribute.MirroredStrategy "
              "(keras.distribution.DataParallel needs the JAX backend)", False,
              {"eager": "Model.compile(run_eagerly=True): train_step op by op",
               "graph": "Model.compile(jit_compile=False): train_step in a tf.function",
               "compiled": "Model.compile(jit_compile=True): train_step compiled by XLA"},
              {"*": "graph", "model": "eager"}, "tf-config",
              {"scratch": _KERAS_SCRATCH,
               "dataparallel": "nn.DataParallel is PyTorch's; " + _SINGLE_PROCESS.format("keras")}),
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


def facts(name: str) -> Framework:
    return FRAMEWORKS[check_name(name)]


def is_installed(name: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in facts(name).imports)


def installed() -> list[str]:
    return [n for n in NAMES if is_installed(n)]


def install_hint(name: str) -> str:
    """The command that installs a framework's extra, e.g. pip install -e '.[paddle]'."""
    return f"pip install -e '.[{facts(name).extra}]'"


def not_installed(name: str) -> str:
    """Why a framework cannot run here, and the command that fixes it: the one message
    of every not-installed record and error."""
    f = facts(name)
    return (f"framework {name!r} is not installed (needs {', '.join(map(repr, f.imports))}); "
            f"install it with: {install_hint(name)}")


def get(name: str):
    """Import one framework package on demand and return its backend instance (after
    setting the environment its facts name, which must precede the import)."""
    if not is_installed(name):
        raise NotInstalled(not_installed(name))
    os.environ.update(facts(name).env)
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
