"""Keras 3 on JAX: its arrays are jax.Arrays, its device API and profiler JAX's;
several devices by keras.distribution.DataParallel (one program over the global batch),
one model laid out over them by keras.distribution.ModelParallel (fsdp, tp), the
gradients by jax.value_and_grad over Model.stateless_call."""
import re

import jax
import keras
import numpy as np

from common import models
from common.core.contract import NotApplicable
from common.facts import registry
from frameworks.jax.devices import Devices, jax_device, neutral_name  # noqa: F401  (this backend's device API)
from frameworks.jax.profile import JaxProfiler as Profiler  # noqa: F401

from . import FRAMEWORK
from .arrays import ArraysPlacement

# BatchNormalization(synchronized=True) is TensorFlow's alone (Keras raises on the
# others); here one program over the global batch normalises over every device's rows
SYNC_BN = False
tf = None


def grads_of_loss_sum(m, param_vars, state_vars, X, y, loss_sum):
    # JAX is functional: the pass runs on the variables' values (stateless_call) and
    # hands back the new state, written into the state variables after. Under jax.jit:
    # one XLA compilation, where op by op every primitive of every shape compiles on its
    # own (measured, ResNet-18 at batch 8 on 1 thread: 15 s op by op, 6 s jitted)
    trainable, frozen = m.trainable_variables, m.non_trainable_variables

    @jax.jit
    def value_and_grad(values, frozen_values, X, y):
        def loss_fn(values):
            logits, new_frozen = m.stateless_call(values, frozen_values, X, training=True)
            return loss_sum(y, logits), (logits, new_frozen)
        return jax.value_and_grad(loss_fn, has_aux=True)(values)
    (loss, (logits, new_frozen)), grads = value_and_grad(
        [v.value for v in trainable], [v.value for v in frozen], X, y)
    for v, value in zip(frozen, new_frozen):
        v.assign(value)
    where = {id(v): i for i, v in enumerate(trainable)}
    return logits, loss, [grads[where[id(v)]] for v in param_vars]


def refuse(model, devices, execution, sync_bn):
    if len(devices) > 1 and not sync_bn and models.get(model).STATE_NAMES:
        # sync_bn or not, one program over the global batch normalises over all its rows:
        # per-replica BatchNorm does not exist here
        raise NotApplicable(registry.gap(FRAMEWORK, "replica-bn"))


class DataParallelPlacement(ArraysPlacement):
    """keras.distribution.DataParallel over a DeviceMesh of the devices: one program over
    the global batch, its rows sharded over the devices, the weights replicated; XLA
    inserts the all-reduce. Its scope (not set_distribution, which is global) covers
    building the model (the weights' layout) and fit (the batches' sharding)."""

    # one program over the global batch: copied to every device, the same numbers
    numbers_show_placement = False

    def __init__(self, devices, sync_bn, distribution=None):
        super().__init__(devices, sync_bn)
        self.distribution = distribution or keras.distribution.DataParallel(devices=self.devices)
        self.seen = []          # the last step's images, as fit's train step received them

    def scope(self):
        return self.distribution.scope()

    def fit(self, model, X, y, batch, callback):
        with self.scope():      # fit's own train function (made in the distribution's scope)
            model.make_train_function()
        train = model.train_function
        if not getattr(train, "watched", False):
            def watched(state, batches):
                self.state_seen = state      # a reference: the step donates its buffers
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


class LaidOutPlacement(DataParallelPlacement):
    """fsdp and tp: keras.distribution.ModelParallel, one model over a DeviceMesh of the
    devices: each weight laid out as its LayoutMap entry says (by its path: the mesh axis
    each of its axes is cut along), the rest replicated, the batch's rows cut along the
    mesh's "batch" axis (of size 1 in tp: every device the whole batch). One program over
    the global batch; XLA's partitioner gathers the weights and reduces the gradients."""

    def __init__(self, devices, mesh):
        shape, axis_names = mesh
        self.layout_map = keras.distribution.LayoutMap(
            keras.distribution.DeviceMesh(shape, axis_names, list(devices)))
        super().__init__(devices, False, keras.distribution.ModelParallel(
            layout_map=self.layout_map, batch_dim_name="batch"))

    def lay_out(self, path, axes):
        """The layout of the variable at `path` (a LayoutMap key is a regex), read when
        the variable is made in this placement's scope."""
        self.layout_map[re.escape(path)] = axes

    def copies(self, variables):
        """One model: each variable gathered whole."""
        return [[np.asarray(v.value) for v in variables]]

    def logits(self, model, X):
        """On the first device with every variable gathered whole (Model.stateless_call):
        called op by op on the laid-out variables, each op of the cut ones runs a collective
        of its own, and XLA:CPU's all-reduce waited for a device that never joined and
        aborted the worker (measured: the default ViT's evaluation, fsdp on 2 devices,
        "Termination timeout for `all reduce RendezvousKey{... cross_module ...}`")."""
        first = jax_device(self.devices[0])

        def whole(variables):
            return [jax.device_put(np.asarray(v.value), first) for v in variables]
        with jax.default_device(first):
            out, _ = model.stateless_call(whole(model.trainable_variables),
                                          whole(model.non_trainable_variables),
                                          jax.device_put(X, first), training=False)
        return np.asarray(out)

    def program(self, model):
        """fit's train step as XLA compiled it for the last step's arguments (Keras's own
        jit of model.train_step, with its state's layouts; the same program, compiled again
        from their shapes and layouts, since the step donated the buffers), and the index
        of its first updated trainable variable among the program's results. None before
        a step."""
        if not self.seen:
            return None

        def abstract(tree):
            return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), tree)
        with self.scope():
            step = jax.jit(model.train_step, donate_argnums=0,
                           out_shardings=(None, model._get_state_sharding_spec()))
            lowered = step.lower(abstract(self.state_seen), abstract(self.seen[1]))
        return lowered.compile().as_text(), len(jax.tree.leaves(lowered.out_info[0]))

    def pieces(self, variables):
        """What each device holds of every variable, in the devices' order."""
        return [[np.asarray(next(s.data for s in v.value.addressable_shards
                                 if neutral_name(s.device) == d)) for v in variables]
                for d in self.devices]


def laid_out(devices, mode, mesh):
    """fsdp's or tp's placement: ModelParallel over a mesh of the devices ((shape, axis
    names)), its layouts given by lay_out before the model is made."""
    return LaidOutPlacement(devices, mesh)


class _Noted:
    """The batches that fit's train function draws, each one's images noted in `seen`."""

    def __init__(self, batches, seen):
        self.batches, self.seen = batches, seen

    def __iter__(self):
        return self

    def __next__(self):
        data = next(self.batches)
        self.seen[:] = [keras.tree.flatten(data)[0], data]
        return data


def placement(devices, sync_bn, strategy=None):
    if len(devices) == 1:
        return ArraysPlacement(devices, sync_bn)
    return DataParallelPlacement(devices, sync_bn)


def compiled(model, execution):
    """Nothing: jax.jit needs no help."""
