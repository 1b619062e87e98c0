"""A run's plan: every choice of one (framework, model, mode, execution, devices,
nodes, ...) run, resolved once when it is made; the epoch loop, the modes, the
launchers and the record read it and decide nothing again."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from common import models
from common.facts import registry


@dataclass
class RunConfig:
    framework: str
    mode: str                      # a name in common.core.modes.MODES
    devices: int
    # a name in registry.EXECUTIONS; None is resolved at once to what this framework's
    # mode runs by default (the facts table), so every later reader sees the one choice
    execution: str | None = None
    model: str = "lenet"           # a name in common.models.NAMES
    init: str = models.DEFAULT_INIT    # how the weights start: a name in common.models.INITS
    dataset: str = "fashion-mnist"
    data_dir: str | None = None
    epochs: int = 1
    batch_size: int = 256          # the global batch, over all devices
    lr: float = 0.2
    # weak scaling: batch_size = batch_per_device x devices (lr grown alike by compare);
    # None: a fixed global batch whatever the device count
    batch_per_device: int | None = None
    sync_bn: bool = False          # synchronised BatchNorm across replicas (native mode)
    seed: int = 0
    threads: int = 2
    # honest CPU scaling: each device (a process, or a process's share) pinned to its own
    # this many cores, with as many threads; None: every run shares all the cores
    cores_per_device: int | None = None
    steps_per_epoch: int | None = None
    # record the training time and epochs until test accuracy first reaches this
    target_accuracy: float | None = None
    eval_samples: int | None = None    # cap on the test images evaluated (None: all)
    warmup_steps: int = 2
    micro_batches: int = 1         # model mode: the batch flows through the stages in M parts
    schedule: str = "gpipe"        # model mode: a name in common.core.schedules.SCHEDULES
    # several machines (common.launch.nodes): `devices` is then per node. network: a kind
    # of common.launch.networks.NETWORKS (real machines, where this one is node
    # `node_rank` and `master` (HOST:PORT) is node 0's address; every node simulated here
    # on loopback; or each emulated here in a network namespace of its own, joined by
    # links shaped to `link`: a tc rate, or "unshaped"). node_hosts: every node's address,
    # in node order (TensorFlow's TF_CONFIG lists every worker)
    nodes: int = 1
    node_rank: int = 0
    master: str | None = None
    network: str = "machines"
    node_hosts: list[str] | None = None
    link: str | None = None
    # the Slurm allocation the nodes came from (compare --network slurm fills the options
    # above from it: common/launch/slurm.py), as the record keeps it; None: given by hand
    slurm: dict | None = None
    # MXNet's parameter servers across machines: "per-node", a server on every node (as
    # MXNet's own launcher starts them), or "one", on node 0 only (its link then carries
    # every worker's push and pull: the chapter's bottleneck)
    servers: str = "per-node"
    # seconds a node may take to join a run, and a joined node to show progress (a step,
    # an evaluation): the slowest start measured here, TensorFlow's import and collective
    # set-up on a busy 2-core machine, is under a minute, and one CPU step or evaluation
    # of ResNet-18 a few tens of seconds; five minutes leaves room for both and still ends
    # a run whose node died long before torch's 30-minute collective time-out
    join_timeout: float = 300.0
    # seconds a joined node may show no progress (a step) before the run ends as stalled;
    # None: join_timeout. Shorter ends a run on a cut link sooner, where starting is slow
    stall_timeout: float | None = None
    # write a timeline of the run (common/results/trace.py): the device is then
    # synchronised after every step, which perturbs the run's times
    trace: bool = False
    # run this many steps under the framework's own op-level profiler, after as many
    # without it, instead of training epochs (benchmarks.profile); 0: a training run
    profile_steps: int = 0
    # settings of the framework's table (common/facts/settings.py) this run applies:
    # its environment, execution and in-process switches; []: the defaults
    settings: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.execution is None:
            self.execution = registry.default_execution(self.framework, self.mode)

    @property
    def default_execution(self) -> bool:
        """Whether this run's execution is its mode's default (its file name says so)."""
        return self.execution == registry.default_execution(self.framework, self.mode)

    def to_dict(self) -> dict:
        return asdict(self)
