"""Costs planted in one op class, per framework, for the profile's check
(tests/profile_checks.py): each a context manager that, inside the framework's process,
makes every ReLU of the model run REPEATS times over (an activation applied many times:
all of it activation time). Each is written so that a compiler cannot fold it away."""
from __future__ import annotations

import contextlib

REPEATS = 10


@contextlib.contextmanager
def _torch_relu():
    import torch.nn.functional as F
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


# framework -> the planted activation cost
ACTIVATION = {"pytorch": _torch_relu, "tensorflow": _tf_relu}
