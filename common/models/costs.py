"""A training step's FLOPs and bytes per op class, counted from a model's layers: a
calculation, not a measurement (benchmarks.profile sets each class's measured time
against it and this machine's limits).

A model lists its layers in forward order (its LAYERS: lenet.py by hand, resnet18.py by
walking the network once with shapes for tensors). Conventions, float32 (4 bytes):
- a convolution or dense layer costs 2 x multiply-adds forward, as much again for its
  input gradient (none for the first layer: nothing upstream needs it) and for its
  weight gradient;
- bytes are what a layer must read and write once: its input, output and weights
  forward; the output gradient, the input (or weights) and the gradient written
  backward. Caches would lower them; fusions that keep a tensor in registers would too.
  So an elementwise class's bound is a bound for unfused kernels.
- elementwise classes (activation, BatchNorm, pooling) count 1 FLOP per element and pass
  (BatchNorm about 5 forward, 8 backward), the update 2 per parameter.
"""
from __future__ import annotations

from collections import defaultdict

F32 = 4


def conv(cin: int, cout: int, k: int, hin: int, hout: int, first: bool = False) -> dict:
    return {"kind": "conv", "cin": cin, "cout": cout, "k": k, "hin": hin, "hout": hout,
            "first": first}


def dense(n_in: int, n_out: int, rows: int = 1) -> dict:
    """A dense layer applied to `rows` vectors per image (a transformer's tokens)."""
    return {"kind": "dense", "in": n_in, "out": n_out, "rows": rows}


def layernorm(n: int) -> dict:
    """LayerNorm over n values per image."""
    return {"kind": "layernorm", "n": n}


def attention(heads: int, tokens: int, head_dim: int) -> dict:
    """Multi-head self-attention's core per image: the scores q k^T, their softmax and
    the weighted sum of the values (the projections are dense layers of their own)."""
    return {"kind": "attention", "heads": heads, "tokens": tokens, "head_dim": head_dim}


def pool(c: int, hin: int, hout: int, k: int) -> dict:
    return {"kind": "pool", "c": c, "hin": hin, "hout": hout, "k": k}


def elementwise(kind: str, c: int, h: int) -> dict:
    """An activation ("activation"), a BatchNorm ("batchnorm") or an addition ("add")
    over c x h x h values per image."""
    return {"kind": kind, "n": c * h * h}


def loss(classes: int) -> dict:
    return {"kind": "loss", "n": classes}


def _attention_macs(layer: dict, batch: int) -> int:
    """Multiply-adds of attention's two matmuls forward, q k^T and the weighted sum."""
    return 2 * batch * layer["heads"] * layer["tokens"] ** 2 * layer["head_dim"]


def _layer_costs(layer: dict, batch: int) -> dict[str, tuple[float, float]]:
    """{class: (FLOPs, bytes)} of one layer's forward and backward at `batch` images."""
    b = batch
    kind = layer["kind"]
    if kind == "conv":
        cin, cout, k, hin, hout = (layer[n] for n in ("cin", "cout", "k", "hin", "hout"))
        macs = b * cout * hout * hout * cin * k * k
        x, y, w = b * cin * hin * hin, b * cout * hout * hout, cout * cin * k * k + cout
        out = {"conv forward": (2 * macs, F32 * (x + y + w)),
               "conv backward weight": (2 * macs, F32 * (x + y + w))}
        if not layer["first"]:
            out["conv backward input"] = (2 * macs, F32 * (y + w + x))
        return out
    if kind == "dense":
        n_in, n_out, rows = layer["in"], layer["out"], layer.get("rows", 1)
        macs = b * rows * n_in * n_out
        x, y, w = b * rows * n_in, b * rows * n_out, n_in * n_out + n_out
        return {"dense forward": (2 * macs, F32 * (x + y + w)),
                "dense backward": (4 * macs, F32 * (2 * y + 2 * x + 2 * w))}
    if kind == "pool":
        x = b * layer["c"] * layer["hin"] ** 2
        y = b * layer["c"] * layer["hout"] ** 2
        window = y * layer["k"] ** 2
        return {"pooling": (2 * window, F32 * (2 * x + 2 * y))}
    if kind == "attention":
        h, t, d = layer["heads"], layer["tokens"], layer["head_dim"]
        qkv, scores = 3 * b * h * t * d, b * h * t * t
        # forward: the two matmuls and the softmax (5 per score); backward: twice the
        # matmuls and the softmax's (3 per score); bytes: q, k, v read and their
        # gradients written, the output and its gradient, the scores and their gradient
        return {"attention": (6 * _attention_macs(layer, b) + 8 * scores,
                              F32 * (3 * qkv + 2 * b * h * t * d + 4 * scores))}
    n = b * layer.get("n", 0)
    if kind == "layernorm":
        return {"layernorm": (13 * n, F32 * 7 * n)}     # as BatchNorm: 2 r + w, 3 r + w
    if kind == "gelu":
        return {"gelu": (20 * n, F32 * 5 * n)}          # erf and its derivative: ~10 each
    if kind == "activation":
        return {"activation": (2 * n, F32 * 5 * n)}     # forward r+w; backward 2 r + w
    if kind == "batchnorm":
        return {"batchnorm": (13 * n, F32 * 7 * n)}     # forward 2 r + w; backward 3 r + w
    if kind == "add":
        return {"other named ops": (n, F32 * 3 * n)}
    if kind == "loss":
        return {"softmax and loss": (10 * n, F32 * 4 * n)}
    raise ValueError(f"unknown layer kind {kind!r}")


def class_costs(model, batch: int) -> dict[str, dict[str, float]]:
    """{class: {"flops", "bytes"}} of one training step of `model` (a common/models
    module with LAYERS and PARAM_SHAPES) at `batch` images: a calculation."""
    out = defaultdict(lambda: [0.0, 0.0])
    for layer in model.LAYERS:
        for cls, (flops, nbytes) in _layer_costs(layer, batch).items():
            out[cls][0] += flops
            out[cls][1] += nbytes
    params = sum(int(_prod(s)) for s in model.PARAM_SHAPES)
    out["optimizer update"] = [2 * params, F32 * 3 * params]   # read p and g, write p
    return {c: {"flops": f, "bytes": by} for c, (f, by) in out.items()}


def matmul_flops(model, batch: int) -> float:
    """The matrix products' FLOPs of a step, forward and backward: the convolutions',
    the dense layers' and attention's two (its softmax left out)."""
    total = 0.0
    for layer in model.LAYERS:
        if layer["kind"] == "attention":
            total += 6 * _attention_macs(layer, batch)
            continue
        total += sum(flops for c, (flops, _) in _layer_costs(layer, batch).items()
                     if c.startswith(("conv", "dense")))
    return total


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
