"""Scratch mode's trainer, the same for every framework: it only calls the
backend's get_params / split_batch / train_batch, the chapter's functions."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .contract import Backend, Trainer

EVAL_BATCH = 1000


def predict_in_batches(logits_of, X: np.ndarray) -> np.ndarray:
    """Class ids for X, evaluated EVAL_BATCH images at a time to bound memory."""
    return np.concatenate([np.asarray(logits_of(X[i:i + EVAL_BATCH])).argmax(axis=1)
                           for i in range(0, len(X), EVAL_BATCH)])


class ScratchTrainer(Trainer):
    def __init__(self, backend: Backend, params: Sequence[np.ndarray],
                 devices: Sequence[str], lr: float):
        self.backend, self.devices, self.lr = backend, list(devices), lr
        self.replicas = [backend.get_params(params, d) for d in self.devices]

    def step(self, X, y):
        b = self.backend
        # The batch arrives on the host, as from a data loader; split_batch scatters it.
        return b.train_batch(b.tensor(X, "cpu:0"), b.tensor(y, "cpu:0"),
                             self.replicas, self.devices, self.lr)

    def losses(self, handles):
        self.backend.synchronize()
        return np.array([float(self.backend.to_numpy(h)) for h in handles])

    def predict(self, X):
        b, d = self.backend, self.devices[0]
        return predict_in_batches(
            lambda x: b.to_numpy(b.lenet(self.replicas[0], b.tensor(x, d))), X)

    def replica_params(self):
        return [self.backend.read_params(r) for r in self.replicas]

    def load_params(self, params):
        for r in self.replicas:
            self.backend.write_params(r, params)
