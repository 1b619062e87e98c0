"""Native mode: tf.distribute.MirroredStrategy with a custom training loop
(strategy.run, strategy.reduce) compiled with tf.function."""
import numpy as np
import tensorflow as tf

from common import models
from common.core.contract import Trainer
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
        if sync_bn:     # a model without BatchNorm has nothing to synchronise
            ops = self.sync_bn_models.get(model, ops)
        return MirroredTrainer(ops, params, models.get(model).init_state(), devices, lr,
                               execution, self.cluster_strategy if world > 1 else None)
