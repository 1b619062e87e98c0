"""The device-scopes model (common.experiments.scopes) in TensorFlow: tf.device scopes, a
GradientTape, the LSTM cell in TensorFlow ops over tf.scan (see `sharing`)."""
import numpy as np
import tensorflow as tf

from common.experiments import scopes

from .devices import tf_device


class Scopes(scopes.Scopes):
    sharing = ("The shared LSTM's weights are tf.Variables created on branch a's device; "
               "branch b's ops (under its tf.device scope) read them there, so TensorFlow "
               "copies them to branch b's device in every step, and the tape's gradient of "
               "that read comes back to them. The LSTM cell is written in TensorFlow ops "
               "(gate order i, f, g, o, one bias: the common layout) over tf.scan: "
               "TensorFlow's own fused kernel tf.raw_ops.BlockLSTMV2 computes the forward "
               "pass right but its registered gradient does not match the oracle (off by "
               "about 100% of the largest bias gradient at T=8, measured). The step is one "
               "tf.function (forward, tape.gradient, assign_sub)")

    def build(self, params, placement):
        self.dev = placement.translated(tf_device)
        W_x, W_h, b, W, c = params
        with tf.device(self.dev["branch_a"]):
            self.lstm = [tf.Variable(v, name=n) for v, n in zip((W_x, W_h, b), scopes.PARAM_NAMES)]
        with tf.device(self.dev["merge"]):
            self.head = [tf.Variable(W, name="W"), tf.Variable(c, name="c")]
        self.vars = self.lstm + self.head
        self._grads = tf.function(self._forward_backward)
        self._step = tf.function(self._sgd_step)

    def load_params(self, params):
        for v, p in zip(self.vars, params):
            v.assign(p)

    def read_params(self):
        return [v.numpy() for v in self.vars]

    def _encode(self, X):
        """The shared LSTM's last hidden state for X (N, T, D), on the current device."""
        W_x, W_h, b = self.lstm
        pre = tf.einsum("ntd,dk->tnk", X, W_x) + b        # the input part of every step at once

        def cell(state, pre_t):
            h, c = state
            i, f, g, o = tf.split(pre_t + h @ W_h, 4, axis=1)
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            return tf.sigmoid(o) * tf.tanh(c), c

        zeros = tf.zeros(tf.stack([tf.shape(X)[0], scopes.H]))
        h, _ = tf.scan(cell, pre, initializer=(zeros, zeros))
        return h[-1]

    def _forward(self, Xa, Xb, y):
        with tf.device(self.dev["branch_a"]):
            ha = self._encode(Xa)
        with tf.device(self.dev["branch_b"]):
            hb = self._encode(Xb)
        with tf.device(self.dev["merge"]):
            W, c = self.head
            z = (tf.concat([ha, hb], axis=1) @ W + c)[:, 0]
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z))
        return loss, z, ha, hb

    def _forward_backward(self, Xa, Xb, y):
        with tf.GradientTape() as tape:
            loss, z, _, _ = self._forward(Xa, Xb, y)
        return loss, tf.sigmoid(z), tape.gradient(loss, self.vars)

    def _sgd_step(self, Xa, Xb, y, lr):
        loss, _, grads = self._forward_backward(Xa, Xb, y)
        for v, g in zip(self.vars, grads):
            v.assign_sub(lr * g)
        return loss

    def _inputs(self, Xa, Xb, y):
        # the batch starts on the merge device (the host), as a NumPy batch does
        with tf.device(self.dev["merge"]):
            return [tf.constant(np.asarray(v, np.float32)) for v in (Xa, Xb, y)]

    def forward_backward(self, Xa, Xb, y):
        loss, p, grads = self._grads(*self._inputs(Xa, Xb, y))
        return p.numpy(), float(loss), [g.numpy() for g in grads]

    def step(self, Xa, Xb, y, lr):
        return self._step(*self._inputs(Xa, Xb, y), tf.constant(lr, tf.float32))

    def parts(self, Xa, Xb):
        # eagerly: a tf.function's outputs all come back on the caller's device
        _, z, ha, hb = self._forward(*self._inputs(Xa, Xb, np.zeros(len(Xa), np.float32)))
        return ha, hb, z, self.lstm[0]
