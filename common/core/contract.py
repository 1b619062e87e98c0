"""What every framework package supplies, defined once.

A backend is instantiated at import of its package (`frameworks.<name>.BACKEND`)
and touches no device until `setup` is called. Arrays in and out of the
contract are the framework's own; NumPy crosses it only in `array`, `to_numpy`,
the trainers and `forward_backward` (used by the oracle tests).

A framework package has the same files as every other (frameworks.FILES says which
and what each holds); its Backend is composed of their classes.
"""
from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

import numpy as np

from common import models as models_mod
from common.facts import registry

EVAL_BATCH = 1000


class NotApplicable(NotImplementedError):
    """The framework has no such thing; the message says why. Recorded as data."""


class NeedsGPU(NotApplicable):
    """The framework has it, but only on GPUs (not a known gap: it runs where GPUs are)."""
    PREFIX = "needs GPUs: "

    def __init__(self, reason: str):
        super().__init__(self.PREFIX + reason)


def predict_in_batches(logits_of: Callable[[np.ndarray], Any], X: np.ndarray) -> np.ndarray:
    """Class ids for X, evaluated EVAL_BATCH images at a time to bound memory."""
    return np.concatenate([np.asarray(logits_of(X[i:i + EVAL_BATCH])).argmax(axis=1)
                           for i in range(0, len(X), EVAL_BATCH)])


class Replica(list):
    """One device's copy of a model's parameters (the list the chapter's get_params
    returns), with what goes with it: the model's name, the device, the model's state
    (BatchNorm running statistics) and, where the framework keeps them apart,
    gradient buffers."""

    def __init__(self, params, model: str, device: str, state=(), grads=None,
                 execution: str = "eager"):
        super().__init__(params)
        self.model, self.device, self.state, self.grads = model, device, list(state), grads
        # how shard_loss_and_grads runs this replica's forward and backward
        self.execution = execution


