"""Keras 3 on TensorFlow: its arrays are TensorFlow tensors, its device API, profiler and
several workers TensorFlow's (MultiWorkerMirroredStrategy, TF_CONFIG); model.fit under a
tf.distribute strategy, the gradients by tf.GradientTape."""
import keras
import tensorflow as tf    # `tf`: Keras's arrays are its tensors (see backends/__init__.py)

from common.core.contract import NeedsGPU, NotApplicable
from common.facts import registry
from frameworks.tensorflow.devices import Devices as TensorFlowDevices, tf_device
from frameworks.tensorflow.native import Workers, mirrored_values
from frameworks.tensorflow.profile import TFProfiler as Profiler  # noqa: F401

from . import FRAMEWORK

SYNC_BN = True      # BatchNormalization(synchronized=True): the strategy's all-reduce


class Devices(TensorFlowDevices, Workers):
    """TensorFlow's device API, and its workers' join: Keras's fit runs under the same
    MultiWorkerMirroredStrategy."""


def grads_of_loss_sum(m, param_vars, state_vars, X, y, loss_sum):
    with tf.GradientTape() as tape:
        logits = m(X, training=True)
        loss = loss_sum(y, logits)
    return logits, loss, tape.gradient(loss, [v.value for v in param_vars])


# measured with TensorFlow 2.x, Keras 3, 2 logical CPU devices (its known issue:
# https://www.tensorflow.org/xla/known_issues, "tf.Variable on a different device")
XLA_ON_CPU_DEVICES = ("fit(jit_compile=True) under MirroredStrategy over logical CPU devices "
                      "fails: 'Trying to access resource .../replica_1 located in device CPU:1 "
                      "from device CPU:0' (XLA compiles a replica's step for one device)")


def _tf_data_options():
    """The batches are ready in memory: a single input thread and no autotuning keep
    tf.data from competing with training for the cores (measured on 2 cores: fit fed
    NumPy arrays took 55 or 110 ms per step from run to run; this, 51-60)."""
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    options.autotune.enabled = False
    return options


def _reduce_scalars_across_workers() -> None:
    """Keras 3.15's fit under MultiWorkerMirroredStrategy reduces each step's logs with
    strategy.reduce("MEAN", v, axis=0), which fails on a scalar such as the loss
    ("Invalid reduction dimension 0 for input with 0 dimensions", measured on 2 workers):
    scalars are reduced with axis=None, the mean over the replicas that fit computes on
    one machine; the rest goes to Keras's own function."""
    from keras.src.backend.tensorflow import trainer as tf_trainer
    original = tf_trainer.reduce_per_replica
    if getattr(original, "reduces_scalars", False):
        return

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and isinstance(
                strategy, tf.distribute.MultiWorkerMirroredStrategy):
            def scalar(v):      # one replica per worker: a plain tensor, not PerReplica
                return strategy.experimental_local_results(v)[0].shape.rank == 0
            return keras.tree.map_structure(
                lambda v: strategy.reduce("MEAN", v, axis=None if scalar(v) else 0), values)
        return original(values, strategy, reduction)
    reduce_per_replica.reduces_scalars = True
    tf_trainer.reduce_per_replica = reduce_per_replica


