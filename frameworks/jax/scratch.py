"""The chapter's data parallelism by hand, in JAX (d2l's JAX edition has none): a
replica of the parameters per device, each entry a Slot (devices.py) so that the
allreduce and SGD write into the replica that the next step reads. A shard's loss
and gradients come from jax.value_and_grad, op by op (eager) or under jax.jit
(compiled: XLA compiles the shard's forward and backward for its device).
common/core/scratch.py's train_batch strings the primitives together."""
import jax
import jax.numpy as jnp
import numpy as np

from common.core.contract import Replica
from common.facts.data import shard_bounds

from .devices import Slot, jax_device, value
from .models import sgd_update, training_step_fn


class Scratch:
    def get_params(self, params, device, model="lenet", state=None):
        d = jax_device(device)
        put = lambda v: Slot(jax.device_put(np.asarray(v), d))      # noqa: E731
        values = self.model_ops(model).to_framework(params)
        return Replica([put(p) for p in values], model, device, [put(s) for s in (state or [])],
                       [put(np.zeros_like(p)) for p in values])

    def read_params(self, replica):
        return self.model_ops(replica.model).from_framework(
            [np.array(s.value) for s in replica])

    def read_state(self, replica):
        return [np.array(s.value) for s in replica.state]

    def write_params(self, replica, params, state=None):
        d = jax_device(replica.device)
        for slot, v in zip(replica, self.model_ops(replica.model).to_framework(params)):
            slot.value = jax.device_put(np.asarray(v), d)
        for slot, v in zip(replica.state, state or []):
            slot.value = jax.device_put(np.asarray(v), d)

    def allreduce(self, data):
        # named in the profiler's trace (TraceAnnotation: a no-op unless it records), so
        # that the op-level profile (profile.py's rules) calls it communication
        with jax.profiler.TraceAnnotation("allreduce"):
            # the sum onto the first device, then written into every device's slot
            first = jax_device(self.device_of(data[0]))
            total = data[0].value
            for a in data[1:]:
                total = total + jax.device_put(a.value, first)
            for a in data:
                a.value = jax.device_put(total, next(iter(a.value.devices())))
        # what synchronize waits for (unnoted, 256 MB "took" 0.15 ms: the copies still ran)
        self.note([a.value for a in data], ("allreduce", id(data[0])))

    def split_batch(self, X, y, devices):
        bounds = shard_bounds(int(X.shape[0]), len(devices))
        ds = [jax_device(d) for d in devices]
        return ([jax.device_put(X[lo:hi], d) for (lo, hi), d in zip(bounds, ds)],
                [jax.device_put(y[lo:hi], d) for (lo, hi), d in zip(bounds, ds)])

    def _shard_fn(self, model, execution):
        self.check_execution(execution)
        fn = training_step_fn(self.model_ops(model))
        if execution == "eager":
            return fn
        return self.compiled(("shard", model), lambda: jax.jit(fn))

    def shard_loss_and_grads(self, replica, X, y):
        fn = self._shard_fn(replica.model, replica.execution)
        (loss, (logits, state)), grads = fn([s.value for s in replica],
                                            [s.value for s in replica.state], X, y)
        for slot, g in zip(replica.grads, grads):
            slot.value = g
        for slot, s in zip(replica.state, state):
            slot.value = s
        return loss, logits

    def grads(self, replica):
        return replica.grads

    def sgd(self, replica, scale):
        # compiled: the whole update as one XLA computation (one dispatch, not one per array)
        update = (self.compiled("sgd", lambda: jax.jit(sgd_update))
                  if replica.execution == "compiled" else sgd_update)
        with jax.profiler.TraceAnnotation("sgd"):       # the profile's optimizer update
            new = update([s.value for s in replica], [g.value for g in replica.grads], scale)
        for slot, p in zip(replica, new):
            slot.value = p
        self.note(new, id(replica))

    def add(self, values, device):
        d = jax_device(device)
        return sum(jax.device_put(v, d) for v in values)

    # sharded mode's primitives (common/core/sharded.py: all_gather, reduce_scatter)
    def rows(self, x, lo, hi):
        return value(x)[lo:hi]

    def concat(self, parts, device):
        return jax.device_put(jnp.concatenate(parts), jax_device(device))

    def assign(self, x, v):
        x.value = jax.device_put(v, next(iter(x.value.devices())))

    # tensor mode's primitives (common/core/tensor.py): the vjp of a piece compiled once
    # (op by op, the first step of the tiny ViT took 19 s of XLA compiles, the next 0.2 s)
    def piece(self, fn):
        return self.compiled(("piece", fn), lambda: jax.jit(fn))

    def record(self, fn, inputs, device, consts=()):
        piece = self.piece(fn)
        consts = [value(c) for c in consts]
        return jax.vjp(lambda *xs: piece(*xs, *consts), *[value(x) for x in inputs])

    def backprop(self, vjp, grad):
        return list(vjp(jnp.ones(()) if grad is None else value(grad)))
