"""The chapter's data parallelism by hand, in TensorFlow (d2l has none): a replica
of variables per device with a gradient buffer for each, a GradientTape per shard,
an allreduce of the buffers by hand, SGD on every replica. common/core/scratch.py's
train_batch strings them together; here it runs eagerly, or traced into one
tf.function (graph), with each shard's forward and backward compiled by XLA (compiled)."""
import tensorflow as tf

from common.core.contract import Replica
from common.facts.data import shard_bounds

from .devices import tf_device
from .models import loss_sum
from .profile import annotate


class Scratch:
    def get_params(self, params, device, model="lenet", state=None):
        with tf.device(tf_device(device)):
            variables = [tf.Variable(p) for p in self.model_ops(model).to_framework(params)]
            # gradient buffers: TensorFlow's answer to MXNet's attach_grad
            grads = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]
            state = [tf.Variable(s, trainable=False) for s in (state or [])]
        return Replica(variables, model, device, state, grads)

    def read_params(self, replica):
        return self.model_ops(replica.model).from_framework([v.numpy() for v in replica])

    def read_state(self, replica):
        return [s.numpy() for s in replica.state]

    def write_params(self, replica, params, state=None):
        for v, p in zip(replica, self.model_ops(replica.model).to_framework(params)):
            v.assign(p)
        for s, v in zip(replica.state, state or []):
            s.assign(v)

    def allreduce(self, data):
        with annotate("allreduce"), tf.device(data[0].device):
            total = tf.add_n([tf.identity(a) for a in data])
            data[0].assign(total)
            for a in data[1:]:
                with tf.device(a.device):
                    a.assign(total)        # in place: every device's buffer gets the sum

    def split_batch(self, X, y, devices):
        # slices by common.facts.data.shard_bounds: a batch the device count does not divide
        # is cut as every other framework cuts it (tf.split needs equal parts)
        out_X, out_y = [], []
        for (lo, hi), d in zip(shard_bounds(int(X.shape[0]), len(devices)), devices):
            with tf.device(tf_device(d)):
                out_X.append(tf.identity(X[lo:hi]))
                out_y.append(tf.identity(y[lo:hi]))
        return out_X, out_y

    def shard_loss_and_grads(self, replica, X, y):
        with tf.device(tf_device(replica.device)):
            if replica.execution != "compiled":
                return self._shard_step(replica, X, y)
            # XLA compiles one device's work: the shard's step, on its device (a
            # jit_compile function cannot span the devices that train_batch uses)
            if not hasattr(replica, "xla_step"):
                replica.xla_step = tf.function(lambda X, y: self._shard_step(replica, X, y),
                                               jit_compile=True, autograph=False)
            return replica.xla_step(X, y)

    def _shard_step(self, replica, X, y):
        with tf.GradientTape() as tape:
            logits = self.model_ops(replica.model).apply(list(replica), replica.state, X, True)
            loss = loss_sum(logits, y)
        for buf, g in zip(replica.grads, tape.gradient(loss, list(replica))):
            buf.assign(g)
        return loss, logits

    def grads(self, replica):
        return replica.grads

    def sgd(self, replica, scale):
        with annotate("sgd"), tf.device(tf_device(replica.device)):
            for v, g in zip(replica, replica.grads):
                v.assign_sub(scale * g)

    def add(self, values, device):
        with tf.device(tf_device(device)):
            return tf.add_n(values)

    # sharded mode's primitives (common/core/sharded.py: all_gather, reduce_scatter)
    def rows(self, x, lo, hi):
        with tf.device(x.device):
            return tf.identity(x[lo:hi])

    def concat(self, parts, device):
        with tf.device(tf_device(device)):
            return tf.concat(parts, 0)

    def assign(self, x, value):
        x.assign(value)            # the gradient buffers are assigned too: nothing to clear

    whole_step_executions = ("graph", "compiled")       # tf.function below

    def wrap_train_batch(self, step, devices, execution):
        if execution == "eager":
            return step
        # autograph off: the loops are over Python lists, nothing to convert (and it
        # would try to convert library calls made while tracing)
        return tf.function(step, autograph=False)

    # tensor mode's primitives (common/core/tensor.py): a GradientTape per piece
    def record(self, fn, inputs, device, consts=()):
        with tf.device(tf_device(device)), tf.GradientTape() as tape:
            for x in inputs:
                tape.watch(x)
            out = fn(*inputs, *consts)
        return out, (tape, out, list(inputs), device)

    def backprop(self, tape, grad):
        tape, out, inputs, device = tape
        with tf.device(tf_device(device)):
            return tape.gradient(out, inputs, output_gradients=grad)
