"""d2l's Vision Transformer ("Transformers for Vision"), defined once: parameter shapes,
the shared initial weights, and a NumPy float64 reference of every forward and backward
op (the oracle every framework is held to). The model interface every file here answers
is common/models/spec.py.

As d2l writes it: a patch embedding (a convolution with kernel = stride = patch), a
learned class token and learned position embeddings, pre-norm encoder blocks (LayerNorm,
multi-head self-attention, residual; LayerNorm, dense, GELU, dense, residual), a final
LayerNorm of the class token and a dense head. GELU is the exact one (erf); no dropout:
an oracle cannot follow six frameworks' random streams, so every record says dropout 0.

Layout: images NCHW, the patch filter OIHW, dense weights (in, out), the attention's
projections three (Q, K, V) and the output's, each (width, width) without a bias (d2l's
use_bias=False), heads side by side in their columns.

The model owns its sizes (SIZES): "default", what a 2-core CPU trains in seconds to a
minute per epoch in every framework, kept against the wider and finer candidates beside
it by measurement; "d2l", the book's (96-pixel images, patch 16, width 512, MLP 2048,
8 heads, 2 blocks); "tiny", the checks' own. This module
is the default size; variant(size) builds the same model at another size.
"""
from __future__ import annotations

import functools
import math
import sys
from types import ModuleType

import numpy as np
from scipy.special import erf

from common import models
from common.models import costs, layouts

NUM_CLASSES = 10
CHANNELS = 1
LN_EPS = 1e-5                     # PyTorch's and Paddle's LayerNorm default, d2l's
# the position embeddings start at N(0, 1), d2l's PyTorch torch.randn (its JAX tab: flax's
# normal(), N(0, 0.01^2))
POS_SCALE = 1.0
INIT_SCALE = 0.01

# image: the side of the (square) image the model sees, in pixels (Fashion-MNIST's 28,
# or the data layer's resize); patch: its patches' side; width: each token's features;
# mlp: the hidden features of each block's MLP
# The default against wider and finer ones, measured (docs/results/cpu-2core-vit-sizes.md:
# 2 epochs, PyTorch and JAX, a 2-core Xeon): w128 gains 2.5 points of test accuracy at
# 1.7-1.8x the time, p4 1.6 points at 2.3-3.0x, p4w128 under 1.1 points at 5.4-5.5x, so
# the default stays (see docs/vit.md, "Sizes")
SIZES = {"default": {"image": 28, "patch": 7, "width": 64, "heads": 4, "blocks": 2, "mlp": 128},
         "w128": {"image": 28, "patch": 7, "width": 128, "heads": 4, "blocks": 2, "mlp": 256},
         "p4": {"image": 28, "patch": 4, "width": 64, "heads": 4, "blocks": 2, "mlp": 128},
         "p4w128": {"image": 28, "patch": 4, "width": 128, "heads": 4, "blocks": 2, "mlp": 256},
         "d2l": {"image": 96, "patch": 16, "width": 512, "heads": 8, "blocks": 2, "mlp": 2048},
         "tiny": {"image": 28, "patch": 14, "width": 8, "heads": 2, "blocks": 1, "mlp": 16}}

# one block's parameters, in the common order: (name, shape from width w and mlp m, kind)
_BLOCK = (("ln1.gamma", lambda w, m: (w,), "ln_gamma"), ("ln1.beta", lambda w, m: (w,), "ln_beta"),
          ("attn.q.weight", lambda w, m: (w, w), "dense_weight"),
          ("attn.k.weight", lambda w, m: (w, w), "dense_weight"),
          ("attn.v.weight", lambda w, m: (w, w), "dense_weight"),
          ("attn.out.weight", lambda w, m: (w, w), "dense_weight"),
          ("ln2.gamma", lambda w, m: (w,), "ln_gamma"), ("ln2.beta", lambda w, m: (w,), "ln_beta"),
          ("mlp.fc1.weight", lambda w, m: (w, m), "dense_weight"), ("mlp.fc1.bias", lambda w, m: (m,), "dense_bias"),
          ("mlp.fc2.weight", lambda w, m: (m, w), "dense_weight"), ("mlp.fc2.bias", lambda w, m: (w,), "dense_bias"))
PER_BLOCK = len(_BLOCK)


class SizeError(ValueError):
    pass


def check_size(size: dict) -> None:
    """One line for a size the model cannot take."""
    if size["image"] % size["patch"]:
        raise SizeError(f"vit: a {size['image']}-pixel image does not divide into "
                        f"{size['patch']}-pixel patches; choose a patch that divides it")
    if size["width"] % size["heads"]:
        raise SizeError(f"vit: {size['heads']} heads do not divide the width {size['width']}; "
                        "choose heads that divide it")


