"""The chapter's data parallelism written by hand, in TensorFlow (d2l has none):
a replica of variables per device, a GradientTape per shard, an allreduce of
gradient buffers by hand, SGD on every replica; the whole step in one tf.function."""
import tensorflow as tf

from .devices import tf_device
from .lenet import from_tf, lenet, loss_sum, to_tf


class Replica(list):
    """A device's parameter variables, with a gradient buffer for each
    (TensorFlow's answer to MXNet's attach_grad)."""

    def __init__(self, variables, grads):
        super().__init__(variables)
        self.grads = grads


class Scratch:
    def get_params(self, params, device):
        with tf.device(tf_device(device)):
            variables = [tf.Variable(p) for p in to_tf(params)]
            grads = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]
        return Replica(variables, grads)

    def read_params(self, replica):
        return from_tf([v.numpy() for v in replica])

    def write_params(self, replica, params):
        for v, p in zip(replica, to_tf(params)):
            v.assign(p)

    def allreduce(self, data):
        with tf.device(data[0].device):
            total = tf.add_n([tf.identity(a) for a in data])
            data[0].assign(total)
        for a in data[1:]:
            with tf.device(a.device):
                a.assign(total)            # in place: every device's buffer gets the sum

    def split_batch(self, X, y, devices):
        n = len(devices)
        Xs, ys = tf.split(X, n), tf.split(y, n)
        out_X, out_y = [], []
        for a, b, d in zip(Xs, ys, devices):
            with tf.device(tf_device(d)):
                out_X.append(tf.identity(a))
                out_y.append(tf.identity(b))
        return out_X, out_y

    def _train_batch(self, X, y, replicas, devices, lr):
        X_shards, y_shards = self.split_batch(X, y, devices)
        losses = []
        for Xs, ys, r, d in zip(X_shards, y_shards, replicas, devices):
            with tf.device(tf_device(d)):
                with tf.GradientTape() as tape:
                    l = loss_sum(lenet(Xs, r), ys)
                for buf, g in zip(r.grads, tape.gradient(l, list(r))):
                    buf.assign(g)
                losses.append(l)
        for i in range(len(replicas[0])):
            self.allreduce([r.grads[i] for r in replicas])
        batch = tf.cast(tf.shape(X)[0], tf.float32)
        for r, d in zip(replicas, devices):
            with tf.device(tf_device(d)):
                for v, g in zip(r, r.grads):
                    v.assign_sub(lr * g / batch)
        with tf.device(tf_device(devices[0])):
            return tf.add_n(losses) / batch

    def train_batch(self, X, y, replicas, devices, lr):
        # one compiled graph per replica set (it closes over their variables)
        key = (tuple(id(r) for r in replicas), tuple(devices), lr)
        cache = self.__dict__.setdefault("_compiled", {})
        if key not in cache:
            fn = tf.function(lambda X, y: self._train_batch(X, y, replicas, devices, lr))
            cache[key] = (fn, replicas)    # keeping the replicas keeps their ids unique
        return cache[key][0](X, y)