class ModelOps(ABC):
    """One model of common/models written in one framework's ops (frameworks/<fw>/models.py)."""
    # BatchNorm's running variance: the unbiased batch variance (PyTorch) or the biased one
    unbiased_running_var: bool = True
    # BatchNorm's running statistics updated in the backward pass (MXNet 1.x), which a
    # pipeline runs over the micro-batches in reverse
    running_stats_in_backward: bool = False
    # keep 4-D weights in channels-last memory where the framework offers it
    channels_last: bool = False

    def to_framework(self, params: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The common layout's parameters in the framework's layout (NumPy to NumPy)."""
        return [np.asarray(p) for p in params]

    def from_framework(self, params: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(p) for p in params]

    @abstractmethod
    def apply(self, params: list, state: list, X: Any, training: bool) -> Any:
        """Logits for images X (common NCHW layout). In training mode BatchNorm uses the
        batch's statistics and updates `state` in place; else it uses `state`."""

    def sized(self, model: str) -> "ModelOps":
        """These ops for another size of the model (common.models.family): the ViT's."""
        raise NotApplicable(f"{type(self).__name__} is written for one size only, not {model}")

    def apply_units(self, params: list, state: list, X: Any, units: tuple[int, int],
                    training: bool) -> Any:
        """The units lo..hi-1 of the model's UNITS (a pipeline stage, model mode): X is
        unit lo-1's output (the images when lo is 0); logits when hi is the last unit.
        Only the units' own entries of `params` and `state` are read."""
        raise NotApplicable(f"{type(self).__name__} cannot be cut into pipeline stages yet")


class SizedOps(ModelOps):
    """A model written once for all its sizes, its structure read from the size's model
    module (self.R: common.models.get(self.name)), so that one object serves each size
    of it (ResNet-18's: SIZES in common/models/resnet18.py); sized() is a copy for
    another size."""
    name = "resnet18"

    @property
    def R(self):
        return models_mod.get(self.name)

    def sized(self, model: str) -> "SizedOps":
        other = copy.copy(self)
        other.name = model
        return other


class UnitsOps(ModelOps):
    """A model written as its units alone (model mode's cut): apply runs every unit, and
    the model is named, so one class serves each of its sizes (the ViT's variants)."""

    def __init__(self, name: str):
        self.name = name

    def sized(self, model: str) -> "UnitsOps":
        return type(self)(model)

    def apply(self, params: list, state: list, X: Any, training: bool) -> Any:
        return self.apply_units(params, state, X, (0, len(models_mod.get(self.name).UNITS)),
                                training)

    @abstractmethod
    def apply_units(self, params: list, state: list, X: Any, units: tuple[int, int],
                    training: bool) -> Any:
        ...


class TransformerOps(UnitsOps):
    """A transformer (the ViT, common/models/vit.py) written as its pieces, which
    apply_units strings together once for every framework and tensor mode
    (common/core/tensor.py) runs one by one with each device's columns and rows of the
    weights. Every piece takes the framework's arrays in its layout; **kw is the
    framework's own (MXNet's F: mx.nd, or mx.sym in a hybridized block)."""
    # (logits, labels) -> the summed cross-entropy: the framework's own, as its steps use
    loss_sum: Callable

    @abstractmethod
    def embed(self, X: Any, patch_w: Any, patch_b: Any, cls: Any, pos: Any, **kw) -> Any:
        """Images -> tokens (batch, tokens, width): patches, the class token, positions."""

    @abstractmethod
    def norm(self, X: Any, gamma: Any, beta: Any, **kw) -> Any:
        """LayerNorm over the last axis at the model's epsilon."""

    @abstractmethod
    def attend(self, a: Any, Wq: Any, Wk: Any, Wv: Any, Wo: Any, heads: int, **kw) -> Any:
        """Multi-head self-attention of `heads` heads (of the model's head width; their
        Q, K, V columns side by side in Wq, Wk, Wv) through the output projection Wo (its
        rows those heads'): tensor mode gives each device its heads' columns and rows."""

    @abstractmethod
    def mlp(self, a: Any, W1: Any, c1: Any, W2: Any, **kw) -> Any:
        """gelu(a W1 + c1) W2, the second layer's bias left to `bias` (tensor mode adds
        it once, after summing the devices' row-parallel parts)."""

    def bias(self, x: Any, c: Any, **kw) -> Any:
        return x + c

    @abstractmethod
    def head(self, X: Any, gamma: Any, beta: Any, W: Any, c: Any, **kw) -> Any:
        """The class token's LayerNorm and the dense head: logits."""

    def apply_units(self, params, state, X, units, training, **kw):
        from common.models import vit
        s = vit.shape(self.name)
        if units[0] == 0:
            X = self.embed(X, *params[:4], **kw)
        for at in s.blocks_in(units):
            g1, b1, Wq, Wk, Wv, Wo, g2, b2, W1, c1, W2, c2 = params[at:at + s.per_block]
            X = X + self.attend(self.norm(X, g1, b1, **kw), Wq, Wk, Wv, Wo, s.heads, **kw)
            X = X + self.bias(self.mlp(self.norm(X, g2, b2, **kw), W1, c1, W2, **kw), c2, **kw)
        if s.has_head(units):
            X = self.head(X, *params[s.head:s.head + 4], **kw)
        return X


class Trainer(ABC):
    """One training run's state on its devices: a scratch replica set, or the
    framework's own data-parallel machinery (in a multi-process run, one rank)."""

    @abstractmethod
    def step(self, X: np.ndarray, y: np.ndarray) -> Any:
        """One SGD step on the full batch; returns a handle to the batch's mean loss
        without waiting for the device."""

    def train_epoch(self, X: np.ndarray, y: np.ndarray, order: np.ndarray,
                    on_step: Callable[[], None]) -> list:
        """One epoch: a step on X[idx], y[idx] for each row idx of `order`. Frameworks
        whose idiom owns the loop (Keras fit) override this; the caller times it whole."""
        handles = []
        for idx in order:
            handles.append(self.step(X[idx], y[idx]))
            on_step()
        return handles

    @abstractmethod
    def losses(self, handles: list) -> np.ndarray:
        """The mean loss of the full batch for each handle (may synchronise)."""

    @abstractmethod
    def logits(self, X: np.ndarray) -> np.ndarray:
        """The first replica's logits for images X in evaluation mode (BatchNorm with its
        running statistics), as NumPy; changes no parameter or state."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class ids predicted by the first replica, in evaluation mode."""
        return predict_in_batches(self.logits, X)

    @abstractmethod
    def replica_params(self) -> list[list[np.ndarray]]:
        """Every replica's parameters in the common layout (see common/models)."""

    @abstractmethod
    def replica_state(self) -> list[list[np.ndarray]]:
        """Every replica's model state (BatchNorm running statistics), common layout."""

    @abstractmethod
    def load_params(self, params: Sequence[np.ndarray], state: Sequence[np.ndarray]) -> None:
        """Overwrite every replica's parameters and state (used after the warm-up)."""

    def param_fingerprint(self) -> list[list[float]]:
        """common.models.fingerprint of the first replica's parameters, then of its model
        state (every rank calls it at the end of training: a trainer spread over processes
        gathers it)."""
        return models_mod.fingerprint([*self.replica_params()[0], *self.replica_state()[0]])

    # False where a batch copied to every device gives the same numbers as one split over
    # them (one SPMD program over the global batch; a loss scaled by the replica count):
    # then no comparison of numbers shows where the batch went, and placement() must
    numbers_show_placement = True

    def placement(self) -> dict | None:
        """Where the last step's batch went, read from the step's own inputs, for a trainer
        whose numbers do not show it (numbers_show_placement): "devices" and "processes"
        the step spans (over every process), "rows" of the step's inputs on each of this
        process's devices, and "flops" of one device's share of the compiled step (None
        where no single program runs it). None elsewhere."""
        return None

    def figures(self) -> dict:
        """Figures of the run that only this mode has, for the record (model mode: per-stage
        times, bytes between stages, bubble); called by every rank at the end of training."""
        return {}


def float32_bytes(shapes) -> int:
    """The bytes of float32 arrays of these shapes (a gradient's or a parameter's)."""
    return sum(4 * int(np.prod(tuple(s), dtype=np.int64)) for s in shapes)


def held_figures(held, whole_bytes, split=None) -> dict:
    """The figures of one model cut over the devices (fsdp, tp, tensor): each device's
    bytes of what it holds between steps (`held`: per device, its arrays), the parameters'
    bytes (`whole_bytes`: per parameter), and with `split` (the model's TENSOR_SPLIT axes)
    the bytes every device holds whole."""
    out = {"shard_bytes": [sum(a.nbytes for a in arrays) for arrays in held],
           "param_bytes": sum(whole_bytes)}
    if split is not None:
        out["replicated_bytes"] = sum(n for n, axis in zip(whole_bytes, split) if axis is None)
    return out


class ModuleTrainer(Trainer):
    """A trainer of one replica per process held as one framework module (PyTorch's
    nn.Module, Paddle's Layer) whose read() gives (params, state) in the common layout
    and load(params, state) overwrites them: the replica accessors written once."""
    module: Any

    def replica_params(self):
        return [self.module.read()[0]]

    def replica_state(self):
        return [self.module.read()[1]]

    def load_params(self, params, state):
        self.module.load(params, state)


# The name of the annotation an OpProfiler puts around profiled step i, in the
# framework's own trace: the step's window on the profiler's clock
STEP_MARK = "dlc-profile-step {}"


class OpProfiler(ABC):
    """A framework's own op-level profiler around a few training steps
    (frameworks/<fw>/profile.py): `with profiler:` records; `step(i)` marks step i in the
    trace; `events()`, after the block, every event recorded, in one form:
    {"name", "start", "end" (microseconds on the profiler's clock), "thread"}, the step
    marks (STEP_MARK) among them. `rules` maps event names to op classes
    (common/results/profile.py): data, ((regex, class), ...), the first match wins."""
    rules: tuple[tuple[str, str], ...] = ()
    # which of nested op events holds an instant: "outermost" (an op's children, such
    # as its allocations, are part of it) or "innermost" (a framework that runs its
    # next ops inside an asynchronous op's event, as XLA does)
    nesting = "outermost"

    @abstractmethod
    def __enter__(self) -> "OpProfiler": ...

    @abstractmethod
    def __exit__(self, *exc) -> None: ...

    @abstractmethod
    def step(self, i: int) -> Any:
        """A context manager: step i's annotation in the profiler's own trace."""

    @abstractmethod
    def events(self) -> list[dict]: ...


class Backend(ABC):
    name: str
    # True where the framework has several distinct CPU devices in one process
    # (MXNet contexts, TensorFlow logical devices); else replicas share "cpu:0".
    distinct_cpu_devices: bool = False
    # Each model in the framework's ops: {model name: ModelOps} (frameworks/<fw>/models.py)
    models: dict[str, ModelOps] = {}

    @property
    def facts(self) -> registry.Framework:
        return registry.facts(self.name)

    # --- process set-up ---
    @abstractmethod
    def setup(self, cpu_devices: int = 1, threads: int | None = None) -> None:
        """Configure the framework before first use: virtual CPU devices, threads."""

    @abstractmethod
    def version(self) -> str: ...

    # --- device API ---
    @abstractmethod
    def num_gpus(self) -> int: ...

    def try_gpu(self, i: int = 0) -> str:
        return f"gpu:{i}" if self.num_gpus() >= i + 1 else "cpu:0"

    def try_all_gpus(self) -> list[str]:
        return [f"gpu:{i}" for i in range(self.num_gpus())] or ["cpu:0"]

    def devices(self, n: int) -> list[str]:
        """n devices for data parallelism: GPUs when there are enough, else n CPU devices
        (distinct ones where the framework has them, else n replicas on cpu:0)."""
        if n < 1:
            raise ValueError(f"need at least one device, got {n}")
        gpus = self.num_gpus()
        if gpus:
            if n > gpus:
                raise ValueError(f"{n} devices asked for but {self.name} sees {gpus} GPUs")
            return [f"gpu:{i}" for i in range(n)]
        return [f"cpu:{i}" for i in range(n)] if self.distinct_cpu_devices else ["cpu:0"] * n

    @abstractmethod
    def array(self, value: np.ndarray, device: str) -> Any:
        """A mutable framework array holding `value` on `device` (what allreduce takes)."""

    def tensor(self, value: np.ndarray, device: str) -> Any:
        """Input data on `device` (need not be mutable)."""
        return self.array(value, device)

    @abstractmethod
    def to_device(self, x: Any, device: str) -> Any:
        """x on `device`; x itself when it already lives there."""

    @abstractmethod
    def device_of(self, x: Any) -> str: ...

    @abstractmethod
    def to_numpy(self, x: Any) -> np.ndarray: ...

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for all queued work on every device."""

    # The engine's gradient exchange as its communication settings set it (common/facts/
    # settings.py, kind "communication"): {setting name: {option: value}}, the options
    # gathered in `comm` for the trainer across processes that the framework builds
    COMMUNICATION: dict[str, dict] = {}
    comm: dict = {}

    def apply_setting(self, name: str) -> None:
        """An in-process setting of the framework's table (common/facts/settings.py, a
        Setting with hook=True), applied after setup and before any trainer is built."""
        if name not in self.COMMUNICATION:
            raise NotApplicable(f"{self.name} has no in-process switch {name!r}")
        self.comm = {**self.comm, **self.COMMUNICATION[name]}

    def op_profiler(self, folder: str) -> OpProfiler:
        """The framework's own op-level profiler (frameworks/<fw>/profile.py), writing
        what it must to `folder`."""
        raise NotApplicable(f"{self.name} has no op-level profiler in the suite yet")

    def device_peak_memory_mb(self) -> dict[str, float]:
        """The allocator's peak of each GPU of this process, by neutral name ({"gpu:0":
        MB, ...}), where the framework counts it; {} on the CPU."""
        return {}

    def peak_memory_mb(self) -> float | None:
        """Peak device memory where the framework reports it (GPUs): the largest of
        device_peak_memory_mb; None on the CPU."""
        peaks = self.device_peak_memory_mb()
        return max(peaks.values()) if peaks else None

    def gpu_model(self, device: str) -> str | None:
        """The model of the GPU `device` as the framework names it (e.g. "NVIDIA H100
        80GB HBM3"), for its vendor peak (common/facts/peaks.py); None where it does not say."""
        return None

    def float32_math(self) -> str | None:
        """How float32 convolutions and matrix products run on this process's GPUs:
        "tf32" where the framework lets them use TF32 tensor cores, "fp32" where it does
        not; None where the framework does not say."""
        return None

    # --- processes: started by common.launch.launcher, joined here ---
    def join(self, rank, timeout: float | None = None):
        """Join the process group of a multi-process run (rank: common.launch.launcher.RankInfo),
        waiting at most `timeout` seconds for a peer where the engine lets us say so.
        Returns the RankInfo the engine gave this process where it numbers the ranks
        itself (MXNet's scheduler), else None."""
        raise NotApplicable(f"{self.name} runs its native data parallelism in one process")

    def leave(self) -> None:
        """Leave the process group joined by `join`."""

    def rank_device(self, rank) -> str:
        """The device of a rank: its local rank's GPU, else the CPU."""
        return f"gpu:{rank.local_rank}" if self.num_gpus() > rank.local_rank else "cpu:0"

    # --- the models ---
    def model_ops(self, model: str) -> ModelOps:
        family = models_mod.family(model)        # an unknown name is a clear error here
        if model not in self.models and family in self.models:     # another size of it
            self.models[model] = self.models[family].sized(model)
        if model not in self.models:
            raise NotApplicable(f"{self.name} has no {model} yet (frameworks/{self.name}/models.py)")
        return self.models[model]

    def forward(self, model: str, params: Replica, X: Any, training: bool = False) -> Any:
        """Logits of `model` with a replica's parameters and state."""
        return self.model_ops(model).apply(list(params), params.state, X, training)

    def forward_backward(self, model: str, params: Sequence[np.ndarray], X: np.ndarray,
                         y: np.ndarray, state: Sequence[np.ndarray] | None = None
                         ) -> tuple[np.ndarray, float, list[np.ndarray], list[np.ndarray]]:
        """Logits, summed loss, the gradients of the sum and the state after the step,
        in the common layout, from one training-mode pass of this framework's model on
        its first device (the oracle tests' entry point)."""
        device = self.devices(1)[0]
        state = models_mod.get(model).init_state() if state is None else state
        replica = self.get_params(params, device, model, state)
        loss, logits = self.shard_loss_and_grads(replica, self.tensor(X, device),
                                                 self.tensor(y, device))
        self.synchronize()
        grads = [self.to_numpy(g) for g in self.grads(replica)]
        ops = self.model_ops(model)
        return (self.to_numpy(logits), float(np.asarray(self.to_numpy(loss)).reshape(())),
                ops.from_framework(grads), self.read_state(replica))

    # --- scratch mode: the chapter's data parallelism by hand (common/core/scratch.py) ---
    @abstractmethod
    def get_params(self, params: Sequence[np.ndarray], device: str, model: str = "lenet",
                   state: Sequence[np.ndarray] | None = None) -> Replica:
        """A replica of the parameters (and model state) on `device`, gradients attached."""

    @abstractmethod
    def read_params(self, replica: Replica) -> list[np.ndarray]:
        """A replica's parameters as NumPy arrays in the common layout."""

    @abstractmethod
    def read_state(self, replica: Replica) -> list[np.ndarray]:
        """A replica's model state as NumPy arrays in the common layout."""

    @abstractmethod
    def write_params(self, replica: Replica, params: Sequence[np.ndarray],
                     state: Sequence[np.ndarray] | None = None) -> None:
        """Overwrite a replica's parameters (and state) in place (its arrays keep their identity)."""

    @abstractmethod
    def allreduce(self, arrays: list) -> None:
        """Sum onto the first array's device, then write the sum into every array in place."""

    @abstractmethod
    def split_batch(self, X: Any, y: Any, devices: Sequence[str]) -> tuple[list, list]:
        """One shard of X and y per device, on that device, cut as common.facts.data.shard_bounds."""

    @abstractmethod
    def shard_loss_and_grads(self, replica: Replica, X: Any, y: Any) -> tuple[Any, Any]:
        """Forward (training mode) and backward of one shard on the replica's device:
        the gradients of the shard's summed loss land in grads(replica); returns that
        summed loss and the logits (handles, not waited for)."""

    @abstractmethod
    def grads(self, replica: Replica) -> list:
        """The replica's gradient arrays, in parameter order (allreduce sums them in place)."""

    @abstractmethod
    def sgd(self, replica: Replica, scale: float) -> None:
        """p -= scale * grad for every parameter of the replica, in place; then clear the grads."""

    @abstractmethod
    def add(self, values: list, device: str) -> Any:
        """The sum of framework tensors from several devices (scalars, or arrays of one
        shape), on `device`."""

    # --- sharded mode: ZeRO-3 by hand (common/core/sharded.py) ---
    @abstractmethod
    def rows(self, x: Any, lo: int, hi: int) -> Any:
        """A new tensor of rows lo:hi (the first axis) of x, a replica's parameter or
        gradient, on x's device."""

    @abstractmethod
    def concat(self, parts: list, device: str) -> Any:
        """The parts (each on `device`) concatenated along their first axis, on `device`."""

    @abstractmethod
    def assign(self, x: Any, value: Any) -> None:
        """A replica's parameter x takes `value` (a tensor of its shape on its device), in place."""

    def clear_grads(self, replica: Replica) -> None:
        """Empty the replica's gradients where the next backward pass would add to them
        (sgd does it after its update; sharded mode updates shards, not the replica)."""

    # --- tensor mode: Megatron by hand (common/core/tensor.py) ---
    def record(self, fn: Callable, inputs: Sequence, device: str,
               consts: Sequence = ()) -> tuple[Any, Any]:
        """fn(*inputs, *consts) on `device` (all there already), recorded for backprop
        with respect to the inputs: returns its output, detached (the next piece's input
        records its own gradient), and a tape."""
        raise NotApplicable(f"{self.name} has no recorded pieces (tensor mode)")

    def piece(self, fn: Callable) -> Callable:
        """fn as this framework runs a piece: as it is, or compiled once (JAX)."""
        return fn

    def backprop(self, tape: Any, grad: Any) -> list:
        """The gradients of a recorded piece's inputs, in their order, given its output's
        gradient `grad` (None: the output is a scalar loss). Nothing accumulates."""
        raise NotApplicable(f"{self.name} has no recorded pieces (tensor mode)")

    # the executions in which bind_train_batch traces the whole of train_batch into one
    # program, whose Python runs once: a traced run cannot clock its all-reduce apart
    whole_step_executions: tuple[str, ...] = ()

    def bind_train_batch(self, train_batch: Callable, replicas: list[Replica],
                         devices: Sequence[str], lr: float, execution: str) -> Callable:
        """The chapter's train_batch (common/core/scratch.py passes it in) bound to one replica
        set: a function of (X, y) run the way `execution` says. The replicas run in
        `execution` from here on (every framework's shard_loss_and_grads and sgd read
        theirs), so that no caller can bind a step to one execution and leave its
        replicas in another; wrap_train_batch then wraps the step."""
        self.check_execution(execution)
        for r in replicas:
            r.execution = execution
        return self.wrap_train_batch(lambda X, y: train_batch(self, X, y, replicas, devices, lr),
                                     devices, execution)

    def wrap_train_batch(self, step: Callable, devices: Sequence[str], execution: str) -> Callable:
        """bind_train_batch's step run as `execution` says. By default as Python calls it,
        shard_loss_and_grads compiling its own part where the replicas' execution asks for
        it; a framework that traces whole steps (TensorFlow) wraps it here."""
        return step

    def check_execution(self, execution: str) -> None:
        """Raise NotApplicable, with the reason the facts table gives, for an execution
        that this framework does not have (its facts' `executions` are the ones it has)."""
        if execution not in self.facts.executions:
            raise NotApplicable(registry.gap(self.name, execution)
                                or f"{self.name} has no {execution!r} execution here")

    # --- native mode: the framework's own data parallelism ---
    def native_trainer(self, model: str, params: Sequence[np.ndarray], devices: Sequence[str],
                       lr: float, execution: str, rank: int = 0, world: int = 1,
                       sync_bn: bool = False) -> Trainer:
        """In-process trainer over `devices`; in a multi-process run, rank `rank` of
        `world` on `devices[0]`, its process group already joined (see join). Its steps
        run as `execution` says. The checks every framework needs, then its own
        build_native_trainer."""
        self.check_execution(execution)
        if sync_bn:
            self.check_sync_bn(devices)
        if self.facts.native_processes and world == 1 and len(devices) > 1:
            raise ValueError(f"{self.name} native mode runs one process per device "
                             "(common.launch.launcher)")
        return self.build_native_trainer(model, params, devices, lr, execution, rank, world,
                                         sync_bn)

    @abstractmethod
    def build_native_trainer(self, model: str, params: Sequence[np.ndarray],
                             devices: Sequence[str], lr: float, execution: str, rank: int,
                             world: int, sync_bn: bool) -> Trainer:
        """The framework's own data-parallel trainer (native_trainer has checked the
        execution, synchronised BatchNorm and the process count)."""

    # Why the framework's synchronised BatchNorm needs GPUs, where it does
    sync_bn_needs_gpu: str | None = None

    # --- fsdp mode: the framework's own sharded data parallelism ---
    def fsdp_trainer(self, model: str, params: Sequence[np.ndarray], devices: Sequence[str],
                     lr: float, execution: str, rank: int = 0, world: int = 1) -> Trainer:
        """The framework's own sharded data-parallel trainer over `devices` (in a
        multi-process run, rank `rank` of `world` on devices[0]): each device holding its
        part of the parameters between steps."""
        self.check_execution(execution)
        return self.build_fsdp_trainer(model, params, devices, lr, execution, rank, world)

    def build_fsdp_trainer(self, model: str, params: Sequence[np.ndarray],
                           devices: Sequence[str], lr: float, execution: str, rank: int,
                           world: int) -> Trainer:
        raise NotApplicable(registry.gap(self.name, "fsdp")
                            or f"{self.name} has no sharded data parallelism here")

    # --- tp mode: the framework's own tensor parallelism ---
    def tp_trainer(self, model: str, params: Sequence[np.ndarray], devices: Sequence[str],
                   lr: float, execution: str, rank: int = 0, world: int = 1) -> Trainer:
        """The framework's own tensor-parallel trainer over `devices`: the model's
        TENSOR_SPLIT weights cut over them, the batch whole on each."""
        from common.core.tensor import problem
        self.check_execution(execution)
        why = problem(model, max(world, len(devices)))
        if why:
            raise NotApplicable(why)
        return self.build_tp_trainer(model, params, devices, lr, execution, rank, world)

    def build_tp_trainer(self, model: str, params: Sequence[np.ndarray],
                         devices: Sequence[str], lr: float, execution: str, rank: int,
                         world: int) -> Trainer:
        raise NotApplicable(registry.gap(self.name, "tp")
                            or f"{self.name} has no tensor parallelism here")

    def check_sync_bn(self, devices: Sequence[str]) -> None:
        """Raise NotApplicable (or NeedsGPU) where synchronised BatchNorm cannot run on
        `devices`; called before any process starts."""
        gap = registry.gap(self.name, "sync-bn")
        if gap:
            raise NotApplicable(gap)
        if self.sync_bn_needs_gpu and not all(d.startswith("gpu") for d in devices):
            raise NeedsGPU(self.sync_bn_needs_gpu)

    def dataparallel_trainer(self, model: str, params: Sequence[np.ndarray],
                             devices: Sequence[str], lr: float, execution: str) -> Trainer:
        """The dataparallel mode (torch.nn.DataParallel): PyTorch's alone (the others'
        facts say why they lack it)."""
        raise NotApplicable(registry.gap(self.name, "dataparallel"))

    # --- model mode: the layers cut into stages across devices (common/core/pipeline.py) ---
    def stage_replica(self, params: Sequence[np.ndarray], state: Sequence[np.ndarray],
                      device: str, model: str, stage) -> Replica:
        """One pipeline stage's parameters and state (stage.params, stage.state of the
        common lists) on `device`, gradients attached. By default a replica of the whole
        model (get_params) of which the stage holds its own entries; the whole one stays
        as .full, which apply_units indexes."""
        full = self.get_params(params, device, model, state)
        own = Replica([full[i] for i in stage.params], model, device,
                      [full.state[j] for j in stage.state],
                      None if full.grads is None else [full.grads[i] for i in stage.params])
        own.full, own.stage = full, stage
        return own

    def read_stage(self, replica: Replica) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """A stage's parameters and state in the common layout, in stage.params/.state order."""
        params, state = self.read_params(replica.full), self.read_state(replica.full)
        return ([params[i] for i in replica.stage.params],
                [state[j] for j in replica.stage.state])

    def write_stage(self, replica: Replica, params: Sequence[np.ndarray],
                    state: Sequence[np.ndarray]) -> None:
        """Overwrite a stage's parameters and state from the whole model's common lists."""
        self.write_params(replica.full, params, state)

    def apply_stage(self, replica: Replica, X: Any, training: bool) -> Any:
        """The stage's units on X (ModelOps.apply_units on the whole model's lists)."""
        full = replica.full
        return self.model_ops(replica.model).apply_units(list(full), full.state, X,
                                                         replica.stage.units, training)

    def stage_forward(self, replica: Replica, X: Any, y: Any = None,
                      training: bool = True) -> tuple[Any, Any]:
        """The stage's units on its device (X there already). Training: returns (what is
        handed to the next stage, detached from this stage's graph, and a tape for
        stage_backward: a tuple, or an object a weak reference can take, since the loop
        watches each tape's life); with labels y (the last stage) the first is the summed loss.
        Evaluation: (the output, None), nothing recorded."""
        raise NotApplicable(f"{self.name} has no pipeline stages yet")

    def stage_backward(self, replica: Replica, tape: Any, grad: Any, first: bool) -> Any:
        """Backward through one stage: `grad` is the gradient of its output (None at the
        last stage: the loss). The parameters' gradients add up in the replica's
        gradients over micro-batches (`first`: this stage's first backward of the step,
        micro-batch M-1 with GPipe and 0 with 1F1B, which starts them from zero where the
        backend keeps the sums itself). Returns the gradient of the stage's input (None
        for the first stage)."""
        raise NotApplicable(f"{self.name} has no pipeline stages yet")

    def stage_sgd(self, replica: Replica, scale: float) -> None:
        """p -= scale * grad for the stage's parameters (scratch mode's sgd by default)."""
        self.sgd(replica, scale)

    # how measure_tape knows what a tape holds (None: it cannot; the pipeline calculates)
    tape_bytes_by: str | None = None

    def measure_tape(self, replica: Replica, forward) -> tuple[Any, int | None]:
        """Run forward() (the replica's stage_forward) and return its result and the bytes
        of the activations its tape keeps for the backward (the parameters not counted),
        where the framework tells them; None where it does not."""
        return forward(), None

    # stages in processes of their own (model mode where the framework has one CPU device)
    def send(self, x: Any, dst: int) -> Any:
        """Start sending x to rank dst (point to point, in the group joined by join);
        returns a handle whose wait() returns once x has gone (x is kept till then)."""
        raise NotApplicable(f"{self.name} runs its pipeline stages in one process")

    def recv(self, shape: tuple, src: int, device: str) -> Any:
        """Receive a float32 array of `shape` from rank src onto `device`."""
        raise NotApplicable(f"{self.name} runs its pipeline stages in one process")

    def gather_floats(self, values: Sequence[float]) -> np.ndarray:
        """Every rank's `values` (the same length on each): an array (world, len)."""
        raise NotApplicable(f"{self.name} runs its pipeline stages in one process")