# --- the oracle: every op forward and backward, float64 ---

def _layernorm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    inv = 1.0 / np.sqrt(x.var(-1, keepdims=True) + LN_EPS)
    xhat = (x - mu) * inv
    return xhat * g + b, (xhat, inv)


def _layernorm_backward(dy, g, cache):
    xhat, inv = cache
    axes = tuple(range(dy.ndim - 1))
    dg, db = (dy * xhat).sum(axes), dy.sum(axes)
    dxhat = dy * g
    dx = inv * (dxhat - dxhat.mean(-1, keepdims=True)
                - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, dg, db


def gelu(x):
    """The exact GELU: x Phi(x)."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _gelu_grad(x):
    return 0.5 * (1.0 + erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def cross_entropy(logits, y):
    """Per-example softmax cross-entropy, computed stably."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(y)), y]


def _interface(size: dict) -> dict:
    """Every name of the model interface, for one size."""
    check_size(size)
    w, m, heads, L, p = size["width"], size["mlp"], size["heads"], size["blocks"], size["patch"]
    side = size["image"] // p
    tokens = side * side + 1                     # the patches and the class token
    dh = w // heads
    names, shapes, kinds = ["patch.weight", "patch.bias", "cls", "pos"], \
        [(w, CHANNELS, p, p), (w,), (w,), (tokens, w)], ["conv_weight", "conv_bias", "cls", "pos"]
    for i in range(L):
        for n, shape, kind in _BLOCK:
            names.append(f"block{i + 1}.{n}")
            shapes.append(shape(w, m))
            kinds.append(kind)
    names += ["head.ln.gamma", "head.ln.beta", "head.weight", "head.bias"]
    shapes += [(w,), (w,), (w, NUM_CLASSES), (NUM_CLASSES,)]
    kinds += ["ln_gamma", "ln_beta", "dense_weight", "dense_bias"]
    first = 4                                    # the first block's first parameter
    head = first + L * PER_BLOCK

    def init_params(seed: int, init: str) -> list[np.ndarray]:
        """Dense and patch weights as `init` says (common.models.INITS), biases and the
        class token zero, LayerNorm's scale one, the position embeddings N(0, POS_SCALE^2)."""
        rng = np.random.default_rng(seed)
        out = []
        for shape, kind in zip(shapes, kinds):
            if kind == "conv_weight":
                fan_in = CHANNELS * p * p
                out.append(models.weight(init, shape, fan_in, w * p * p, rng, INIT_SCALE))
            elif kind == "dense_weight":
                out.append(models.weight(init, shape, shape[0], shape[1], rng, INIT_SCALE))
            elif kind == "pos":
                out.append((rng.standard_normal(shape) * POS_SCALE).astype(np.float32))
            elif kind == "ln_gamma":
                out.append(np.ones(shape, np.float32))
            else:
                out.append(np.zeros(shape, np.float32))
        return out

    def patches(X):
        """(batch, patches, channels x patch x patch): the patch embedding's inputs, in
        the filter's (C, P, P) order, row by row."""
        n = len(X)
        X = np.asarray(X, np.float64).reshape(n, CHANNELS, side, p, side, p)
        return X.transpose(0, 2, 4, 1, 3, 5).reshape(n, side * side, CHANNELS * p * p)

    def split(x):                                # (n, t, w) -> (n, heads, t, dh)
        return x.reshape(len(x), tokens, heads, dh).transpose(0, 2, 1, 3)

    def merge(x):
        return x.transpose(0, 2, 1, 3).reshape(len(x), tokens, w)

    def _forward(params, X):
        P = [np.asarray(q, np.float64) for q in params]
        x = patches(X)
        emb = x @ P[0].reshape(w, -1).T + P[1]
        z = np.concatenate([np.broadcast_to(P[2], (len(x), 1, w)), emb], axis=1) + P[3]
        caches = []
        for i in range(L):
            g1, b1, Wq, Wk, Wv, Wo, g2, b2, W1, c1, W2, c2 = \
                P[first + i * PER_BLOCK: first + (i + 1) * PER_BLOCK]
            a, ln1 = _layernorm(z, g1, b1)
            q, k, v = split(a @ Wq), split(a @ Wk), split(a @ Wv)
            att = _softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh))
            o = merge(att @ v)
            z1 = z + o @ Wo
            a2, ln2 = _layernorm(z1, g2, b2)
            u = a2 @ W1 + c1
            h = gelu(u)
            z2 = z1 + h @ W2 + c2
            caches.append((z, a, ln1, q, k, v, att, o, z1, a2, ln2, u, h))
            z = z2
        c, lnh = _layernorm(z[:, 0], P[head], P[head + 1])
        logits = c @ P[head + 2] + P[head + 3]
        return logits, (P, x, caches, z, c, lnh)

    def forward(params, X, state=None, training=False):
        """Logits for images X (N, 1, image, image); no state, the same in both modes."""
        return _forward(params, X)[0]

    def loss_and_grads(params, X, y, state=None, unbiased_running_var=True):
        """Summed cross-entropy over the batch, the logits, and the gradient of the sum
        with respect to every parameter (float64). The ViT has no state to update."""
        logits, (P, x, caches, zL, c, lnh) = _forward(params, X)
        loss = cross_entropy(logits, y).sum()
        d = _softmax(logits)
        d[np.arange(len(y)), y] -= 1.0
        grads = [None] * len(P)
        grads[head + 2], grads[head + 3] = c.T @ d, d.sum(0)
        dc0, grads[head], grads[head + 1] = _layernorm_backward(d @ P[head + 2].T, P[head], lnh)
        dz = np.zeros_like(zL)
        dz[:, 0] = dc0
        for i in reversed(range(L)):
            at = first + i * PER_BLOCK
            g1, b1, Wq, Wk, Wv, Wo, g2, b2, W1, c1, W2, c2 = P[at:at + PER_BLOCK]
            z, a, ln1, q, k, v, att, o, z1, a2, ln2, u, h = caches[i]
            g = [None] * PER_BLOCK
            # MLP: z2 = z1 + gelu(LN(z1) W1 + c1) W2 + c2
            g[10], g[11] = np.einsum("ntm,ntw->mw", h, dz), dz.sum((0, 1))
            du = (dz @ W2.T) * _gelu_grad(u)
            g[8], g[9] = np.einsum("ntw,ntm->wm", a2, du), du.sum((0, 1))
            da2, g[6], g[7] = _layernorm_backward(du @ W1.T, g2, ln2)
            dz1 = dz + da2
            # attention: z1 = z + merge(softmax(q k^T / sqrt(dh)) v) Wo
            g[5] = np.einsum("ntw,ntv->wv", o, dz1)
            do = split(dz1 @ Wo.T)
            datt = do @ v.transpose(0, 1, 3, 2)
            dv = att.transpose(0, 1, 3, 2) @ do
            ds = att * (datt - (datt * att).sum(-1, keepdims=True)) / math.sqrt(dh)
            dq, dk = ds @ k, ds.transpose(0, 1, 3, 2) @ q
            da = np.zeros_like(a)
            for j, (dproj, W) in enumerate(((dq, Wq), (dk, Wk), (dv, Wv))):
                dproj = merge(dproj)
                g[2 + j] = np.einsum("ntw,ntv->wv", a, dproj)
                da += dproj @ W.T
            dzn, g[0], g[1] = _layernorm_backward(da, g1, ln1)
            dz = dz1 + dzn
            grads[at:at + PER_BLOCK] = g
        grads[3] = dz.sum(0)                     # the position embeddings
        grads[2] = dz[:, 0].sum(0)               # the class token
        demb = dz[:, 1:]
        grads[0] = np.einsum("npw,npk->wk", demb, x).reshape(shapes[0])
        grads[1] = demb.sum((0, 1))
        return loss, logits, grads

    # the multiply-adds per image of each unit, forward: what stage cuts balance
    block_macs = tokens * (4 * w * w + 2 * w * m) + 2 * heads * tokens * tokens * dh
    embed_macs, head_macs = side * side * w * CHANNELS * p * p, w * NUM_CLASSES
    units = [("embedding", (0, 1, 2, 3), (), (tokens, w))]
    units += [(f"block{i + 1}", tuple(range(first + i * PER_BLOCK, first + (i + 1) * PER_BLOCK)),
               (), (tokens, w)) for i in range(L)]
    units.append(("head", tuple(range(head, head + 4)), (), (NUM_CLASSES,)))
    layers = [costs.conv(CHANNELS, w, p, size["image"], side, first=True)]
    for _ in range(L):
        layers += [costs.layernorm(tokens * w), costs.dense(w, 3 * w, tokens),
                   costs.attention(heads, tokens, dh), costs.dense(w, w, tokens),
                   costs.elementwise("add", tokens * w, 1), costs.layernorm(tokens * w),
                   costs.dense(w, m, tokens), costs.elementwise("gelu", tokens * m, 1),
                   costs.dense(m, w, tokens), costs.elementwise("add", tokens * w, 1)]
    layers += [costs.layernorm(w), costs.dense(w, NUM_CLASSES), costs.loss(NUM_CLASSES)]
    # tensor mode (common/core/tensor.py, Megatron-LM): the axis each parameter is cut
    # along over the devices, None where every device holds it whole. Q, K, V and the
    # MLP's first layer by columns (the heads side by side; fc1's bias with its columns),
    # the attention's output projection and the MLP's second layer by rows
    cut_axes = [None] * len(names)
    for i in range(L):
        at = first + i * PER_BLOCK
        for j, axis in ((2, 1), (3, 1), (4, 1), (5, 0), (8, 1), (9, 0), (10, 0)):
            cut_axes[at + j] = axis

    def tensor_problem(k: int) -> str | None:
        """Why the model cannot be split k ways (one line), or None."""
        for what, n in (("heads", heads), ("MLP features", m)):
            if n % k:
                return (f"vit: tensor mode over {k} devices needs its {what} ({n}) divisible "
                        f"by {k}; choose --devices that divide {n}")
        return None

    return {
        "SIZE": dict(size), "TOKENS": tokens, "TENSOR_SPLIT": tuple(cut_axes),
        "tensor_problem": tensor_problem, "PARAM_NAMES": tuple(names),
        "PARAM_SHAPES": tuple(shapes), "PARAM_KINDS": tuple(kinds),
        "STATE_NAMES": (), "STATE_SHAPES": (),
        "IMAGE_SHAPE": (CHANNELS, size["image"], size["image"]),
        "init_params": init_params, "init_state": lambda: [], "forward": forward,
        "loss_and_grads": loss_and_grads,
        "TRAIN_FLOPS_PER_IMAGE": 3 * 2 * (embed_macs + L * block_macs + head_macs),
        "UNITS": tuple(units), "UNIT_COST": (embed_macs, *[block_macs] * L, head_macs),
        "LAYERS": tuple(layers),
        "CHANNELS_LAST": (lambda params: layouts.by_kind(params, kinds, layouts.hwio),
                          lambda params: layouts.by_kind(params, kinds, layouts.oihw)),
        "KEY_ORDER": tuple(range(len(names))),
    }


