"""Native mode: tf.distribute.MirroredStrategy with a custom training loop
(strategy.run, strategy.reduce) compiled with tf.function.

fsdp and tp: DTensor (tf.experimental.dtensor), one program over a mesh of the devices
that DTensor's SPMD expansion cuts and fills with collectives. fsdp: a 1-D "batch" mesh,
the batch and each parameter whose first axis the devices divide sharded along it (the
rest replicated). tp: a 1-D "model" mesh, the batch whole on every device, the weights
the model's TENSOR_SPLIT cuts laid out along "model" (Megatron's cut), the rest
replicated."""
import numpy as np
import tensorflow as tf
from tensorflow.experimental import dtensor

from common import models
from common.core.contract import NotApplicable, Trainer, held_figures
from common.facts import devices as dev
from common.facts.data import shard_bounds
from common.facts.settings import COMM_BUFFER_MB

from .devices import tf_device
from .models import loss_sum


def mirrored_values(strategy, variables, replicas):
    """Each replica's copy of mirrored variables, as NumPy arrays."""
    per_var = [strategy.experimental_local_results(v) for v in variables]
    return [[vals[i].numpy() for vals in per_var] for i in range(replicas)]


class MirroredTrainer(Trainer):
    """MirroredStrategy over this process's devices, or, given `strategy`, a
    MultiWorkerMirroredStrategy over several workers (common.launch.nodes): the same code, the
    batch sharded over every replica of every worker."""

    def __init__(self, ops, params, state, devices, lr, execution="graph", strategy=None):
        self.ops = ops
        self.strategy = strategy or tf.distribute.MirroredStrategy([tf_device(d) for d in devices])
        self.devices = list(self.strategy.extended.worker_devices)     # this process's
        with self.strategy.scope():
            # SUM: an update made in a replica is all-reduced by the strategy, so the
            # sum of the shards' updates is applied once to every copy.
            self.vars = [tf.Variable(p, aggregation=tf.VariableAggregation.SUM)
                         for p in ops.to_framework(params)]
            # state (BatchNorm running statistics): each replica keeps its own (assigned
            # in replica context, an ON_READ variable updates that replica's copy alone);
            # read outside a replica (predict), the first replica's
            self.state = [tf.Variable(s, trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                          for s in state]
        self.lr, self._rows = lr, {}
        # compiled: each replica's forward and backward by XLA (the SGD update stays
        # outside: a SUM-aggregated variable's update all-reduces through the strategy,
        # which XLA cannot hold)
        self._loss_and_grads = (tf.function(self._loss_and_grads_of, jit_compile=True,
                                            autograph=False)
                                if execution == "compiled" else self._loss_and_grads_of)
        # autograph off: no tensor-dependent Python control flow to convert
        self._step = (self._distributed_step if execution == "eager" else
                      tf.function(self._distributed_step, autograph=False))
        self._logits = tf.function(lambda X: ops.apply(self.vars, self.state, X, False),
                                   autograph=False)

    def _loss_and_grads_of(self, X, y):
        with tf.GradientTape() as tape:
            loss = loss_sum(self.ops.apply(self.vars, self.state, X, True), y)
        return loss, tape.gradient(loss, self.vars)

    def _replica_step(self, X, y, batch):
        loss, grads = self._loss_and_grads(X, y)
        with tf.name_scope("sgd"):           # the update's ops, by name in the profile
            for v, g in zip(self.vars, grads):
                v.assign_sub(self.lr * g / batch)
        return loss

    def _distributed_step(self, X, y, batch):
        per_replica = self.strategy.run(self._replica_step, args=(X, y, batch))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None) / batch

    def step(self, X, y):
        bounds = shard_bounds(len(X), self.strategy.num_replicas_in_sync)

        def shard(source, dtype):
            def value_fn(ctx):
                lo, hi = bounds[ctx.replica_id_in_sync_group]
                self._rows[ctx.replica_id_in_sync_group] = hi - lo
                return tf.constant(source[lo:hi], dtype)
            return self.strategy.experimental_distribute_values_from_function(value_fn)

        return self._step(shard(X, tf.float32), shard(y, tf.int64), tf.constant(len(X), tf.float32))

    def losses(self, handles):
        return np.array([h.numpy() for h in handles])

    def placement(self):
        """The replicas and workers the strategy spans and each of this worker's replicas'
        rows of the last step: the rows follow the strategy's replica count, so a worker
        whose strategy held its own devices alone would train alone on the whole batch,
        with the numbers of one process (a batch copied to every replica of one process
        gives each replica's update the whole batch's: those numbers show it)."""
        resolver = self.strategy.cluster_resolver
        return {"devices": self.strategy.num_replicas_in_sync,
                "processes": resolver.cluster_spec().num_tasks("worker") if resolver else 1,
                "rows": [self._rows[r] for r in sorted(self._rows)], "flops": None}

    def logits(self, X):
        with tf.device(self.devices[0]):
            return self._logits(tf.constant(X)).numpy()

    def replica_params(self):
        return [self.ops.from_framework(r)
                for r in mirrored_values(self.strategy, self.vars, len(self.devices))]

    def replica_state(self):
        return mirrored_values(self.strategy, self.state, len(self.devices))

    def load_params(self, params, state):
        for v, p in zip(self.vars, self.ops.to_framework(params)):
            v.assign(p)
        for v, s in zip(self.state, state):
            v.assign(s)


