"""Native mode: model.fit, the data parallelism of Keras 3 on each backend:
TensorFlow's tf.distribute.MirroredStrategy (the replacement of the removed
keras.utils.multi_gpu_model), JAX's keras.distribution.DataParallel, and on torch one
device (Keras 3.15 has no distribution there). What differs per backend is a Placement
below; only the running backend's framework is imported."""
import numpy as np
import keras

from common import models
from common.core.contract import NeedsGPU, NotApplicable, Trainer
from common.core.loop import STEP_LOSSES_KEPT
from common.facts import registry

from .devices import BACKEND
from .models import nhwc

if BACKEND == "tensorflow":
    import tensorflow as tf

    from frameworks.tensorflow.devices import tf_device
    from frameworks.tensorflow.native import mirrored_values
elif BACKEND == "jax":
    from frameworks.jax.devices import neutral_name


class StepLosses(keras.callbacks.Callback):
    """Each step's own loss. Keras logs the running mean of the epoch's losses;
    resetting that tracker after every step makes the next log exactly the next
    batch's loss (the tracker weights it by the batch size: total / count). A
    callback like this one makes fit wait for every step (Keras then calls it in
    step, not asynchronously), so it runs only for the steps the record keeps."""

    def __init__(self, on_step):
        super().__init__()
        self.on_step, self.values = on_step, []

    def on_train_batch_end(self, batch, logs=None):
        self.values.append(float(logs["loss"]))
        # on JAX, fit carries the metrics' values through its jitted steps: written back
        # to the variables first (Keras's own sync for callbacks), then reset, and fit
        # reads them again for the next step
        getattr(self.model, "jax_state_sync", lambda: None)()
        for metric in self.model.metrics:
            if metric.name == "loss":
                metric.reset_state()
        self.on_step()


class Progress(keras.callbacks.Callback):
    """Only tells of progress: safe for Keras to call beside the training loop."""
    async_safe = True

    def __init__(self, on_step):
        super().__init__()
        self.on_step = on_step

    def on_train_batch_end(self, batch, logs=None):
        self.on_step()


class ArraysPlacement:
    """fit on NumPy arrays (Keras's own batching, in order: shuffle=False), evaluation by
    a plain call, every variable one array: Keras on JAX on one device, on torch."""
    numbers_show_placement = True      # one device: the batch has nowhere else to go

    def __init__(self, devices, sync_bn):
        self.devices = list(devices)

    def placement(self):
        return None

    def scope(self):
        # torch: "cpu", not "cpu:0" (measured: under keras.device("cpu:0") Keras 3.15's
        # torch fit found "No gradients provided for any variable")
        device = self.devices[0]
        return keras.device("cpu" if BACKEND == "torch" and device.startswith("cpu") else device)

    def fit(self, model, X, y, batch, callback):
        with self.scope():
            return model.fit(X, y, batch_size=batch, epochs=1, verbose=0, shuffle=False,
                             callbacks=[callback])

    def logits(self, model, X):
        with self.scope():
            return keras.ops.convert_to_numpy(model(X, training=False))

    def copies(self, variables):
        """Each replica's copy of the variables, as NumPy arrays."""
        return [[keras.ops.convert_to_numpy(v.value) for v in variables]]


class DataParallelPlacement(ArraysPlacement):
    """keras.distribution.DataParallel over a DeviceMesh of the devices (JAX): one program
    over the global batch, its rows sharded over the devices, the weights replicated; XLA
    inserts the all-reduce. Its scope (not set_distribution, which is global) covers
    building the model (the weights' layout) and fit (the batches' sharding)."""

    # one program over the global batch: copied to every device, the same numbers
    numbers_show_placement = False

    def __init__(self, devices, sync_bn):
        super().__init__(devices, sync_bn)
        self.distribution = keras.distribution.DataParallel(devices=self.devices)
        self.seen = []          # the last step's images, as fit's train step received them

    def scope(self):
        return self.distribution.scope()

    def fit(self, model, X, y, batch, callback):
        with self.scope():      # fit's own train function (made in the distribution's scope)
            model.make_train_function()
        train = model.train_function
        if not getattr(train, "watched", False):
            def watched(state, batches):
                return train(state, _Noted(batches, self.seen))
            watched.watched = True
            model.train_function = watched
        return super().fit(model, X, y, batch, callback)

    def placement(self):
        """The mesh's devices; each device's rows of the images the last step received."""
        rows = {neutral_name(s.device): s.data.shape[0] for s in self.seen[0].addressable_shards}
        return {"devices": self.distribution.device_mesh.devices.size, "processes": 1,
                "rows": [rows[d] for d in self.devices], "flops": None}

    def copies(self, variables):
        # each device's own copy of a replicated weight, read from that device
        shards = [sorted(v.value.addressable_shards,
                         key=lambda s: self.devices.index(neutral_name(s.device)))
                  for v in variables]
        return [[np.asarray(per_var[i].data) for per_var in shards] for i in range(len(self.devices))]


