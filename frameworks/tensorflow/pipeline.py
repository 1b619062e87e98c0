"""Model mode in TensorFlow: the stage calls that common/core/pipeline.py's GPipe loop is
written on. Each stage runs under tf.device on its (logical) device inside a
GradientTape that watches its input; tape.gradient(out, [input] + params,
output_gradients=grad) gives the input's gradient to hand back and the parameters'
gradients, summed over micro-batches in the replica's gradient buffers."""
import tensorflow as tf

from .devices import tf_device
from .models import loss_sum


class Pipeline:
    def stage_forward(self, replica, X, y=None, training=True):
        units = replica.stage.units
        with tf.device(tf_device(replica.device)):
            if not training:
                return self.apply_stage(replica, X, False), None
            with tf.GradientTape() as tape:
                if units[0] > 0:
                    tape.watch(X)
                out = self.apply_stage(replica, X, True)
                if y is not None:
                    out = loss_sum(out, y)
        return out, (tape, X, out)

    def stage_backward(self, replica, tape, grad, first):
        tape, X, out = tape
        takes_grad = replica.stage.units[0] > 0
        with tf.device(tf_device(replica.device)):
            grads = tape.gradient(out, ([X] if takes_grad else []) + list(replica),
                                  output_gradients=grad)
            for buf, g in zip(replica.grads, grads[takes_grad:]):
                if first:
                    buf.assign(g)
                else:
                    buf.assign_add(g)
        return grads[0] if takes_grad else None