# Why fsdp and tp have no compiled execution (measured in TF 2.21 on CPU)
DTENSOR_NOT_XLA = ("DTensor compiles its programs with XLA only on TPUs: create_mesh("
                   "use_xla_spmd=True) on CPUs raises \"XLA SPMD is not currently not supported "
                   "for CPU mesh.\", and DTensor's own SPMD runs a tf.function(jit_compile=True) "
                   "without XLA (no \"Compiled cluster using XLA!\" in the log, which the same "
                   "function prints outside DTensor): run --execution graph or eager")
# The models whose TensorFlow ops DTensor cannot lay out, with its error (TF 2.21)
DTENSOR_CANNOT = {
    "resnet18": ("DTensor cannot lay out ResNet-18's BatchNorm: \"'tf.FusedBatchNormV3' op "
                 "does not implement layout propagation. Please file a feature request to TF "
                 "DTensor.\" (and TensorFlow's HWIO filters' first axes, 1, 3 or 7, are not "
                 "for 2 devices to divide: 0.16 % of its bytes would be sharded by rows)"),
}
# Why a batch must divide evenly here (recorded as the run's reason when it does not)
EVEN_SHARDS = ("DTensor lays a tensor out in equal parts, one per device of the mesh; "
               "{batch} images do not divide over {k} devices (choose a batch size that does)")