class Shape:
    """What a framework's ViT reads of a size (shape(name), once per size): widths, heads, the LayerNorm's
    epsilon, and where each unit's parameters start (the embedding's at 0, block i's at
    4 + i x PER_BLOCK, the head's after the blocks), so that its apply_units is its ops
    alone."""

    def __init__(self, name: str):
        m = models.get(name)
        s = m.SIZE
        self.width, self.heads, self.patch, self.mlp = s["width"], s["heads"], s["patch"], s["mlp"]
        self.head_width, self.blocks, self.tokens = s["width"] // s["heads"], s["blocks"], m.TOKENS
        self.eps, self.per_block = m.LN_EPS, m.PER_BLOCK
        self.head = 4 + self.blocks * self.per_block
        self.units = len(m.UNITS)

    def blocks_in(self, units: tuple[int, int]) -> list[int]:
        """The first parameter of each block among units lo..hi-1."""
        lo, hi = units
        return [4 + i * self.per_block for i in range(max(lo, 1) - 1, min(hi - 1, self.blocks))]

    def has_head(self, units: tuple[int, int]) -> bool:
        return units[1] == self.blocks + 2


@functools.cache
def shape(name: str) -> Shape:
    """The Shape of the ViT registered as `name`, made once: every unit of every step
    reads it."""
    return Shape(name)


