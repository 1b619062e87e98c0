"""The chapter's ResNet-18, defined once: the parameter list, the shared initial
weights, and a NumPy reference of the forward and backward pass, BatchNorm
included (the oracle every framework is tested against). The model API is in
common/models/__init__.py.

The network is d2l's "slightly modified" ResNet-18 for 28x28 Fashion-MNIST, no
resizing: conv 3x3 (1 -> 64, stride 1, pad 1) -> BatchNorm -> ReLU (no max-pool);
four stages of two residual blocks (64, 128, 256, 512 channels); global average
pooling; dense 512 -> 10. A residual block is d2l's Residual:
    Y = relu(bn1(conv1(X)));  Y = bn2(conv2(Y));  out = relu(Y + shortcut(X))
with conv1 3x3 (stride s, pad 1), conv2 3x3 (pad 1), and shortcut a 1x1 conv of
stride 2 in the first block of stages 2-4 (no BatchNorm on it), else the identity.
Every conv has a bias, as in the book. Spatial sizes: 28, 28, 14, 7, 4.

That is the default size; SIZES holds another, "tiny" (`--model resnet18_tiny`): two
stages of 16 and 32 channels, the same kinds of layers, which the conformance checks
train (CHECK_MODEL). variant() runs this file again with the size's STAGES, so every
name below is that size's.

Layout as LeNet's (PyTorch/MXNet): images NCHW, conv weights OIHW, dense weights
(in, out). Parameters are listed in the order a forward pass meets them.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from common import models
from common.models import costs, layouts

# The model's sizes: "default", the chapter's ResNet-18; "tiny", what the conformance
# checks train (CHECK_MODEL): the same layers (the stem, identity blocks, a strided block
# with its 1x1 shortcut, BatchNorm, pooling and the dense head) in two stages of 16 and 32
# channels. What those checks pay for is compilation (torch.compile's kernels, XLA's
# programs and JAX's op-by-op primitives), which follows the count of distinct layers,
# not their width (docs/testing.md, "How long it takes").
SIZES = {"default": ((64, 1), (128, 2), (256, 2), (512, 2)),    # (channels, first stride)
         "tiny": ((16, 1), (32, 2))}
_SIZE = globals().get("_SIZE", "default")     # variant() sets it before it runs this file
NAME = "resnet18" if _SIZE == "default" else f"resnet18_{_SIZE}"
FAMILY = "resnet18"               # what every size's ops are keyed by (models.family)
CHECK_MODEL = "resnet18_tiny"
DROPOUT = 0.0                     # the chapter's has none
NUM_CLASSES = 10
IMAGE_SHAPE = (1, 28, 28)
INIT_SCALE = 0.01
BN_EPS = 1e-5
# PyTorch's convention: running = (1 - BN_MOMENTUM) * running + BN_MOMENTUM * batch.
# Keras/TensorFlow, MXNet gluon and Paddle weight the old value instead: momentum 0.9.
BN_MOMENTUM = 0.1
STAGES = SIZES[_SIZE]


def _build():
    """The parameter and state lists, and a structure that framework code walks to
    build the network from the flat lists: STEM, BLOCKS and FC map each role to its
    index in PARAM_NAMES (params) or STATE_NAMES (state)."""
    names, shapes, kinds, state_names, state_shapes = [], [], [], [], []

    def conv(prefix, cin, cout, k):
        names.extend([f"{prefix}.weight", f"{prefix}.bias"])
        shapes.extend([(cout, cin, k, k), (cout,)])
        kinds.extend(["conv_weight", "conv_bias"])
        return {"weight": len(names) - 2, "bias": len(names) - 1}

    def bn(prefix, c):
        names.extend([f"{prefix}.gamma", f"{prefix}.beta"])
        shapes.extend([(c,), (c,)])
        kinds.extend(["bn_gamma", "bn_beta"])
        state_names.extend([f"{prefix}.running_mean", f"{prefix}.running_var"])
        state_shapes.extend([(c,), (c,)])
        return {"gamma": len(names) - 2, "beta": len(names) - 1,
                "mean": len(state_names) - 2, "var": len(state_names) - 1}

    width = STAGES[0][0]
    stem = {"conv": conv("stem.conv", IMAGE_SHAPE[0], width, 3), "bn": bn("stem.bn", width)}
    blocks, cin = [], width
    for s, (cout, stride) in enumerate(STAGES, start=1):
        for b in (1, 2):
            name = f"stage{s}.block{b}"
            first = b == 1 and s > 1
            block = {"name": name, "in": cin, "out": cout, "stride": stride if first else 1,
                     "conv1": conv(f"{name}.conv1", cin, cout, 3), "bn1": bn(f"{name}.bn1", cout),
                     "conv2": conv(f"{name}.conv2", cout, cout, 3), "bn2": bn(f"{name}.bn2", cout),
                     "shortcut": conv(f"{name}.shortcut", cin, cout, 1) if first else None}
            blocks.append(block)
            cin = cout
    names.extend(["fc.weight", "fc.bias"])
    shapes.extend([(cin, NUM_CLASSES), (NUM_CLASSES,)])
    kinds.extend(["dense_weight", "dense_bias"])
    fc = {"weight": len(names) - 2, "bias": len(names) - 1}
    return (tuple(names), tuple(shapes), tuple(kinds), tuple(state_names), tuple(state_shapes),
            stem, blocks, fc)


(PARAM_NAMES, PARAM_SHAPES, PARAM_KINDS, STATE_NAMES, STATE_SHAPES,
 STEM, BLOCKS, FC) = _build()
# STEM = {"conv": {"weight": i, "bias": i}, "bn": {"gamma": i, "beta": i, "mean": j, "var": j}}
# BLOCKS[k] = {"name", "in", "out", "stride", "conv1", "bn1", "conv2", "bn2",
#              "shortcut": {"weight": i, "bias": i} or None}          (i: params, j: state)
# FC = {"weight": i, "bias": i}


def _units():
    """The units a pipeline (model mode) may cut between, in forward order: the stem,
    each residual block, the head (pooling and FC). Each: (name, parameter indices,
    state indices, output shape per image)."""
    def slots(*layers):
        ps = [i for layer in layers if layer for k, i in layer.items() if k in ("weight", "bias", "gamma", "beta")]
        ss = [i for layer in layers if layer for k, i in layer.items() if k in ("mean", "var")]
        return tuple(sorted(ps)), tuple(sorted(ss))
    units, h = [("stem", *slots(STEM["conv"], STEM["bn"]), (STAGES[0][0], IMAGE_SHAPE[1], IMAGE_SHAPE[2]))], IMAGE_SHAPE[1]
    for b in BLOCKS:
        h = _spatial(h, b["stride"])
        units.append((b["name"], *slots(b["conv1"], b["bn1"], b["conv2"], b["bn2"], b["shortcut"]),
                      (b["out"], h, h)))
    units.append(("head", *slots(FC), (NUM_CLASSES,)))
    return tuple(units)


def walk(X, conv, bn, relu, units=None):
    """The network written once for every framework's ops: conv(x, slots, stride, pad)
    and bn(x, slots) close over the framework's parameter and state lists (slots as in
    STEM/BLOCKS), relu is the framework's. Returns the last block's feature maps;
    the framework pools them and applies FC. units=(lo, hi): only the units lo..hi-1
    of UNITS (a pipeline stage; X is then unit lo-1's output), head excluded."""
    lo, hi = units or (0, HEAD)
    h = relu(bn(conv(X, STEM["conv"], 1, 1), STEM["bn"])) if lo == 0 else X
    for b in BLOCKS[max(lo, 1) - 1: max(min(hi, HEAD) - 1, 0)]:
        y = relu(bn(conv(h, b["conv1"], b["stride"], 1), b["bn1"]))
        y = bn(conv(y, b["conv2"], 1, 1), b["bn2"])
        h = relu(y + (conv(h, b["shortcut"], b["stride"], 0) if b["shortcut"] else h))
    return h


def layer_slots(stem, blocks, fc, bn_names):
    """A layered ResNet-18's parameters and state objects in the order of PARAM_NAMES
    and STATE_NAMES. stem: (conv, bn); blocks: (conv1, bn1, conv2, bn2, shortcut conv
    or None) per block; fc: the dense layer; conv and dense layers hold .weight and
    .bias, and bn_names names a BatchNorm layer's scale, shift, mean and variance."""
    ps, ss = [None] * len(PARAM_NAMES), [None] * len(STATE_NAMES)

    def put(conv, bn, c, i):
        ps[c["weight"]], ps[c["bias"]] = conv.weight, conv.bias
        if bn is not None:
            ps[i["gamma"]], ps[i["beta"]], ss[i["mean"]], ss[i["var"]] = (
                getattr(bn, n) for n in bn_names)

    put(*stem, STEM["conv"], STEM["bn"])
    for (conv1, bn1, conv2, bn2, short), b in zip(blocks, BLOCKS):
        put(conv1, bn1, b["conv1"], b["bn1"])
        put(conv2, bn2, b["conv2"], b["bn2"])
        if b["shortcut"]:
            put(short, None, b["shortcut"], None)
    ps[FC["weight"]], ps[FC["bias"]] = fc.weight, fc.bias
    return ps, ss


def _spatial(h, stride):
    return (h + 2 - 3) // stride + 1


def _unit_macs() -> list[int]:
    """Multiply-adds per image of the forward pass of each unit of UNITS (the stem, each
    block's convs, the dense layer)."""
    h = IMAGE_SHAPE[1]
    macs = [h * h * STAGES[0][0] * IMAGE_SHAPE[0] * 9]
    for block in BLOCKS:
        ho = _spatial(h, block["stride"])
        m = ho * ho * block["out"] * block["in"] * 9 + ho * ho * block["out"] * block["out"] * 9
        if block["shortcut"]:
            m += ho * ho * block["out"] * block["in"]
        macs.append(m)
        h = ho
    macs.append(STAGES[-1][0] * NUM_CLASSES)
    return macs


def _train_flops_per_image() -> int:
    """Multiply-adds x 2 of the forward pass over every conv and the dense layer, times 3
    for a training step (the backward pass costs about twice the forward)."""
    return 3 * 2 * sum(_unit_macs())


TRAIN_FLOPS_PER_IMAGE = _train_flops_per_image()      # about 2.7 GFLOP

UNITS = _units()              # stem, stage1.block1 .. stage4.block2, head
HEAD = len(UNITS) - 1         # the head's unit: global average pooling and FC
UNIT_COST = tuple(_unit_macs())


def _layers() -> tuple[dict, ...]:
    """The layers in forward order (common/models/costs.py), read off the network itself:
    walk() run once on shapes instead of tensors."""
    layers = []

    class Shape:                  # one image's tensor: channels x h x h
        def __init__(self, c, h):
            self.c, self.h = c, h

        def __add__(self, other):           # the residual connection
            layers.append(costs.elementwise("add", self.c, self.h))
            return Shape(self.c, self.h)

    def conv(x, slots, stride, pad):
        cout, cin, k, _ = PARAM_SHAPES[slots["weight"]]
        h = (x.h + 2 * pad - k) // stride + 1
        layers.append(costs.conv(cin, cout, k, x.h, h, first=not layers))
        return Shape(cout, h)

    def bn(x, slots):
        layers.append(costs.elementwise("batchnorm", x.c, x.h))
        return x

    def relu(x):
        layers.append(costs.elementwise("activation", x.c, x.h))
        return x

    h = walk(Shape(IMAGE_SHAPE[0], IMAGE_SHAPE[1]), conv, bn, relu)
    layers += [costs.pool(h.c, h.h, 1, h.h), costs.dense(h.c, NUM_CLASSES), costs.loss(NUM_CLASSES)]
    return tuple(layers)


# The commands' defaults for this model (see lenet.py): profile, a batch a 2-core CPU
# steps in about a second; links, two slow rates (its 45 MB of gradients take 36 s a
# step at 10 Mbit/s, 8 s at 50, against 1.7-6.6 s of compute); pipeline
COMMANDS = {"profile": {"batch": 32, "steps": 3},
            # benchmarks.settings holds a setting's first 2 step losses to the defaults':
            # from the third on, the float32 trajectory parts (the defaults of PyTorch,
            # TensorFlow, MXNet and Paddle, each held to the oracle, 6e-4 to 3e-3 apart at
            # the third, 3-10 % by the fifth, from the same Glorot weights and batches:
            # docs/results/cpu-2core-best-resnet18.md)
            "settings": {"agree_steps": 2},
            "links": {"batch": 32, "compute_batches": (8, 32, 64),
                      "rates": ("50mbit", "100mbit", "1gbit", "unshaped"), "steps": 3},
            "pipeline": {"batch": 32, "steps": 3}}
LAYERS = _layers()
# conv filters HWIO in the channels-last layout, the rest as they are
CHANNELS_LAST = (lambda params: layouts.by_kind(params, PARAM_KINDS, layouts.hwio),
                 lambda params: layouts.by_kind(params, PARAM_KINDS, layouts.oihw))


def _key_order() -> tuple[int, ...]:
    """The parameters as a layered network registers them (gluon's KVStore keys): each
    Residual block its conv1, conv2 and shortcut, then bn1 and bn2 (the attributes' order
    in its __init__); the common order puts each bn after its conv."""
    order = [*STEM["conv"].values(), STEM["bn"]["gamma"], STEM["bn"]["beta"]]
    for b in BLOCKS:
        for conv in (b["conv1"], b["conv2"], b["shortcut"]):
            if conv:
                order += [conv["weight"], conv["bias"]]
        order += [b["bn1"]["gamma"], b["bn1"]["beta"], b["bn2"]["gamma"], b["bn2"]["beta"]]
    return tuple(order + [FC["weight"], FC["bias"]])


KEY_ORDER = _key_order()


def init_params(seed: int, init: str) -> list[np.ndarray]:
    """Conv and dense weights as `init` says (common.models.INITS; the chapter's:
    N(0, 0.01^2)), biases zero, BatchNorm scale 1 and shift 0; float32."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, kind in zip(PARAM_SHAPES, PARAM_KINDS):
        if kind == "conv_weight":     # OIHW
            field = int(np.prod(shape[2:]))
            out.append(models.weight(init, shape, shape[1] * field, shape[0] * field, rng,
                                     INIT_SCALE))
        elif kind == "dense_weight":  # (in, out)
            out.append(models.weight(init, shape, shape[0], shape[1], rng, INIT_SCALE))
        elif kind == "bn_gamma":
            out.append(np.ones(shape, np.float32))
        else:
            out.append(np.zeros(shape, np.float32))
    return out


def init_state() -> list[np.ndarray]:
    """Running means 0, running variances 1."""
    return [np.zeros(s, np.float32) if n.endswith("mean") else np.ones(s, np.float32)
            for n, s in zip(STATE_NAMES, STATE_SHAPES)]


# --- NumPy reference (float64 inside, so that it is the more exact side) ---

def _windows(X, k, stride, pad):
    if pad:
        X = np.pad(X, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return sliding_window_view(X, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]  # N,C,Ho,Wo,k,k


def _conv(X, W, b, stride, pad):
    cols = _windows(X, W.shape[-1], stride, pad)
    out = np.tensordot(cols, W, axes=([1, 4, 5], [1, 2, 3]))                     # N,Ho,Wo,O
    return out.transpose(0, 3, 1, 2) + b[None, :, None, None]


def _conv_backward(X, W, dout, stride, pad):
    k = W.shape[-1]
    cols = _windows(X, k, stride, pad)
    dW = np.tensordot(dout, cols, axes=([0, 2, 3], [0, 2, 3]))                   # O,C,k,k
    db = dout.sum(axis=(0, 2, 3))
    dcols = np.tensordot(dout, W, axes=([1], [0]))                               # N,Ho,Wo,C,k,k
    n, c, h, w = X.shape
    dXp = np.zeros((n, c, h + 2 * pad, w + 2 * pad))
    ho, wo = dout.shape[2:]
    for i in range(k):
        for j in range(k):
            dXp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride] += \
                dcols[..., i, j].transpose(0, 3, 1, 2)
    return dXp[:, :, pad:pad + h, pad:pad + w], dW, db


def _bn(X, gamma, beta, mean, var):
    inv_std = 1.0 / np.sqrt(var + BN_EPS)
    xhat = (X - mean[None, :, None, None]) * inv_std[None, :, None, None]
    return xhat * gamma[None, :, None, None] + beta[None, :, None, None], xhat, inv_std


def _bn_train(X, gamma, beta, state, idx, unbiased):
    """Batch statistics (biased variance); updates the running statistics in state."""
    mean, var = X.mean(axis=(0, 2, 3)), X.var(axis=(0, 2, 3))
    if state is not None:
        n = X.size // X.shape[1]
        state[idx["mean"]][...] = (1 - BN_MOMENTUM) * state[idx["mean"]] + BN_MOMENTUM * mean
        batch_var = var * n / (n - 1) if unbiased else var
        state[idx["var"]][...] = (1 - BN_MOMENTUM) * state[idx["var"]] + BN_MOMENTUM * batch_var
    return _bn(X, gamma, beta, mean, var)


def _bn_backward(dy, xhat, inv_std, gamma):
    m = dy.size // dy.shape[1]
    axes = (0, 2, 3)
    dgamma, dbeta = (dy * xhat).sum(axis=axes), dy.sum(axis=axes)
    dxhat = dy * gamma[None, :, None, None]
    dx = (inv_std[None, :, None, None] / m) * (
        m * dxhat - dxhat.sum(axis=axes)[None, :, None, None]
        - xhat * (dxhat * xhat).sum(axis=axes)[None, :, None, None])
    return dx, dgamma, dbeta


def _forward(params, X, state, training, unbiased=True):
    """Logits and, for the backward pass, a tape of what each layer saw."""
    P = [np.asarray(p, np.float64) for p in params]
    S = [np.asarray(s, np.float64) for s in (init_state() if state is None else state)]
    live = state if (training and state is not None) else None   # updated in place

    def conv(x, c, stride, pad):
        return _conv(x, P[c["weight"]], P[c["bias"]], stride, pad)

    def bn(x, i):
        if training:
            return _bn_train(x, P[i["gamma"]], P[i["beta"]], live, i, unbiased)
        return _bn(x, P[i["gamma"]], P[i["beta"]], S[i["mean"]], S[i["var"]])

    X = np.asarray(X, np.float64)
    tape = {"X": X}
    z = conv(X, STEM["conv"], 1, 1)
    y, xhat, inv = bn(z, STEM["bn"])
    h = np.maximum(y, 0)
    tape["stem"] = (y, xhat, inv)
    for block in BLOCKS:
        t = {"in": h}
        z1 = conv(h, block["conv1"], block["stride"], 1)
        y1, t["xhat1"], t["inv1"] = bn(z1, block["bn1"])
        a1 = np.maximum(y1, 0)
        t["y1"], t["a1"] = y1, a1
        z2 = conv(a1, block["conv2"], 1, 1)
        y2, t["xhat2"], t["inv2"] = bn(z2, block["bn2"])
        short = conv(h, block["shortcut"], block["stride"], 0) if block["shortcut"] else h
        s = y2 + short
        h = np.maximum(s, 0)
        t["s"] = s
        tape[block["name"]] = t
    f = h.mean(axis=(2, 3))
    tape["pooled_shape"], tape["f"] = h.shape, f
    logits = f @ P[FC["weight"]] + P[FC["bias"]]
    return logits, tape, P


def forward(params, X, state=None, training=False):
    """Logits for images X (N,1,28,28): batch statistics when training (state is then
    updated in place, if given), else the running statistics in state."""
    if training and state is not None:
        state_work = [np.asarray(s, np.float64).copy() for s in state]
        logits = _forward(params, X, state_work, True)[0]
        for s, w in zip(state, state_work):
            s[...] = w
        return logits
    return _forward(params, X, state, training)[0]


def cross_entropy(logits, y):
    """Per-example softmax cross-entropy, computed stably."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(y)), y]


def loss_and_grads(params, X, y, state=None, unbiased_running_var=True):
    """Summed cross-entropy over the batch, the logits, and the gradient of the sum
    with respect to every parameter (float64), in training mode. `state` (a list of
    arrays), if given, is updated in place as one training step would."""
    work = None if state is None else [np.asarray(s, np.float64).copy() for s in state]
    logits, tape, P = _forward(params, X, work, True, unbiased_running_var)
    if state is not None:
        for s, w in zip(state, work):
            s[...] = w
    y = np.asarray(y)
    loss = cross_entropy(logits, y).sum()
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    dlogits = p / p.sum(axis=1, keepdims=True)
    dlogits[np.arange(len(y)), y] -= 1.0
    grads = [None] * len(P)
    grads[FC["weight"]] = tape["f"].T @ dlogits
    grads[FC["bias"]] = dlogits.sum(0)
    n, c, hh, ww = tape["pooled_shape"]
    dh = np.broadcast_to((dlogits @ P[FC["weight"]].T)[:, :, None, None] / (hh * ww), (n, c, hh, ww))

    def bn_back(dy, xhat, inv, i):
        dx, grads[i["gamma"]], grads[i["beta"]] = _bn_backward(dy, xhat, inv, P[i["gamma"]])
        return dx

    def conv_back(x, dout, cidx, stride, pad):
        dx, grads[cidx["weight"]], grads[cidx["bias"]] = _conv_backward(
            x, P[cidx["weight"]], dout, stride, pad)
        return dx

    for block in reversed(BLOCKS):
        t = tape[block["name"]]
        ds = dh * (t["s"] > 0)
        if block["shortcut"]:
            dshort = conv_back(t["in"], ds, block["shortcut"], block["stride"], 0)
        else:
            dshort = ds
        dz2 = bn_back(ds, t["xhat2"], t["inv2"], block["bn2"])
        da1 = conv_back(t["a1"], dz2, block["conv2"], 1, 1)
        dz1 = bn_back(da1 * (t["y1"] > 0), t["xhat1"], t["inv1"], block["bn1"])
        dh = conv_back(t["in"], dz1, block["conv1"], block["stride"], 1) + dshort
    y0, xhat, inv = tape["stem"]
    dz = bn_back(dh * (y0 > 0), xhat, inv, STEM["bn"])
    conv_back(tape["X"], dz, STEM["conv"], 1, 1)
    return loss, logits, grads


def variant(size: str) -> ModuleType:
    """This model at another of SIZES: this file run again as a module of its own, named
    resnet18_<size>, with that size's STAGES, so that every name it defines (the oracle,
    the costs, walk, the units) is that size's; registered, so common.models.get takes it
    by that name in this process (a fresh one calls variant first)."""
    if size not in SIZES:
        raise ValueError(f"resnet18: unknown size {size!r}; choose from: {', '.join(SIZES)}")
    if size == "default":
        return sys.modules[__name__]
    spec = importlib.util.spec_from_file_location(f"{__name__}_{size}", __file__)
    m = importlib.util.module_from_spec(spec)
    m._SIZE = size
    sys.modules[spec.name] = m        # importable by its name, as torch.compile's tracer needs
    spec.loader.exec_module(m)
    return models.register(m)