class StrategyPlacement:
    """tf.distribute on the TensorFlow backend: several devices, MirroredStrategy; several
    workers (common.launch.nodes), their MultiWorkerMirroredStrategy; one device, Keras's
    default strategy, which places on that device (the default device of devices(1));
    OneDeviceStrategy doubled the step time. Reduction onto one device, not collectives: a
    second MirroredStrategy in the process (the tests build one per model) reuses the
    first one's collective instance keys, and fit then fails with "Shape mismatch in the
    collective instance". Batches come as a tf.data pipeline (_tf_data_options)."""

    def __init__(self, devices, sync_bn, strategy=None):
        self.strategy = strategy or (tf.distribute.MirroredStrategy(
            [tf_device(d) for d in devices], cross_device_ops=tf.distribute.ReductionToOneDevice())
            if len(devices) > 1 else tf.distribute.get_strategy())
        self.devices = ([tf_device(d) for d in devices] if strategy is None
                        else list(strategy.extended.worker_devices))
        self.multi_worker = isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        self._evaluate = self._rows = None

    @property
    def numbers_show_placement(self):
        # Keras scales each replica's loss by 1 / replicas: a batch copied to every
        # replica gives the same numbers as one split over them
        return self.strategy.num_replicas_in_sync == 1

    def placement(self):
        """The replicas and workers the strategy spans; each of this worker's replicas' rows
        of the images its last step received (a worker whose strategy held its own devices
        alone would take the whole batch and train alone, with one process's numbers)."""
        resolver = getattr(self.strategy, "cluster_resolver", None)
        return {"devices": self.strategy.num_replicas_in_sync,
                "processes": resolver.cluster_spec().num_tasks("worker") if resolver else 1,
                "rows": [int(r) for r in self.strategy.experimental_local_results(self._rows)],
                "flops": None}

    def scope(self):
        return self.strategy.scope()

    def built(self, model):
        if self.multi_worker:
            # Keras's fit first reduces an input batch over the replicas to build the model
            # symbolically, which MultiWorkerMirroredStrategy cannot do for a nested batch
            # ("Attempt to convert a value (PerReplica...)", Keras 3.15); the model is built
            # already, and fit runs in the strategy's scope (fit)
            model._distribute_strategy = None
            _reduce_scalars_across_workers()
        self._evaluate = tf.function(lambda x: model(x, training=False), autograph=False)
        with self.strategy.scope():      # each replica's own copy: the rows it received
            self._rows = tf.Variable(0, dtype=tf.int64, trainable=False,
                                     synchronization=tf.VariableSynchronization.ON_READ,
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        step = model.train_step

        def noted(data):
            self._rows.assign(tf.shape(keras.tree.flatten(data)[0], out_type=tf.int64)[0])
            return step(data)
        model.train_step = noted

    def fit(self, model, X, y, batch, callback):
        batches = tf.data.Dataset.from_tensor_slices((X, y)).batch(batch)
        options = _tf_data_options()
        if not self.multi_worker:
            return model.fit(batches.with_options(options), epochs=1, verbose=0,
                             callbacks=[callback])
        # every worker reads the same batches; tf.distribute cuts each into one piece per
        # replica and DATA sharding hands worker i the i-th piece of every batch
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        with self.strategy.scope():
            return model.fit(batches.with_options(options), epochs=1, verbose=0,
                             callbacks=[callback])

    def logits(self, model, X):
        # Not model.predict: under MirroredStrategy it splits the batch over the
        # replicas, and without sync-bn each replica normalises with its own running
        # statistics, so rows of one batch were evaluated by different models (measured:
        # ResNet-18 on 2 devices, rows 0-3 the first replica's, 4-7 the second's,
        # differing by 1.4e-3). The first replica alone, as in every framework: the
        # model called outside the replicas reads each variable's first copy.
        with tf.device(self.devices[0]):
            return self._evaluate(tf.constant(X)).numpy()

    def copies(self, variables):
        return mirrored_values(self.strategy, [v.value for v in variables], len(self.devices))


def refuse(model, devices, execution, sync_bn):
    if execution == "compiled" and len(devices) > 1 and not devices[0].startswith("gpu"):
        raise NeedsGPU(XLA_ON_CPU_DEVICES)


def placement(devices, sync_bn, strategy=None):
    return StrategyPlacement(devices, sync_bn, strategy)


def laid_out(devices, mode, mesh):
    """fsdp and tp (keras.distribution.ModelParallel) are JAX's alone in Keras 3.15: here
    ModelParallel is made, but TensorFlow's Variable never asks it for a layout (measured:
    a kernel laid out ("batch", None) stays one whole ResourceVariable on CPU:0, and fit
    runs as if no layout were there); the facts' gap says so."""
    raise NotApplicable(registry.gap(FRAMEWORK, mode))


def compiled(model, execution):
    """Nothing: the strategy is set up with the placement."""
