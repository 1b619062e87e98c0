"""Costs planted in one op class, per framework, for the profile's check
(tests/helpers/profile_checks.py): each a context manager that, inside the framework's process,
makes every ReLU of the model run REPEATS times over (an activation applied many times:
all of it activation time; more where one ReLU is too cheap for the check to see it above
a loaded machine's noise). Each is written so that a compiler cannot fold it away."""
from __future__ import annotations

import contextlib

# 100 for every framework. With 10, a plant of 4-6 ms sat within what another class moves
# by between two windows on an idle 2-core AMD EPYC (AVX-512), fresh-clone CI: MXNet
# 4.4 ms against conv backward +2.5, Keras on TensorFlow 6.4 ms against copies and layout
# +5.5. With 30, the suite on the same machine kind (the other test process compiling
# beside it) saw Paddle's +16.4 ms against conv backward +11.1. With 100 Paddle's plant
# is +53 to +54 ms (4 of 4 there, a busy loop beside it). XLA's ReLU on the CPU is one
# cheap fused pass: 10 of them (forward and backward) add about 2.5 ms to JAX's LeNet
# step of 32 images, 100 about 25 ms.
REPEATS = 100


@contextlib.contextmanager
def _repeated_relu(F):
    """F.relu (a functional module's) applied REPEATS times over while inside."""
    relu = F.relu

    def many(x, *args, **kwargs):
        for _ in range(REPEATS - 1):
            x = relu(x)
        return relu(x, *args, **kwargs)
    F.relu = many
    try:
        yield
    finally:
        F.relu = relu


def _torch_relu():
    import torch.nn.functional as F
    return _repeated_relu(F)


def _paddle_relu():
    # the models call F.relu through the module (frameworks/paddle/models.py), eagerly
    import paddle.nn.functional as F
    return _repeated_relu(F)


@contextlib.contextmanager
def _mxnet_relu():
    # F.relu of the models' own ops (scratch, model mode), imperative (mx.nd) and in a
    # hybridized graph (mx.sym), and gluon's Activation blocks (native: Conv2D and
    # Dense with activation="relu", nn.Activation), whose graph keeps every repeat
    import mxnet as mx
    from mxnet.gluon import nn
    originals = [(mx.nd, "relu", mx.nd.relu), (mx.sym, "relu", mx.sym.relu),
                 (nn.Activation, "hybrid_forward", nn.Activation.hybrid_forward)]

    def repeated(relu):
        def many(x, *args, **kwargs):
            for _ in range(REPEATS - 1):
                x = relu(x, *args, **kwargs)
            return relu(x, *args, **kwargs)
        return many
    act = nn.Activation.hybrid_forward

    def activation(self, F, x):
        for _ in range(REPEATS - 1):
            x = act(self, F, x)
        return act(self, F, x)
    mx.nd.relu, mx.sym.relu = repeated(mx.nd.relu), repeated(mx.sym.relu)
    nn.Activation.hybrid_forward = activation
    try:
        yield
    finally:
        for owner, name, value in originals:
            setattr(owner, name, value)


@contextlib.contextmanager
def _tf_relu():
    # tf.nn.relu as the models call it (looked up at each call, also while tracing)
    import tensorflow as tf
    relu = tf.nn.relu

    def many(x, name=None):
        for _ in range(REPEATS - 1):
            x = relu(x)
        return relu(x, name)
    tf.nn.relu = many
    try:
        yield
    finally:
        tf.nn.relu = relu


def _xla_loop(relu, repeats=REPEATS):
    """`relu` `repeats` times, the first alone (XLA fuses it with what precedes it, a bias,
    as it fuses a model's own ReLU) and the rest in a JAX fori_loop, with a custom VJP
    that is as many ReLU gradients, in a loop too: written plainly, XLA fuses the chained
    maxima into one elementwise pass and the plant costs nothing."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    @jax.custom_vjp
    def many(x):
        return lax.fori_loop(0, repeats - 1, lambda i, h: relu(h), relu(x))

    def forward(x):
        y = many(x)
        return y, y

    def backward(y, g):
        def grad(h):                  # ReLU's gradient, as JAX's own: a select
            return jnp.where(y > 0, h, 0.0)
        return (lax.fori_loop(0, repeats - 1, lambda i, h: grad(h), grad(g)),)
    many.defvjp(forward, backward)
    return many


@contextlib.contextmanager
def _jax_relu():
    """jax.nn.relu, which the models look up as they trace, REPEATS times over."""
    import jax
    relu = jax.nn.relu
    jax.nn.relu = _xla_loop(relu)
    try:
        yield
    finally:
        jax.nn.relu = relu


@contextlib.contextmanager
def _keras_relu():
    """The backend's relu that Keras's "relu" activation and ReLU layer call (looked up at
    each call, also while tracing), on each of Keras's backends."""
    from keras.src import backend
    relu = backend.nn.relu

    def chain(x):
        for _ in range(REPEATS):
            x = relu(x)
        return x
    backend.nn.relu = _xla_loop(relu) if backend.backend() == "jax" else chain
    try:
        yield
    finally:
        backend.nn.relu = relu


# framework -> the planted activation cost
ACTIVATION = {"pytorch": _torch_relu, "paddle": _paddle_relu, "mxnet": _mxnet_relu,
              "tensorflow": _tf_relu, "keras-tensorflow": _keras_relu,
              "keras-torch": _keras_relu, "keras-jax": _keras_relu, "jax": _jax_relu}
