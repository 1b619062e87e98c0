"""The channels-last layout's conversions, NumPy to NumPy: HWIO conv filters (OIHW in the
common layout). TensorFlow's kernels and Keras's layers (on every backend) take it; each
model says how its own parameters convert (its CHANNELS_LAST, common/models/spec.py), so
that converting once at the edge keeps the common layout the one every oracle speaks."""
from __future__ import annotations

import numpy as np


def hwio(W):
    return np.asarray(W).transpose(2, 3, 1, 0)


def oihw(W):
    return np.asarray(W).transpose(3, 2, 0, 1)


def by_kind(params, kinds, convert) -> list[np.ndarray]:
    """Every conv weight (kind "conv_weight") converted, the rest as they are."""
    return [convert(p) if k == "conv_weight" else np.asarray(p) for p, k in zip(params, kinds)]
