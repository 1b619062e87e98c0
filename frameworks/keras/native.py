"""Native mode: model.fit, the data parallelism of Keras 3 on each backend:
TensorFlow's tf.distribute.MirroredStrategy (the replacement of the removed
keras.utils.multi_gpu_model), JAX's keras.distribution.DataParallel, and on torch one
device (Keras 3.15 has no distribution there). What differs per backend is its
placement, in frameworks/keras/backends; the trainer below is the same on each.

fsdp and tp: the same model.fit of one model laid out over the devices by
keras.distribution.ModelParallel (a LayoutMap of the variables' paths; JAX's alone):
fsdp's weights cut along their first axis over the batch's mesh axis, tp's as the
model's TENSOR_SPLIT says over a "model" axis (Megatron's cut)."""
import collections

import numpy as np
import keras

from common import models
from common.core.contract import NotApplicable, Trainer, held_figures
from common.core.loop import STEP_LOSSES_KEPT
from common.results import hlo

from .backends import current
from .models import nhwc


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


class FitTrainer(Trainer):
    def __init__(self, backend, model, params, devices, lr, sync_bn=False, execution="graph",
                 strategy=None, place=None):
        self.backend, self.name, self.ops = backend, model, backend.model_ops(model)
        self.place = place or current.placement(devices, sync_bn, strategy)
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
        current.compiled(self.model, execution)

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


# fsdp's and tp's meshes over k devices ((shape, axis names)): the batch cut along "batch"
# (ModelParallel's batch_dim_name); tp's "batch" axis of size 1, every device the whole batch
MESHES = {"fsdp": lambda k: ((k,), ("batch",)), "tp": lambda k: ((1, k), ("batch", "model"))}

# fsdp of a model with BatchNorm: why not (fsdp mode keeps each device's statistics)
ONE_PROGRAM_BN = ("keras.distribution.ModelParallel runs one program over the global batch: "
                  "BatchNormalization normalises over every device's rows, where fsdp mode "
                  "keeps each device's own statistics of its shard (measured: ResNet-18 laid "
                  "out so anyway, its first step's loss 2.5e-2 of its value off the oracle per "
                  "shard)")


def fsdp_axes(model, variables, k):
    """ZeRO-3: each weight whose first axis the k devices divide cut along it over "batch"
    (the mesh's one axis, the batch's too), the rest whole on every device."""
    return [("batch",) + (None,) * (len(v.shape) - 1) if len(v.shape) and v.shape[0] % k == 0
            else None for v in variables]


def tp_axes(model, variables, k):
    """Megatron: each weight the model's TENSOR_SPLIT cuts laid out along "model" on that
    axis (Keras's layout keeps the common one's axes: MultiHeadAttention's query, key and
    value kernels (width, heads, head width) cut by heads, that is by columns, its output
    kernel (heads, head width, width) by rows), the rest whole on every device."""
    return [None if axis is None else
            (None,) * axis + ("model",) + (None,) * (len(v.shape) - axis - 1)
            for v, axis in zip(variables, models.get(model).TENSOR_SPLIT)]


class LaidOutTrainer(FitTrainer):
    """fsdp and tp: model.fit of one model laid out over the devices by
    keras.distribution.ModelParallel (frameworks/keras/backends: laid_out). A LayoutMap
    names variables by path, which a model's auto-named layers (LeNet's) change at every
    build: a first build gives the paths and shapes, and Keras's name counters are set
    back before the trainer's own build, which so names its layers the same.
    (keras.models.clone_model would copy the names too, but its get_config imports
    TensorFlow where it is installed: a Keras-on-JAX process must not load it.)"""

    def __init__(self, backend, model, params, devices, lr, execution, mode):
        from keras.src.backend.common import global_state     # Keras's own name counters
        place = current.laid_out(devices, mode, MESHES[mode](len(devices)))
        if mode == "fsdp" and models.get(model).STATE_NAMES:
            raise NotApplicable(ONE_PROGRAM_BN)
        counters = global_state.get_global_attribute(
            "object_name_uids", collections.defaultdict(int), set_to_default=True)
        before = collections.defaultdict(int, counters)
        _, (variables, _) = backend.keras_model(model, params)
        self.axes = {"fsdp": fsdp_axes, "tp": tp_axes}[mode](model, variables, len(devices))
        for v, axes in zip(variables, self.axes):
            if axes is not None:
                place.lay_out(v.path, axes)
        self.mode = mode
        global_state.set_global_attribute("object_name_uids", before)
        super().__init__(backend, model, params, devices, lr, execution=execution, place=place)

    def shard_arrays(self):
        """What each device holds of every parameter (framework layout), in the devices' order."""
        return self.place.pieces(self.param_vars)

    def figures(self):
        """Each device's bytes of the parameters between steps, the parameters' bytes, and
        (tp) the bytes every device holds whole; from fit's compiled train step (JAX's HLO,
        where the placement gives it), the bytes its collectives carry and, where every
        update reads so, the gradients' bytes each device updates with."""
        out = held_figures(self.shard_arrays(),
                           [int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in self.param_vars],
                           models.get(self.name).TENSOR_SPLIT if self.mode == "tp" else None)
        program = getattr(self.place, "program", lambda model: None)(self.model)
        if program is not None:
            text, first = program
            # the step's results: its logs, then the trainable variables in Keras's order
            out.update(hlo.step_figures(text, [int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
                                               for v in self.model.trainable_variables],
                                        len(out["shard_bytes"]), first))
        return out


class Native:
    def build_native_trainer(self, model, params, devices, lr, execution, rank, world, sync_bn):
        current.refuse(model, devices, execution, sync_bn)
        return FitTrainer(self, model, params, devices, lr, sync_bn, execution,
                          getattr(self, "cluster_strategy", None) if world > 1 else None)

    def build_fsdp_trainer(self, model, params, devices, lr, execution, rank, world):
        return LaidOutTrainer(self, model, params, devices, lr, execution, "fsdp")

    def build_tp_trainer(self, model, params, devices, lr, execution, rank, world):
        return LaidOutTrainer(self, model, params, devices, lr, execution, "tp")
