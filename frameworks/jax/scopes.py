"""The device-scopes model (common.experiments.scopes) in JAX: jax.device_put placements,
each part a jax.jit function run where its inputs live, jax.value_and_grad over them."""
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from common.experiments import scopes

from .devices import jax_device
from .models import sgd_update

# full float32 products: XLA's default on GPUs rounds float32 matmuls to TF32
_dot = partial(jnp.dot, precision=jax.lax.Precision.HIGHEST)


@jax.jit
def _encode(lstm, X):
    """The shared LSTM's last hidden state for X (N, T, D), from zero states."""
    W_x, W_h, b = lstm
    pre = jnp.einsum("ntd,dk->tnk", X, W_x, precision=jax.lax.Precision.HIGHEST) + b

    def cell(state, pre_t):
        h, c = state
        i, f, g, o = jnp.split(pre_t + _dot(h, W_h), 4, axis=1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return (jax.nn.sigmoid(o) * jnp.tanh(c), c), None

    zeros = jnp.zeros((X.shape[0], W_h.shape[0]), X.dtype)
    (h, _), _ = jax.lax.scan(cell, (zeros, zeros), pre)
    return h


@jax.jit
def _head(head, ha, hb, y):
    """The merge: logits of Dense(1) on concat(h_a, h_b), mean binary cross-entropy."""
    W, c = head
    z = (_dot(jnp.concatenate([ha, hb], axis=1), W) + c)[:, 0]
    return jnp.mean(jax.nn.softplus(z) - y * z), z


_sgd = jax.jit(sgd_update)


class Scopes(scopes.Scopes):
    sharing = ("The shared LSTM's weights are jax.Arrays put on branch a's device. Branch b "
               "runs on a copy made with jax.device_put onto its device in every step, inside "
               "the differentiated function, so jax.value_and_grad transposes that device_put "
               "into a copy of branch b's gradient back onto branch a's device, where it is "
               "added to branch a's (on one device device_put returns an array on the same "
               "buffer: nothing is copied). The step is eager: a jitted function's inputs must all "
               "be on one device set, so each part is its own jax.jit (the LSTM in jax.numpy "
               "over jax.lax.scan, gate order i, f, g, o, one bias; the head and loss; the "
               "SGD update per device), compiled for and run on its inputs' device, and "
               "value_and_grad is traced over them in Python every step, the encodings "
               "device_put onto the merge device. Products at Precision.HIGHEST (float32, "
               "no TF32 on GPUs)")

    def build(self, params, placement):
        self.dev = placement.translated(jax_device)
        self.load_params(params)
        self._grads = jax.value_and_grad(self._loss, argnums=(0, 1), has_aux=True)

    def load_params(self, params):
        W_x, W_h, b, W, c = (np.asarray(p, np.float32) for p in params)
        self.lstm = jax.device_put([W_x, W_h, b], self.dev["branch_a"])
        self.head = jax.device_put([W, c], self.dev["merge"])

    def read_params(self):
        return [np.array(p) for p in self.lstm + self.head]

    def _branch_b_weights(self, lstm):
        """Branch b's copy of the shared LSTM weights, on its device; differentiated
        through, so its gradient is copied back onto the originals' device."""
        return jax.device_put(lstm, self.dev["branch_b"])

    def _loss(self, lstm, head, Xa, Xb, y):
        merge = self.dev["merge"]
        ha = _encode(lstm, Xa)                                  # on branch a
        hb = _encode(self._branch_b_weights(lstm), Xb)          # on branch b
        loss, z = _head(head, jax.device_put(ha, merge), jax.device_put(hb, merge), y)
        return loss, (z, ha, hb)

    def _inputs(self, Xa, Xb, y):
        # from the host (NumPy) straight onto each part's device
        return (jax.device_put(np.asarray(Xa, np.float32), self.dev["branch_a"]),
                jax.device_put(np.asarray(Xb, np.float32), self.dev["branch_b"]),
                jax.device_put(np.asarray(y, np.float32), self.dev["merge"]))

    def forward_backward(self, Xa, Xb, y):
        (loss, (z, _, _)), (g_lstm, g_head) = self._grads(self.lstm, self.head,
                                                          *self._inputs(Xa, Xb, y))
        return (np.asarray(jax.nn.sigmoid(z)), float(loss),
                [np.array(g) for g in list(g_lstm) + list(g_head)])

    def step(self, Xa, Xb, y, lr):
        (loss, _), (g_lstm, g_head) = self._grads(self.lstm, self.head, *self._inputs(Xa, Xb, y))
        self.lstm = _sgd(self.lstm, g_lstm, lr)       # on branch a's device
        self.head = _sgd(self.head, g_head, lr)       # on the merge device
        self.backend.note([loss, *self.lstm, *self.head])
        return loss

    def parts(self, Xa, Xb):
        _, (z, ha, hb) = self._loss(self.lstm, self.head,
                                    *self._inputs(Xa, Xb, np.zeros(len(Xa), np.float32)))
        return ha, hb, z, self.lstm[0]
