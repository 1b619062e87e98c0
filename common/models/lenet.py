"""The chapter's LeNet, defined once: parameter shapes, the shared initial weights,
and a NumPy reference of the forward and backward pass (the oracle every framework
is tested against). The model API every file in common/models follows is in
common/models/__init__.py.

Layout is the chapter's (PyTorch/MXNet): images NCHW, conv weights OIHW, dense
weights (in, out). Frameworks with other layouts convert at their edge.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from common import models
from common.models import costs, layouts

NAME = CHECK_MODEL = "lenet"     # its checks train it as it is
DROPOUT = 0.0                     # the chapter's has none
PARAM_NAMES = ("W1", "b1", "W2", "b2", "W3", "b3", "W4", "b4")
PARAM_SHAPES = ((20, 1, 3, 3), (20,), (50, 20, 5, 5), (50,),
                (800, 128), (128,), (128, 10), (10,))
STATE_NAMES: tuple = ()           # no BatchNorm: nothing but the parameters
STATE_SHAPES: tuple = ()
NUM_CLASSES = 10
IMAGE_SHAPE = (1, 28, 28)
INIT_SCALE = 0.01
# multiply-adds x 2 of the forward pass (conv1 26x26x20x9, conv2 9x9x50x500, two dense),
# and about twice that again for the backward pass
TRAIN_FLOPS_PER_IMAGE = 3 * 2 * (26 * 26 * 20 * 9 + 9 * 9 * 50 * 500 + 800 * 128 + 128 * 10)
# The units a pipeline (model mode) may cut between, in forward order: (name, parameter
# indices, state indices, output shape per image in the common NCHW layout). LeNet has
# two: the conv block (W1..b2) and the dense block (W3..b4), so 2 stages at most.
UNITS = (("conv block", (0, 1, 2, 3), (), (50, 4, 4)),
         ("dense block", (4, 5, 6, 7), (), (NUM_CLASSES,)))
UNIT_COST = (1, 1)                # two units: any cost gives the one cut
# The layers in forward order (common/models/costs.py counts a step's FLOPs and bytes
# per op class from them): conv 3x3 -> ReLU -> avg-pool 2, conv 5x5 -> ReLU -> avg-pool
# 2, dense -> ReLU, dense, softmax cross-entropy
# The commands' defaults for this model (a new model brings its own; benchmarks/ holds
# none): profile, compare's batch and steps enough for a stable window; links, each
# node's batch, the compute batches and the rates (two slow ones, so that the predictor
# fitted at one is validated at the other) and steps per epoch; pipeline, the batch and
# steps per epoch (2 epochs, the second timed)
COMMANDS = {"profile": {"batch": 256, "steps": 10},
            # benchmarks.settings holds a setting's first 10 step losses to the defaults'
            "settings": {"agree_steps": 10},
            "links": {"batch": 128, "compute_batches": (32, 128, 512),
                      "rates": ("10mbit", "100mbit", "1gbit", "unshaped"), "steps": 8},
            "pipeline": {"batch": 256, "steps": 20}}
LAYERS = (costs.conv(1, 20, 3, 28, 26, first=True), costs.elementwise("activation", 20, 26),
          costs.pool(20, 26, 13, 2),
          costs.conv(20, 50, 5, 13, 9), costs.elementwise("activation", 50, 9),
          costs.pool(50, 9, 4, 2),
          costs.dense(800, 128), costs.elementwise("activation", 128, 1),
          costs.dense(128, 10), costs.loss(NUM_CLASSES))

# a layered network registers LeNet's parameters in the common order
KEY_ORDER = tuple(range(len(PARAM_NAMES)))


def _channels_last(params):
    """Conv filters HWIO, and the first dense weight's rows in the (H, W, C) order of a
    channels-last flatten."""
    W1, b1, W2, b2, W3, b3, W4, b4 = [np.asarray(p) for p in params]
    c, h, w = UNITS[0][3]             # channels, height, width before the flatten
    W3 = W3.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(W3.shape)
    return [layouts.hwio(W1), b1, layouts.hwio(W2), b2, W3, b3, W4, b4]


def _channels_first(params):
    W1, b1, W2, b2, W3, b3, W4, b4 = [np.asarray(p) for p in params]
    c, h, w = UNITS[0][3]
    W3 = W3.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(W3.shape)
    return [layouts.oihw(W1), b1, layouts.oihw(W2), b2, W3, b3, W4, b4]


CHANNELS_LAST = (_channels_last, _channels_first)


def init_params(seed: int, init: str) -> list[np.ndarray]:
    """Weights as `init` says (common.models.INITS; the chapter's: N(0, 1) x 0.01),
    biases zero, float32."""
    rng = np.random.default_rng(seed)
    out = []
    for s in PARAM_SHAPES:
        if len(s) == 4:      # conv OIHW
            out.append(models.weight(init, s, s[1] * s[2] * s[3], s[0] * s[2] * s[3], rng, INIT_SCALE))
        elif len(s) == 2:    # dense (in, out)
            out.append(models.weight(init, s, s[0], s[1], rng, INIT_SCALE))
        else:
            out.append(np.zeros(s, np.float32))
    return out


def init_state() -> list[np.ndarray]:
    return []


# --- NumPy reference (float64 inside, so that it is the more exact side) ---

def _windows(X, k):
    """Every k x k window of X (N,C,H,W) as a row: (N*Ho*Wo, C*k*k), im2col."""
    n, c = X.shape[:2]
    cols = sliding_window_view(X, (k, k), axis=(2, 3))            # N,C,Ho,Wo,k,k
    ho, wo = cols.shape[2:4]
    return cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, c * k * k), (ho, wo)


def _conv(X, W, b):
    o, k = W.shape[0], W.shape[-1]
    rows, (ho, wo) = _windows(X, k)
    out = rows @ W.reshape(o, -1).T                                # one GEMM (float64 BLAS)
    return out.reshape(len(X), ho, wo, o).transpose(0, 3, 1, 2) + b[None, :, None, None]


def _conv_backward(X, W, dout, need_dx):
    o, c, k = W.shape[0], W.shape[1], W.shape[-1]
    rows, _ = _windows(X, k)
    d2 = dout.transpose(0, 2, 3, 1).reshape(-1, o)                 # (N*Ho*Wo, O)
    dW = (d2.T @ rows).reshape(W.shape)
    db = dout.sum(axis=(0, 2, 3))
    if not need_dx:
        return None, dW, db
    # col2im: each window's gradient (a row of d2 @ W) added back where the window lay
    ho, wo = dout.shape[2:]
    dcols = (d2 @ W.reshape(o, -1)).reshape(len(X), ho, wo, c, k, k)
    dX = np.zeros(X.shape)
    for i in range(k):
        for j in range(k):
            dX[:, :, i:i + ho, j:j + wo] += dcols[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return dX, dW, db


def _avgpool(X):
    n, c, h, w = X.shape
    ho, wo = h // 2, w // 2                                        # floor, as every framework
    return X[:, :, :2 * ho, :2 * wo].reshape(n, c, ho, 2, wo, 2).mean(axis=(3, 5))


def _avgpool_backward(X_shape, dout):
    dX = np.zeros(X_shape)
    ho, wo = dout.shape[2:]
    dX[:, :, :2 * ho, :2 * wo] = np.repeat(np.repeat(dout, 2, axis=2), 2, axis=3) / 4.0
    return dX


def forward(params, X, state=None, training=False):
    """Logits of the chapter's LeNet for images X (N,1,28,28); no state, no mode."""
    return _forward(params, X)[0]


def _forward(params, X):
    W1, b1, W2, b2, W3, b3, W4, b4 = (np.asarray(p, np.float64) for p in params)
    X = np.asarray(X, np.float64)
    c1 = _conv(X, W1, b1); a1 = np.maximum(c1, 0); h1 = _avgpool(a1)
    c2 = _conv(h1, W2, b2); a2 = np.maximum(c2, 0); h2 = _avgpool(a2)
    f = h2.reshape(len(X), -1)
    z3 = f @ W3 + b3; h3 = np.maximum(z3, 0)
    logits = h3 @ W4 + b4
    return logits, (X, c1, a1, h1, c2, a2, h2, f, z3, h3)


def cross_entropy(logits, y):
    """Per-example softmax cross-entropy, computed stably."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(y)), y]


def loss_and_grads(params, X, y, state=None, unbiased_running_var=True):
    """Summed cross-entropy over the batch, the logits, and the gradient of the sum
    with respect to every parameter (float64). LeNet has no state to update."""
    W1, b1, W2, b2, W3, b3, W4, b4 = (np.asarray(p, np.float64) for p in params)
    logits, (X, c1, a1, h1, c2, a2, h2, f, z3, h3) = _forward(params, X)
    loss = cross_entropy(logits, y).sum()
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    dlogits = p / p.sum(axis=1, keepdims=True)
    dlogits[np.arange(len(y)), y] -= 1.0
    dW4 = h3.T @ dlogits; db4 = dlogits.sum(0)
    dz3 = (dlogits @ W4.T) * (z3 > 0)
    dW3 = f.T @ dz3; db3 = dz3.sum(0)
    dh2 = (dz3 @ W3.T).reshape(h2.shape)
    dc2 = _avgpool_backward(a2.shape, dh2) * (c2 > 0)
    dh1, dW2, db2 = _conv_backward(h1, W2, dc2, need_dx=True)
    dc1 = _avgpool_backward(a1.shape, dh1) * (c1 > 0)
    _, dW1, db1 = _conv_backward(X, W1, dc1, need_dx=False)
    return loss, logits, [dW1, db1, dW2, db2, dW3, db3, dW4, db4]