class _Noted:
    """The batches that fit's train function draws, each one's images noted in `seen`."""

    def __init__(self, batches, seen):
        self.batches, self.seen = batches, seen

    def __iter__(self):
        return self

    def __next__(self):
        data = next(self.batches)
        self.seen[:] = [keras.tree.flatten(data)[0]]
        return data


def placement(devices, sync_bn):
    """How model.fit spreads over `devices` on this Keras backend."""
    if len(devices) == 1:
        return ArraysPlacement(devices, sync_bn)
    if BACKEND == "jax":
        # sync_bn or not, one program over the global batch normalises over all its rows:
        # per-replica BatchNorm does not exist here (the facts' replica-bn gap)
        return DataParallelPlacement(devices, sync_bn)
    raise NotApplicable(registry.gap("keras-" + BACKEND, "multi-device"))


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


class FitTrainer(Trainer):
    def __init__(self, backend, model, params, devices, lr, sync_bn=False, execution="graph",
                 strategy=None):
        self.backend, self.name, self.ops = backend, model, backend.model_ops(model)
        self.place = (StrategyPlacement(devices, sync_bn, strategy) if BACKEND == "tensorflow"
                      else placement(devices, sync_bn))
        with self.place.scope():
            # BatchNormalization(synchronized=sync_bn) on TensorFlow: without it each
            # replica keeps its own moving statistics (ON_READ variables under the strategy)
            self.model, (self.param_vars, self.state_vars) = backend.keras_model(
                model, params, models.get(model).init_state(), sync_bn)
            self.model.compile(
                optimizer=keras.optimizers.SGD(learning_rate=lr),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                run_eagerly=execution == "eager", jit_compile=execution == "compiled")
        getattr(self.place, "built", lambda m: None)(self.model)
        if BACKEND == "torch" and execution == "compiled":
            # Keras's torch train_step starts with Module.zero_grad, whose `if p.grad is
            # not None` torch.compile guards on: None in the first step only, so the
            # second step compiled everything again (measured: 6.6 s per LeNet trainer).
            # A zero gradient to start from makes the first compilation the only one.
            import torch
            for v in self.model.trainable_variables:
                v.value.grad = torch.zeros_like(v.value)

    def step(self, X, y):
        return self.train_epoch(X, y, np.arange(len(X))[None], lambda: None)[0]

    def _fit(self, X, y, order, callback):
        idx = order.ravel()
        return self.place.fit(self.model, nhwc(X[idx]), y[idx], order.shape[1], callback)

    def train_epoch(self, X, y, order, on_step):
        """Each step's own loss for the steps the record keeps; past them, fit runs
        without waiting on every step (measured: 10-14% of a LeNet epoch), and each
        of those steps gets the mean of their losses, so the epoch's mean stays exact."""
        exact = StepLosses(on_step)
        self._fit(X, y, order[:STEP_LOSSES_KEPT], exact)
        rest = order[STEP_LOSSES_KEPT:]
        if not len(rest):
            return exact.values
        history = self._fit(X, y, rest, Progress(on_step))
        return exact.values + [history.history["loss"][-1]] * len(rest)

    def losses(self, handles):
        return np.asarray(handles, np.float64)

    @property
    def numbers_show_placement(self):
        return self.place.numbers_show_placement

    def placement(self):
        return self.place.placement()

    def logits(self, X):
        return self.place.logits(self.model, nhwc(X))

    def replica_params(self):
        return [self.ops.from_framework(r) for r in self.place.copies(self.param_vars)]

    def replica_state(self):
        return self.place.copies(self.state_vars)

    def load_params(self, params, state):
        with self.place.scope():
            self.backend.set_weights(self.name, (self.param_vars, self.state_vars), params, state)


# measured with TensorFlow 2.x, Keras 3, 2 logical CPU devices (its known issue:
# https://www.tensorflow.org/xla/known_issues, "tf.Variable on a different device")
XLA_ON_CPU_DEVICES = ("fit(jit_compile=True) under MirroredStrategy over logical CPU devices "
                      "fails: 'Trying to access resource .../replica_1 located in device CPU:1 "
                      "from device CPU:0' (XLA compiles a replica's step for one device)")


class Native:
    def build_native_trainer(self, model, params, devices, lr, execution, rank, world, sync_bn):
        if (BACKEND == "tensorflow" and execution == "compiled" and len(devices) > 1
                and not devices[0].startswith("gpu")):
            raise NeedsGPU(XLA_ON_CPU_DEVICES)
        if (BACKEND == "jax" and len(devices) > 1 and not sync_bn
                and models.get(model).STATE_NAMES):
            raise NotApplicable(registry.gap(self.name, "replica-bn"))
        return FitTrainer(self, model, params, devices, lr, sync_bn, execution,
                          getattr(self, "cluster_strategy", None) if world > 1 else None)
