"""Sharded data parallelism (ZeRO-3, Rajbhandari et al. 2020; PyTorch's FSDP) written
once for every framework, in the chapter's style: what train_batch and allreduce are to
data parallelism, sharded_batch, all_gather and reduce_scatter are here, on the
backend's tensor primitives (rows, concat, assign, add) and its per-shard forward and
backward.

Between steps each of the k devices holds 1/k of every parameter: rows lo:hi of its
first axis, the framework's own layout (FSDP2 shards each parameter on dim 0 the same
way; here uneven rows are cut as common.facts.data.shard_bounds cuts a batch, instead
of padding). A step:
  1. all-gather: every device concatenates every device's shard of each parameter into
     its work copy of the whole model;
  2. forward and backward on its shard of the batch (as scratch mode);
  3. reduce-scatter: device i sums every device's rows lo_i:hi_i of each gradient, and
     updates its own shard with them (SGD, scaled by the full batch).
The parameters are gathered once a step and live through the forward and backward pass
(FSDP2's reshard_after_forward=False): each device sends (k-1)/k x P in the all-gather
and (k-1)/k x P in the reduce-scatter, 2(k-1)/k x P, a ring all-reduce's bytes.
ZeRO-3 proper frees the gathered parameters after the forward pass and gathers them
again for the backward, 3(k-1)/k x P (common/core/perf.py: sharded_bytes). BatchNorm's
running statistics are state, not parameters: each device keeps its own, from its
shard of the batch, as in scratch mode."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from common.core.contract import Backend, Replica, Trainer, float32_bytes
from common.facts.data import shard_bounds


def row_bounds(shapes: Sequence[tuple[int, ...]], k: int) -> list[list[tuple[int, int]]]:
    """bounds[i][p]: the rows (lo, hi) of parameter p (framework shapes) that device i keeps."""
    per_param = [shard_bounds(shape[0], k) for shape in shapes]
    return [[b[i] for b in per_param] for i in range(k)]


def all_gather(b: Backend, shards: list, targets: list) -> None:
    """targets[i] (device i's work copy of one parameter) takes every device's shard of
    it, concatenated in device order: rows lo_j:hi_j from device j."""
    for t in targets:
        d = b.device_of(t)
        b.assign(t, b.concat([b.to_device(s, d) for s in shards], d))


def reduce_scatter(b: Backend, grads: list, bounds: list[tuple[int, int]], devices: Sequence[str]) -> list:
    """Device i's sum over every device's gradient of its own rows bounds[i]: one new
    tensor per device (the gradient of its shard)."""
    return [b.add([b.rows(g, lo, hi) for g in grads], d) for (lo, hi), d in zip(bounds, devices)]


def sharded_batch(b: Backend, X, y, replicas: list[Replica], shards: list[list],
                  bounds: list[list[tuple[int, int]]], devices: Sequence[str], lr: float,
                  grad_shapes: list[list] | None = None):
    """One step of sharded data parallelism over len(devices) devices; shards[i] is device
    i's list of parameter shards, updated in place (the list); grad_shapes[i], where
    given, takes the shapes of the gradients device i updates its shards with. Returns
    the batch's mean loss (a handle)."""
    for p in range(len(shards[0])):
        all_gather(b, [s[p] for s in shards], [r[p] for r in replicas])
    X_shards, y_shards = b.split_batch(X, y, devices)
    losses = [b.shard_loss_and_grads(r, Xs, ys)[0]
              for r, Xs, ys in zip(replicas, X_shards, y_shards)]
    grads = [b.grads(r) for r in replicas]
    scale = lr / X.shape[0]
    for p in range(len(shards[0])):
        summed = reduce_scatter(b, [g[p] for g in grads], [bd[p] for bd in bounds], devices)
        for i, g in enumerate(summed):
            if grad_shapes is not None:
                grad_shapes[i][p] = tuple(g.shape)
            shards[i][p] = b.add([shards[i][p], g * (-scale)], devices[i])
    for r in replicas:
        b.clear_grads(r)
    return b.add(losses, devices[0]) / X.shape[0]


def sent_bytes(shapes: Sequence[tuple[int, ...]], bounds: list[list[tuple[int, int]]],
               itemsize: int = 4) -> list[int]:
    """The bytes each device sends a step in sharded_batch: its shard to each of the k-1
    others (all-gather), and each other device's rows of its gradients (reduce-scatter)."""
    k = len(bounds)
    row = [int(np.prod(s[1:], dtype=np.int64)) * itemsize for s in shapes]
    own = [sum((hi - lo) * r for (lo, hi), r in zip(bounds[i], row)) for i in range(k)]
    total = sum(own)
    return [(k - 1) * own[i] + (total - own[i]) for i in range(k)]


class ShardedTrainer(Trainer):
    def __init__(self, backend: Backend, model: str, params: Sequence[np.ndarray],
                 state: Sequence[np.ndarray], devices: Sequence[str], lr: float,
                 execution: str = "eager"):
        b = self.backend = backend
        self.model, self.devices, self.lr = model, list(devices), lr
        backend.check_execution(execution)
        # the work copies the all-gather fills (the whole model on each device) ...
        self.replicas = [b.get_params(params, d, model, state) for d in self.devices]
        for r in self.replicas:
            r.execution = execution
        self.shapes = [tuple(b.to_numpy(p).shape) for p in self.replicas[0]]
        self.bounds = row_bounds(self.shapes, len(self.devices))
        self.grad_shapes = [[(0,)] * len(self.shapes) for _ in self.devices]    # none before a step
        self._cut()

    def _cut(self) -> None:
        """What each device keeps between steps, from the work copies: its rows of every parameter."""
        self.shards = [[self.backend.rows(p, lo, hi) for p, (lo, hi) in zip(r, bd)]
                       for r, bd in zip(self.replicas, self.bounds)]

    def step(self, X, y):
        b = self.backend
        return sharded_batch(b, b.tensor(X, "cpu:0"), b.tensor(y, "cpu:0"), self.replicas,
                             self.shards, self.bounds, self.devices, self.lr, self.grad_shapes)

    def losses(self, handles):
        self.backend.synchronize()
        return np.array([float(np.asarray(self.backend.to_numpy(h)).reshape(())) for h in handles])

    def _gathered(self) -> list[np.ndarray]:
        """The whole parameters, in the framework's layout, from the devices' shards."""
        b = self.backend
        return [np.concatenate([b.to_numpy(s[p]) for s in self.shards])
                for p in range(len(self.shards[0]))]

    def shard_arrays(self) -> list[list[np.ndarray]]:
        """What each device keeps between steps: its rows of every parameter (framework layout)."""
        return [[self.backend.to_numpy(p) for p in s] for s in self.shards]

    def logits(self, X):
        b, r = self.backend, self.replicas[0]
        for p in range(len(r)):        # the first device's work copy, gathered as a step does
            all_gather(b, [s[p] for s in self.shards], [r[p]])
        return b.to_numpy(b.forward(self.model, r, b.tensor(X, r.device)))

    def replica_params(self):
        return [self.backend.model_ops(self.model).from_framework(self._gathered())]

    def replica_state(self):
        return [self.backend.read_state(r) for r in self.replicas]

    def load_params(self, params, state):
        b = self.backend
        for r in self.replicas:
            b.write_params(r, params, state)
        self._cut()

    def figures(self):
        shard = [sum(a.nbytes for a in s) for s in self.shard_arrays()]
        return {"shard_bytes": shard, "param_bytes": float32_bytes(self.shapes),
                "grad_bytes": [float32_bytes(s) for s in self.grad_shapes],
                "sent_bytes_per_step": sent_bytes(self.shapes, self.bounds)}