class DTensorTrainer(Trainer):
    """One model over a DTensor mesh of this process's devices (fsdp, tp: see the module's
    docstring): DVariables laid out once and kept so, the step written for the whole batch."""
    numbers_show_placement = False     # one program over the global batch

    def __init__(self, ops, model, params, devices, lr, execution="graph", tensor=False):
        self.ops, self.lr = ops, lr
        self.split = models.get(model).TENSOR_SPLIT if tensor else None
        self.devices = [tf_device(d) for d in devices]
        self.mesh = dtensor.create_mesh([("model" if tensor else "batch", len(devices))],
                                        devices=self.devices,
                                        device_type=dev.parse(devices[0])[0].upper())
        values = ops.to_framework(params)
        self.layouts = [self._layout(np.shape(v), i) for i, v in enumerate(values)]
        self.vars = [dtensor.DVariable(self._put(v, lay)) for v, lay in zip(values, self.layouts)]
        self._rows = self._last = None
        # autograph off: no tensor-dependent Python control flow to convert
        self._step = (self._step_of if execution == "eager" else
                      tf.function(self._step_of, autograph=False))
        self._logits = tf.function(lambda params, X: ops.apply(params, [], X, False),
                                   autograph=False)

    def _layout(self, shape, i):
        rank = len(shape)
        if self.split is not None:     # tp: the model's cut, its parts over "model"
            axis = self.split[i]
            if axis is None:
                return dtensor.Layout.replicated(self.mesh, rank)
            return dtensor.Layout([dtensor.UNSHARDED] * axis + ["model"] +
                                  [dtensor.UNSHARDED] * (rank - axis - 1), self.mesh)
        if rank and shape[0] % self.mesh.size == 0:
            return dtensor.Layout.batch_sharded(self.mesh, "batch", rank)
        return dtensor.Layout.replicated(self.mesh, rank)

    def _put(self, value, layout):
        """A NumPy array as a DTensor of `layout`: copied to the mesh, then cut (each
        device keeps its part)."""
        whole = dtensor.copy_to_mesh(tf.constant(value), dtensor.Layout.replicated(
            self.mesh, np.ndim(value)))
        return dtensor.relayout(whole, layout)

    def _batch(self, a, dtype):
        if self.split is not None:     # tp: every device runs the whole batch
            return dtensor.copy_to_mesh(tf.constant(a, dtype), dtensor.Layout.replicated(
                self.mesh, a.ndim))
        k = self.mesh.size
        if len(a) % k:
            raise NotApplicable(EVEN_SHARDS.format(batch=len(a), k=k))
        # each device given its own rows
        parts = [tf.constant(part, dtype) for part in np.split(a, k)]
        return dtensor.pack(parts, dtensor.Layout.batch_sharded(self.mesh, "batch", a.ndim))

    def _whole(self, params):
        """The parameters laid out whole on every device: DTensor's all-gather of the cut
        ones (its gradient, DTensor's, lays the gradients out as the variables, with the
        collectives DTensor chooses). fsdp only: DTensor's convolution wants its filter whole ("Filter
        for convolution must have fully replicated layout"), and each device computes its
        rows of the batch with the whole weights, as FSDP does; tp keeps the cut."""
        if self.split is not None:
            return params
        return [dtensor.relayout(p, dtensor.Layout.replicated(self.mesh, len(p.shape)))
                for p in params]

    def _loss_and_grads(self, X, y):
        with tf.GradientTape() as tape:
            loss = loss_sum(self.ops.apply(self._whole(self.vars), [], X, True), y)
        return loss, tape.gradient(loss, self.vars)

    def _step_of(self, X, y):
        batch = tf.cast(tf.shape(X)[0], tf.float32)
        loss, grads = self._loss_and_grads(X, y)
        with tf.name_scope("sgd"):           # the update's ops, by name in the profile
            for v, g in zip(self.vars, grads):
                v.assign_sub(self.lr * g / batch)
        return loss / batch

    def step(self, X, y):
        X, y = self._batch(X, tf.float32), self._batch(y, tf.int64)
        self._rows = [int(p.shape[0]) for p in dtensor.unpack(X)]
        self._last = X, y
        # eager ops that no DTensor input places (the tape's first gradient) run on the mesh
        with dtensor.default_mesh(self.mesh):
            return self._step(X, y)

    def losses(self, handles):
        return np.array([dtensor.unpack(h)[0].numpy() for h in handles])

    def placement(self):
        """The mesh's devices and each device's rows of the last step's images, read from
        the step's input (DTensor does not give a program's FLOPs)."""
        return {"devices": self.mesh.size, "processes": 1, "rows": self._rows, "flops": None}

    def shard_arrays(self) -> list[list[np.ndarray]]:
        """What each device holds of every parameter (its part of the cut ones, a whole
        copy of the replicated ones), in the mesh's order."""
        per_var = [dtensor.unpack(v.read_value()) for v in self.vars]
        return [[parts[i].numpy() for parts in per_var] for i in range(self.mesh.size)]

    def figures(self):
        """Each device's bytes of the parameters between steps, the parameters' bytes (tp:
        and those of the replicated ones), and of the gradients it updates them with."""
        out = held_figures(self.shard_arrays(),
                           [int(np.prod(v.shape)) * v.dtype.size for v in self.vars], self.split)
        if self._last is not None:
            out["grad_bytes"] = self._grad_bytes(*self._last)
        return out

    def _grad_bytes(self, X, y) -> list[int]:
        """Each device's part of every gradient, read from the gradients of the last
        step's batch: the step's own program keeps them inside, so its ops run once more
        eagerly, each laid out by DTensor as in the program (a gradient takes its
        variable's layout)."""
        with dtensor.default_mesh(self.mesh):
            _, grads = self._loss_and_grads(X, y)
        parts = [dtensor.unpack(g) for g in grads]
        return [sum(int(p[i].shape.num_elements()) * p[i].dtype.size for p in parts)
                for i in range(self.mesh.size)]

    def _gathered(self):
        """The parameters gathered whole (DTensor's all-gather) onto the first device."""
        return [dtensor.unpack(dtensor.relayout(v.read_value(), dtensor.Layout.replicated(
            self.mesh, len(v.shape))))[0] for v in self.vars]

    def logits(self, X):
        # the first device's, as every framework evaluates: the parameters gathered onto it
        params = self._gathered()
        with tf.device(self.devices[0]):
            return self._logits(params, tf.constant(X)).numpy()

    def replica_params(self):
        return [self.ops.from_framework([p.numpy() for p in self._gathered()])]

    def replica_state(self):
        return [[]]

    def load_params(self, params, state):
        for v, p, lay in zip(self.vars, self.ops.to_framework(params), self.layouts):
            v.assign(self._put(p, lay))


