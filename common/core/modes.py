"""The modes (how a model is spread over devices: data parallel by hand or by the
framework, model parallel) as registered objects. A mode says how it builds a
trainer, how many processes it runs, which options it takes and what the report
shows of it; the launchers, compare and the report ask it instead of branching on
its name. A new mode is one class here (and, where it needs framework calls, a
method in each framework package, or a `lacks` entry in the facts table)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from common import models
from common.facts import machine, registry
from common.core.contract import Backend, NotApplicable, Trainer
from common.core.pipeline import PipelineTrainer
from common.core.schedules import SCHEDULES, stages
from common.core.plan import RunConfig
from common.core.scratch import ScratchTrainer
from common.core.sharded import ShardedTrainer
from common.core import tensor


@dataclass(frozen=True)
class Mode(ABC):
    name: str
    description: str
    default: bool = True          # run by compare unless --mode names the modes
    # in a run with a process per device, every rank takes part in evaluation (model
    # mode: the stages evaluate together); else rank 0 alone evaluates
    every_rank_predicts = False
    # what the report asks of a mode: the mode whose 1-device row its speed-up is set
    # against (None: its own), whether its rows carry per-stage figures (their own
    # table), whether it is the chapter's code written by hand (drawn solid, first)
    speedup_against = None
    stage_figures = False
    by_hand = False
    # the RunConfig fields (compare's options) that only this mode reads
    options = ()

    def mechanism(self, facts: registry.Framework) -> str | None:
        """The framework's machinery this mode runs on, for the record (None: the suite's own)."""
        return None

    def processes(self, framework: str, devices: int) -> int:
        """How many processes a run on `devices` devices uses (one, unless per device)."""
        return 1

    def gap(self, framework: str, sync_bn: bool = False, execution: str | None = None) -> str | None:
        """Why this framework cannot run this mode (KNOWN_GAPS), or None."""
        return (registry.gap(framework, self.name)
                or (registry.gap(framework, "sync-bn") if sync_bn else None)
                or (registry.gap(framework, execution) if execution else None))

    def across_nodes(self, framework: str) -> str | None:
        """Why this mode does not run across several machines in `framework`, or None
        where it does."""
        return (f"{self.name} mode runs on one machine; across machines the suite runs each "
                "framework's own distributed engine: --mode native")

    def devices(self, backend: Backend, n: int) -> list[str]:
        """The n devices a run of this mode uses (the backend's choice by default)."""
        return backend.devices(n)

    def bad_input(self, model: str, counts: list[int]) -> str | None:
        """Why the command line cannot run this mode on `model` over any of `counts`
        devices (one line: compare exits 2), or None."""
        return None

    def precheck(self, backend: Backend, cfg: RunConfig, devices: list[str]) -> None:
        """Raise NotApplicable before any process starts where the run cannot go."""

    @abstractmethod
    def trainer(self, backend: Backend, cfg: RunConfig, devices: list[str], rank: int = 0,
                world: int = 1) -> Trainer:
        """The trainer of a run with RunConfig `cfg` on `devices` (in rank `rank` of `world`)."""


class Scratch(Mode):
    by_hand = True

    def trainer(self, backend, cfg, devices, rank=0, world=1):
        if cfg.sync_bn and not self.gap(backend.name):
            raise NotApplicable("the chapter's scratch mode normalises each shard with its own "
                                "statistics; synchronised BatchNorm is a native-mode option")
        model = models.get(cfg.model)
        return ScratchTrainer(backend, cfg.model, model.init_params(cfg.seed, cfg.init), model.init_state(),
                              devices, cfg.lr, cfg.execution, cfg.trace)


class Sharded(Mode):
    """Sharded data parallelism (ZeRO-3, FSDP) by hand: common/core/sharded.py."""
    by_hand = True

    def precheck(self, backend, cfg, devices):
        if cfg.sync_bn:
            raise NotApplicable("sharded mode normalises each shard of the batch with its own "
                                "statistics, as scratch mode; synchronised BatchNorm is a "
                                "native-mode option")
        if cfg.execution in backend.whole_step_executions:
            raise NotApplicable(f"sharded mode runs its all-gather and reduce-scatter from "
                                f"Python between the shards' steps; {backend.name}'s "
                                f"{cfg.execution!r} execution traces a whole step: use eager")

    def trainer(self, backend, cfg, devices, rank=0, world=1):
        model = models.get(cfg.model)
        return ShardedTrainer(backend, cfg.model, model.init_params(cfg.seed, cfg.init),
                              model.init_state(), devices, cfg.lr, cfg.execution)


class Tensor(Mode):
    """Tensor parallelism (Megatron-LM) by hand: common/core/tensor.py."""
    by_hand = True

    def bad_input(self, model, counts):
        return next(filter(None, (tensor.problem(model, k) for k in counts)), None)

    def precheck(self, backend, cfg, devices):
        if cfg.sync_bn:
            raise NotApplicable("tensor mode splits a transformer, which has no BatchNorm")
        why = tensor.problem(cfg.model, cfg.devices)   # before a process per device starts
        if why:
            raise NotApplicable(why)

    def trainer(self, backend, cfg, devices, rank=0, world=1):
        model = models.get(cfg.model)
        return tensor.TensorTrainer(backend, cfg.model, model.init_params(cfg.seed, cfg.init),
                                    model.init_state(), devices, cfg.lr, cfg.execution)


class Native(Mode):
    options = ("sync_bn",)

    def mechanism(self, facts):
        return facts.native

    def across_nodes(self, framework):
        return None

    def processes(self, framework, devices):
        return devices if registry.facts(framework).native_processes else 1

    def precheck(self, backend, cfg, devices):
        if cfg.sync_bn and cfg.devices > 1:
            backend.check_sync_bn(devices)

    def trainer(self, backend, cfg, devices, rank=0, world=1):
        # on one device BatchNorm has nothing to synchronise with: the plain layer
        return backend.native_trainer(cfg.model, models.get(cfg.model).init_params(cfg.seed, cfg.init),
                                      devices, cfg.lr, cfg.execution, rank, world,
                                      sync_bn=cfg.sync_bn and cfg.devices > 1)


class Fsdp(Mode):
    """Each framework's own sharded data parallelism (ZeRO-3, FSDP): in one process, or one
    per device where the framework's native mode runs so (PyTorch's FSDP2)."""
    # the ranks gather the parameters together, in evaluation too
    every_rank_predicts = True

    def processes(self, framework, devices):
        # one where the framework has none: its row says why, not a launch of ranks
        # that each raise it
        one_per_device = registry.facts(framework).native_processes and not self.gap(framework)
        return devices if one_per_device else 1

    def across_nodes(self, framework):
        # a process per device joins a process group that spans machines as on one (its
        # engine starter, as native mode's); one process over its devices does not
        if self.processes(framework, 2) == 1:
            return (f"{self.name} mode runs across machines where the framework runs it a "
                    f"process per device (PyTorch's); {framework}'s runs in one process")
        return None

    def precheck(self, backend, cfg, devices):
        if cfg.sync_bn:
            raise NotApplicable("fsdp mode keeps each device's BatchNorm statistics; "
                                "synchronised BatchNorm is a native-mode option")

    def trainer(self, backend, cfg, devices, rank=0, world=1):
        return backend.fsdp_trainer(cfg.model, models.get(cfg.model).init_params(cfg.seed, cfg.init),
                                    devices, cfg.lr, cfg.execution, rank, world)


class Tp(Mode):
    """Each framework's own tensor parallelism: in one process (JAX: the weights laid out
    over a "model" mesh axis under jit), or one per device where the framework's native
    mode runs so (PyTorch's DTensor)."""
    bad_input = Tensor.bad_input
    every_rank_predicts = True       # the ranks hold parts of the weights: all evaluate
    speedup_against = "native"       # DTensor's needs 2 ranks: no 1-device row of its own
    processes = Fsdp.processes
    across_nodes = Fsdp.across_nodes

    def precheck(self, backend, cfg, devices):
        Tensor.precheck(self, backend, cfg, devices)

    def trainer(self, backend, cfg, devices, rank=0, world=1):
        return backend.tp_trainer(cfg.model, models.get(cfg.model).init_params(cfg.seed, cfg.init),
                                  devices, cfg.lr, cfg.execution, rank, world)


class DataParallel(Mode):
    def trainer(self, backend, cfg, devices, rank=0, world=1):
        return backend.dataparallel_trainer(cfg.model, models.get(cfg.model).init_params(cfg.seed, cfg.init),
                                            devices, cfg.lr, cfg.execution)


class Model(Mode):
    """Model parallelism: the layers cut into stages across the devices, micro-batches
    run GPipe's or 1F1B's way (common/core/pipeline.py)."""
    every_rank_predicts = True
    speedup_against = "native"     # how much the stages gain over one device's whole model
    stage_figures = True
    options = ("micro_batches", "schedule")

    def processes(self, framework, devices):
        # one process per stage where the framework has a single CPU device per process
        # and there is no GPU: PyTorch and Paddle, the frameworks whose native mode runs a
        # process per device for that reason (the conformance checks that this agrees with
        # the backend's distinct_cpu_devices); else every stage in one process. Asked of
        # the registry and the driver: nothing is imported before the run pins its cores.
        if devices < 2 or not registry.facts(framework).native_processes or machine.gpu_count():
            return 1
        return devices

    def devices(self, backend, n):
        # fewer GPUs than stages: the GPUs take the first stages and the CPU the rest, the
        # hardware chapter's split with what the machine has (on one GPU: GPU then CPU)
        gpus = backend.num_gpus()
        if 0 < gpus < n:
            return [f"gpu:{i}" for i in range(gpus)] + ["cpu:0"] * (n - gpus)
        return backend.devices(n)

    def precheck(self, backend, cfg, devices):
        if cfg.sync_bn:
            raise NotApplicable("model mode puts each layer on one device: there is no replica "
                                "to synchronise BatchNorm with")
        if cfg.execution != "eager":
            raise NotApplicable(f"model mode runs its stages eagerly (each hands over to the next "
                                f"between Python calls); no {cfg.execution!r} execution of it here")
        stages(cfg.model, cfg.devices)        # NotApplicable: more stages than units
        if cfg.schedule not in SCHEDULES:
            raise NotApplicable(f"unknown schedule {cfg.schedule!r}; choose from: {', '.join(SCHEDULES)}")
        if not 1 <= cfg.micro_batches <= cfg.batch_size:
            raise NotApplicable(f"{cfg.micro_batches} micro-batches of a batch of {cfg.batch_size}")

    def trainer(self, backend, cfg, devices, rank=0, world=1):
        model = models.get(cfg.model)
        return PipelineTrainer(backend, cfg.model, model.init_params(cfg.seed, cfg.init), model.init_state(),
                               devices, cfg.lr, cfg.micro_batches, rank, world, cfg.schedule)


MODES: dict[str, Mode] = {m.name: m for m in (
    Scratch("scratch", "the chapter's data parallelism written by hand: get_params, "
                       "split_batch, allreduce, train_batch"),
    Native("native", "the framework's own data parallelism"),
    Sharded("sharded", "sharded data parallelism (ZeRO-3, FSDP) written by hand: each device "
                       "keeps 1/k of every parameter; all-gather, forward and backward per "
                       "shard of the batch, reduce-scatter of the gradients", default=False),
    Tensor("tensor", "tensor parallelism (Megatron-LM) written by hand: each device holds its "
                     "heads' columns of Q, K, V and rows of the output projection, its columns "
                     "and rows of the MLP; all-reduces of the activations after the row-parallel "
                     "layers, forward and backward", default=False),
    Fsdp("fsdp", "the framework's own sharded data parallelism: PyTorch's FSDP2 (a process "
                 "per device), JAX's parameters sharded over the mesh's data axis, "
                 "TensorFlow's DTensor layouts, Keras's ModelParallel on JAX", default=False),
    Tp("tp", "the framework's own tensor parallelism: PyTorch's DTensor parallelize_module "
             "and Paddle's auto-parallel shard_layer (a process per device), JAX's weights "
             "cut over a \"model\" mesh axis under jit, TensorFlow's DTensor layouts, "
             "Keras's ModelParallel on JAX", default=False),
    DataParallel("dataparallel", "torch.nn.DataParallel, the chapter's concise PyTorch: one "
                                 "process replicating the module onto every GPU each step",
                 default=False),
    Model("model", "model parallelism: the layers cut into stages, stage i on device i, "
                   "micro-batches GPipe-style or 1F1B", default=False),
)}
NAMES = tuple(MODES)