NAME = FAMILY = "vit"             # FAMILY: what every size's ops are keyed by (models.family)
# d2l trains it with dropout 0.1; here none, in every record (see the module's docstring)
DROPOUT = 0.0
CHECK_MODEL = "vit_tiny"          # the conformance checks train the tiny size (the suite's time)
# The commands' defaults (see lenet.py): provisional, set from the default size's shape
# before issue 51's measurement of them on a 2-core CPU
COMMANDS = {"profile": {"batch": 64, "steps": 5},
            "settings": {"agree_steps": 5},
            "links": {"batch": 64, "compute_batches": (16, 64, 128),
                      "rates": ("10mbit", "100mbit", "1gbit", "unshaped"), "steps": 4},
            "pipeline": {"batch": 64, "steps": 5}}

globals().update(_interface(SIZES["default"]))


def variant(size: str) -> ModuleType:
    """This model at another of SIZES, as a model module of its own, named vit_<size> and
    registered: common.models.get takes it by that name in this process (a fresh one
    calls variant first)."""
    if size not in SIZES:
        raise SizeError(f"vit: unknown size {size!r}; choose from: {', '.join(SIZES)}")
    if size == "default":
        return sys.modules[__name__]
    m = ModuleType(f"{__name__}_{size}")
    shared = {k: v for k, v in globals().items() if not k.startswith("__")}
    m.__dict__.update(shared, **_interface(SIZES[size]), NAME=f"vit_{size}")
    return models.register(m)