class Workers:
    """Several machines: MultiWorkerMirroredStrategy, workers started with TF_CONFIG
    (common.launch.nodes); it must exist before any other TensorFlow op of the process.
    Keras on TensorFlow joins the same way (frameworks/keras/backends/tensorflow.py)."""

    # the strategy's CommunicationOptions that the communication settings set (common/
    # facts/settings.py): packs of 256 KiB (default 0, one pack: every gradient waits
    # for the whole backward pass)
    COMMUNICATION = {"collective-packs": {"bytes_per_pack": int(COMM_BUFFER_MB * 2**20)}}

    def join(self, rank, timeout=None):
        kinds = tf.distribute.experimental.CommunicationImplementation
        options = tf.distribute.experimental.CommunicationOptions(
            # RING (gRPC) collectives on CPUs; NCCL where there are GPUs
            implementation=kinds.NCCL if self.num_gpus() else kinds.RING,
            timeout_seconds=timeout, **self.comm)
        self.cluster_strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=options)
        # a first collective: returns once every worker of TF_CONFIG is up
        self.cluster_strategy.reduce(tf.distribute.ReduceOp.SUM, self.cluster_strategy.run(
            lambda: tf.constant(1.0)), axis=None).numpy()
        return None

    def leave(self):
        self.cluster_strategy = None

    def rank_device(self, rank):
        return "gpu:0" if self.num_gpus() else "cpu:0"


class Native(Workers):
    def build_native_trainer(self, model, params, devices, lr, execution, rank, world, sync_bn):
        ops = self.model_ops(model)
        synced = self.sync_bn_models.get(models.family(model)) if sync_bn else None
        if synced:      # a model without BatchNorm has nothing to synchronise
            ops = synced.sized(model)
        return MirroredTrainer(ops, params, models.get(model).init_state(), devices, lr,
                               execution, self.cluster_strategy if world > 1 else None)

    def build_fsdp_trainer(self, model, params, devices, lr, execution, rank, world):
        _dtensor_runs(model, execution)
        return DTensorTrainer(self.dtensor_models.get(model, self.model_ops(model)), model,
                              params, devices, lr, execution)

    def build_tp_trainer(self, model, params, devices, lr, execution, rank, world):
        _dtensor_runs(model, execution)
        return DTensorTrainer(self.model_ops(model), model, params, devices, lr, execution,
                              tensor=True)


def _dtensor_runs(model, execution):
    """Raise NotApplicable where DTensor cannot run `model` as `execution` says."""
    if execution == "compiled":
        raise NotApplicable(DTENSOR_NOT_XLA)
    why = DTENSOR_CANNOT.get(models.family(model))
    if why:
        raise NotApplicable(why)
