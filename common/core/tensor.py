"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) written once for every framework,
in the chapter's style: what train_batch and allreduce are to data parallelism,
tensor_batch and all_reduce are here, on the backend's recorded pieces (record,
backprop) of a transformer (contract.TransformerOps: embed, norm, attend, mlp, bias,
head) and its tensor primitives (to_device, add).

Each of the k devices holds the embedding, the LayerNorms, the MLP's second bias and the
head whole, and 1/k of each block's split weights (the model's TENSOR_SPLIT): its heads'
columns of Q, K and V and rows of the output projection, its columns of the MLP's first
layer (and bias) and rows of the second. Every device runs the whole batch. A block:

    a = norm1(z)                      whole on every device (Megatron's f: the identity)
    p_i = attend_i(a)                 device i's heads, through its rows of W_o
    z1 = z + sum_i p_i                g: an all-reduce of batch x tokens x width
    u_i = mlp_i(norm2(z1))            device i's columns of W_1, rows of W_2
    z2 = z1 + bias(sum_i u_i, c2)     g again

and backward, the same in reverse: g's gradient is the identity (each device's part
takes the sum's gradient), and f's is an all-reduce: the gradient of the LayerNorm's
output sums every device's part (each saw only its heads or columns). Two all-reduces
of the activations forward and two backward per block (common/core/perf.py:
tensor_parallel_bytes); the replicated parameters get the same gradients on every
device, so the SGD steps keep them equal without any exchange."""
from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Sequence

import numpy as np

from common import models
from common.core import perf
from common.core.contract import (Backend, NotApplicable, Trainer, TransformerOps, float32_bytes,
                                   held_figures)
from common.facts import registry
from common.models import vit


def all_reduce(b: Backend, parts: list, devices: Sequence[str], log: list) -> list:
    """The sum of every device's part, on every device (new tensors); logs the bytes
    each device sends (a ring's 2(k-1)/k of a part)."""
    log.append(perf.ring_bytes(4 * int(np.prod(tuple(parts[0].shape))), len(devices)))
    return [b.add(parts, d) for d in devices]


def g_forward(b: Backend, parts: list, devices: Sequence[str], log: list) -> list:
    """Megatron's g after a row-parallel layer: the devices' partial outputs summed."""
    return all_reduce(b, parts, devices, log)


def f_backward(b: Backend, grads: list, devices: Sequence[str], log: list) -> list:
    """Megatron's f before the column-parallel layers, backward: the gradients of their
    shared input summed."""
    return all_reduce(b, grads, devices, log)


def cut(whole: np.ndarray, axis: int | None, i: int, k: int) -> np.ndarray:
    """Device i's part of a parameter (framework layout): the whole where axis is None."""
    return whole if axis is None else np.split(whole, k, axis=axis)[i]


@functools.cache
def pieces(ops: TransformerOps, heads: int) -> SimpleNamespace:
    """The pieces a device runs, each one callable for the whole run (a framework that
    compiles a piece once, JAX, caches it by the callable): a device's `heads` heads;
    the images and the labels last, as constants."""
    return SimpleNamespace(
        embed=lambda pw, pb, cls, pos, X: ops.embed(X, pw, pb, cls, pos), norm=ops.norm,
        attend=lambda a, Wq, Wk, Wv, Wo: ops.attend(a, Wq, Wk, Wv, Wo, heads), mlp=ops.mlp,
        bias=ops.bias, loss=lambda z, g, b, W, c, y: ops.loss_sum(ops.head(z, g, b, W, c), y))


class _Run:
    """Each device's pieces in forward order, recorded (training) or called (evaluation),
    and their tapes popped in reverse by backward."""

    def __init__(self, b: Backend, devices: Sequence[str], recording: bool):
        self.b, self.devices, self.recording = b, list(devices), recording
        self.tapes = [[] for _ in devices]

    def __call__(self, i: int, fn, *inputs, consts=()):
        if not self.recording:
            return self.b.piece(fn)(*inputs, *consts)
        out, tape = self.b.record(fn, inputs, self.devices[i], consts)
        self.tapes[i].append(tape)
        return out

    def back(self, grads: list) -> list[list]:
        """Every device's last recorded piece backward: the gradients of its inputs."""
        return [self.b.backprop(t.pop(), g) for t, g in zip(self.tapes, grads)]


def _forward(b, ops, s, X, y, held, devices, run, log):
    """Every device's forward (whole batch); the summed loss on each where y is given,
    else the logits."""
    k, ids = len(devices), range(len(devices))
    do = pieces(ops, s.heads // k)
    Xs = [b.to_device(X, d) for d in devices]
    z = [run(i, do.embed, *held[i][:4], consts=(Xs[i],)) for i in ids]
    for at in s.blocks_in((1, s.blocks + 1)):
        P = [h[at:at + s.per_block] for h in held]
        a = [run(i, do.norm, z[i], *P[i][0:2]) for i in ids]
        part = [run(i, do.attend, a[i], *P[i][2:6]) for i in ids]
        z = [b.add([z[i], o], devices[i]) for i, o in enumerate(g_forward(b, part, devices, log))]
        a = [run(i, do.norm, z[i], *P[i][6:8]) for i in ids]
        part = [run(i, do.mlp, a[i], *P[i][8:11]) for i in ids]
        summed = g_forward(b, part, devices, log)
        z = [b.add([z[i], run(i, do.bias, summed[i], P[i][11])], devices[i]) for i in ids]
    head = [h[s.head:s.head + 4] for h in held]
    if y is None:
        return [run(i, ops.head, z[i], *head[i]) for i in ids]
    ys = [b.to_device(y, d) for d in devices]
    return [run(i, do.loss, z[i], *head[i], consts=(ys[i],)) for i in ids]


def _backward(b, s, n_params, devices, run, log) -> list[list]:
    """The recorded forward backward, piece by piece in reverse: each device's gradients
    of its held parameters."""
    grads = [[None] * n_params for _ in devices]

    def keep(at, got, takes_input=True):     # the pieces' parameters' gradients
        for g, o in zip(grads, got):
            g[at:at + len(o) - takes_input] = o[takes_input:]
        return [o[0] for o in got]           # the piece's input's gradient
    dz = keep(s.head, run.back([None] * len(devices)))
    for at in reversed(s.blocks_in((1, s.blocks + 1))):
        dpart = keep(at + 11, run.back(dz))                    # bias; g: the identity
        da = f_backward(b, keep(at + 8, run.back(dpart)), devices, log)
        dz = [b.add([d, g], dev) for d, g, dev in zip(dz, keep(at + 6, run.back(da)), devices)]
        da = f_backward(b, keep(at + 2, run.back(dz)), devices, log)
        dz = [b.add([d, g], dev) for d, g, dev in zip(dz, keep(at, run.back(da)), devices)]
    keep(0, run.back(dz), takes_input=False)                   # the embedding
    return grads


def tensor_batch(b: Backend, ops: TransformerOps, X, y, held: list[list], devices: Sequence[str],
                 lr: float, log: list, grad_shapes: list | None = None):
    """One step of k-way tensor parallelism; held[i] is device i's list of parameters
    (whole or its part), replaced by their SGD update (scaled by the batch); grad_shapes,
    where given, takes each device's gradients' shapes. Returns the batch's mean loss (a
    handle)."""
    s = vit.shape(ops.name)
    run = _Run(b, devices, recording=True)
    losses = _forward(b, ops, s, X, y, held, devices, run, log)
    grads = _backward(b, s, len(held[0]), devices, run, log)
    scale = lr / X.shape[0]
    if grad_shapes is not None:
        grad_shapes[:] = [[tuple(g.shape) for g in gs] for gs in grads]
    for i, d in enumerate(devices):
        held[i] = [b.add([p, g * (-scale)], d) for p, g in zip(held[i], grads[i])]
    return losses[0] / X.shape[0]


def problem(model: str, k: int) -> str | None:
    """Why `model` cannot be split k ways by tensor mode (one line), or None."""
    m = models.get(model)
    if not hasattr(m, "TENSOR_SPLIT"):
        return (f"tensor mode splits a transformer's blocks (attention heads, MLP columns); "
                f"{model} has none: use --model vit")
    return m.tensor_problem(k)


class TensorTrainer(Trainer):
    def __init__(self, backend: Backend, model: str, params: Sequence[np.ndarray],
                 state: Sequence[np.ndarray], devices: Sequence[str], lr: float,
                 execution: str = "eager"):
        self.backend = backend
        why = registry.gap(backend.name, "tensor") or problem(model, len(devices))
        if why:
            raise NotApplicable(why)
        backend.check_execution(execution)
        if execution != "eager":
            raise NotApplicable(f"tensor mode runs its pieces eagerly, all-reducing between "
                                f"them from Python; no {execution!r} execution of it here")
        self.ops = backend.model_ops(model)
        if not isinstance(self.ops, TransformerOps):
            raise NotApplicable(f"{backend.name}'s {model} is not written as a transformer's pieces")
        self.model, self.devices, self.lr = model, list(devices), lr
        self.split = models.get(model).TENSOR_SPLIT
        self.sent, self.grad_shapes = 0, [[] for _ in self.devices]
        self.load_params(params, state)

    def step(self, X, y):
        b = self.backend
        log = []
        loss = tensor_batch(b, self.ops, b.tensor(X, "cpu:0"), b.tensor(y, "cpu:0"), self.held,
                            self.devices, self.lr, log, self.grad_shapes)
        self.sent = max(self.sent, sum(log))      # a full batch's, not a last short one's
        return loss

    def losses(self, handles):
        self.backend.synchronize()
        return np.array([float(np.asarray(self.backend.to_numpy(h)).reshape(())) for h in handles])

    def logits(self, X):
        b = self.backend
        run = _Run(b, self.devices, recording=False)
        out = _forward(b, self.ops, vit.shape(self.model), b.tensor(X, "cpu:0"), None, self.held,
                       self.devices, run, [])
        return b.to_numpy(out[0])

    def shard_arrays(self) -> list[list[np.ndarray]]:
        """What each device holds: the whole or its part of every parameter (framework layout)."""
        return [[self.backend.to_numpy(p) for p in h] for h in self.held]

    def _whole(self) -> list[np.ndarray]:
        held = self.shard_arrays()
        return [held[0][p] if axis is None else np.concatenate([h[p] for h in held], axis)
                for p, axis in enumerate(self.split)]

    def replica_params(self):
        return [self.ops.from_framework(self._whole())]

    def replica_state(self):
        return [[]]

    def load_params(self, params, state):
        b, k = self.backend, len(self.devices)
        whole = self.ops.to_framework(params)
        self.held = [[b.tensor(np.ascontiguousarray(cut(w, axis, i, k)), d)
                      for w, axis in zip(whole, self.split)] for i, d in enumerate(self.devices)]

    def figures(self):
        return {**held_figures(self.shard_arrays(), [int(np.prod(p)) * 4 for p in
                                                     models.get(self.model).PARAM_SHAPES], self.split),
                "sent_bytes_per_step": [self.sent] * len(self.devices),
                "grad_bytes": [float32_bytes(s) for s in self.grad_shapes]}
