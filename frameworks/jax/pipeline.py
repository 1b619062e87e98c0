"""Model mode in JAX: the stage calls that common/core/pipeline.py's GPipe loop is
written on. A stage's forward is jax.vjp of its units with respect to its own
parameters and its input (op by op: model mode runs eagerly), which returns the
output and the function that maps the output's gradient to theirs; the hand-over
between devices is jax.device_put (Backend.to_device). BatchNorm's new running
statistics come back as the vjp's auxiliary output and go into the stage's slots."""
import jax
import jax.numpy as jnp

from .devices import value
from .models import loss_sum


class Pipeline:
    def apply_stage(self, replica, X, training):
        full = replica.full
        state = [s.value for s in full.state]
        out = self.model_ops(replica.model).apply_units([p.value for p in full], state,
                                                        value(X), replica.stage.units, training)
        if training:
            for slot, s in zip(full.state, state):
                slot.value = s
        return out

    def stage_forward(self, replica, X, y=None, training=True):
        if not training:
            return self.apply_stage(replica, X, False), None
        full, stage = replica.full, replica.stage
        ops = self.model_ops(replica.model)

        def run(own, X):
            params = [p.value for p in full]
            for i, p in zip(stage.params, own):
                params[i] = p
            state = [s.value for s in full.state]
            out = ops.apply_units(params, state, X, stage.units, True)
            return (out if y is None else loss_sum(out, y)), state

        out, vjp, state = jax.vjp(run, [p.value for p in replica], value(X), has_aux=True)
        for slot, s in zip(full.state, state):
            slot.value = s
        return out, vjp

    tape_bytes_by = "the residuals jax.vjp keeps (the leaves of the function it returns)"

    def measure_tape(self, replica, forward):
        out, vjp = forward()
        full = replica.full
        own = {id(x.value) for x in (*full, *full.state)}
        leaves = {id(x): x for x in jax.tree_util.tree_leaves(vjp)
                  if hasattr(x, "nbytes") and id(x) not in own}
        return (out, vjp), sum(int(x.nbytes) for x in leaves.values())

    def stage_backward(self, replica, tape, grad, first):
        g_own, g_X = tape(jnp.ones(()) if grad is None else value(grad))
        for slot, g in zip(replica.grads, g_own):
            slot.value = g if first else slot.value + g
        return g_X if replica.stage.units[0] > 0 else None
