"""Scratch mode, written once for every framework: the chapter's train_batch on
the backend's primitives (split_batch, a forward and backward pass per shard,
allreduce, SGD), and the trainer that drives it. A framework may bind
train_batch differently (Backend.wrap_train_batch: TensorFlow traces it into one
graph) but not change it."""
from __future__ import annotations

import contextlib
import functools
import time
from typing import Callable, Sequence

import numpy as np

from common.core.contract import Backend, Replica, Trainer


def train_batch(b: Backend, X, y, replicas: list[Replica], devices: Sequence[str], lr: float,
                clock: Callable | None = None):
    """Forward and backward per shard, allreduce of the gradients, SGD on every replica
    scaled by the full batch size. Returns the batch's mean loss (a handle). `clock`, in
    a traced run, times the all-reduce (a context manager)."""
    X_shards, y_shards = b.split_batch(X, y, devices)
    losses = [b.shard_loss_and_grads(r, Xs, ys)[0]
              for r, Xs, ys in zip(replicas, X_shards, y_shards)]
    grads = [b.grads(r) for r in replicas]
    with clock() if clock else contextlib.nullcontext():
        for i in range(len(grads[0])):
            b.allreduce([g[i] for g in grads])
    batch = X.shape[0]
    for r in replicas:
        b.sgd(r, lr / batch)
    return b.add(losses, devices[0]) / batch


def training_forward(b: Backend, model: str, execution: str, loss_sum: Callable,
                     compiler: Callable[[Callable], Callable]) -> Callable:
    """(params, state, X, y) -> (summed loss, logits) of `model` in training mode, for a
    framework whose backward follows its forward (autograd): the model's ops as they are
    (eager), or `compiler` applied to them (compiled), once per model and backend and
    shared by every replica."""
    b.check_execution(execution)
    ops = b.model_ops(model)

    def forward(params, state, X, y):
        logits = ops.apply(params, state, X, True)
        return loss_sum(logits, y), logits
    if execution == "eager":
        return forward
    cache = b.__dict__.setdefault("_compiled_forward", {})
    if model not in cache:
        cache[model] = compiler(forward)
    return cache[model]


class ScratchTrainer(Trainer):
    def __init__(self, backend: Backend, model: str, params: Sequence[np.ndarray],
                 state: Sequence[np.ndarray], devices: Sequence[str], lr: float,
                 execution: str = "eager", trace: bool = False):
        self.backend, self.model, self.devices, self.lr = backend, model, list(devices), lr
        self.replicas = [backend.get_params(params, d, model, state) for d in self.devices]
        # a traced run's all-reduce spans (common/results/trace.py); none where the
        # backend traces the whole step into one program, whose Python runs only once
        self.spans = []
        clocked = trace and execution not in backend.whole_step_executions
        self._train_batch = backend.bind_train_batch(
            functools.partial(train_batch, clock=self._clock) if clocked else train_batch,
            self.replicas, self.devices, lr, execution)

    @contextlib.contextmanager
    def _clock(self):
        """The all-reduce of a traced step, the devices synchronised on both sides."""
        self.backend.synchronize()
        start = time.perf_counter()
        yield
        self.backend.synchronize()
        self.spans.append({"lane": "all-reduce", "name": "all-reduce", "cat": "allreduce",
                           "start": start, "end": time.perf_counter(),
                           "devices": ", ".join(self.devices)})

    def step(self, X, y):
        b = self.backend
        # The batch arrives on the host, as from a data loader; split_batch scatters it.
        return self._train_batch(b.tensor(X, "cpu:0"), b.tensor(y, "cpu:0"))

    def losses(self, handles):
        self.backend.synchronize()
        return np.array([float(np.asarray(self.backend.to_numpy(h)).reshape(()))
                         for h in handles])

    def logits(self, X):
        b, d = self.backend, self.devices[0]
        return b.to_numpy(b.forward(self.model, self.replicas[0], b.tensor(X, d)))

    def replica_params(self):
        return [self.backend.read_params(r) for r in self.replicas]

    def replica_state(self):
        return [self.backend.read_state(r) for r in self.replicas]

    def load_params(self, params, state):
        for r in self.replicas:
            self.backend.write_params(r, params, state)
