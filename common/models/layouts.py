"""The channels-last layout of the models' parameters, NumPy to NumPy: HWIO conv filters
(OIHW in the common layout) and, for LeNet, the flattened features in (H, W, C) order
(so its first dense weight's rows are permuted). TensorFlow's kernels and Keras's layers
(on every backend) take it; converting once at the edge keeps the common layout the one
every oracle speaks."""
from __future__ import annotations

import numpy as np

from common.models import lenet, resnet18


def hwio(W):
    return W.transpose(2, 3, 1, 0)


def oihw(W):
    return W.transpose(3, 2, 0, 1)


def _lenet_last(params):
    W1, b1, W2, b2, W3, b3, W4, b4 = [np.asarray(p) for p in params]
    c, h, w = lenet.UNITS[0][3]             # channels, height, width before the flatten
    W3 = W3.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(W3.shape)
    return [hwio(W1), b1, hwio(W2), b2, W3, b3, W4, b4]


def _lenet_first(params):
    W1, b1, W2, b2, W3, b3, W4, b4 = [np.asarray(p) for p in params]
    c, h, w = lenet.UNITS[0][3]
    W3 = W3.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(W3.shape)
    return [oihw(W1), b1, oihw(W2), b2, W3, b3, W4, b4]


def _resnet_last(params):
    return [hwio(np.asarray(p)) if k == "conv_weight" else np.asarray(p)
            for p, k in zip(params, resnet18.PARAM_KINDS)]


def _resnet_first(params):
    return [oihw(np.asarray(p)) if k == "conv_weight" else np.asarray(p)
            for p, k in zip(params, resnet18.PARAM_KINDS)]


# model name -> (common -> channels-last, channels-last -> common)
CHANNELS_LAST = {"lenet": (_lenet_last, _lenet_first), "resnet18": (_resnet_last, _resnet_first)}
