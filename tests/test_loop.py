"""The epoch loop (common.core.loop.train) on a scripted trainer, no framework: what
it records of the test accuracy each epoch, the target accuracy and divergence."""
from __future__ import annotations

import numpy as np
import pytest

from common.core.contract import Trainer
from common.core.loop import train
from common.core.plan import RunConfig
from common.facts import data


class Scripted(Trainer):
    """Each evaluation's test accuracy as scripted (the loop evaluates once per epoch,
    all test images in one call): the first accuracy x n labels right, the rest wrong."""

    def __init__(self, y_test, accuracies, loss=2.0):
        self.y_test, self.accuracies, self.loss, self.evaluated = y_test, list(accuracies), loss, 0

    def step(self, X, y):
        return self.loss

    def losses(self, handles):
        return np.asarray(handles, float)

    def logits(self, X):
        if self.evaluated == len(self.accuracies):      # the loss after the last update
            return np.zeros((len(X), 10))
        right = int(round(self.accuracies[self.evaluated] * len(X)))
        self.evaluated += 1
        labels = np.concatenate([self.y_test[:right], (self.y_test[right:len(X)] + 1) % 10])
        return np.eye(10)[labels]

    def replica_params(self):
        return [[]]

    def replica_state(self):
        return [[]]

    def load_params(self, params, state):
        pass


class NoDevice:
    def synchronize(self):
        pass


@pytest.fixture(scope="module")
def ds():
    return data.synthetic(0, n_train=512, n_test=200)


def run(ds, accuracies, target):
    cfg = RunConfig("pytorch", "scratch", 1, epochs=len(accuracies), batch_size=64,
                    steps_per_epoch=3, target_accuracy=target)
    return train(NoDevice(), Scripted(ds.y_test, accuracies), cfg, ds)


@pytest.mark.parametrize("accuracies, target, epochs", [
    ([0.1, 0.5, 0.9], 0.4, 2),      # reached after the first epoch: the first that reaches it
    ([0.8, 0.3, 0.9], 0.7, 1),      # reached at once, and kept though accuracy falls later
    ([0.1, 0.5, 0.9], 0.95, None),  # never reached
    ([0.1, 0.5, 0.5], 0.5, 2),      # reached exactly
], ids=["later-epoch", "first-epoch", "never", "exactly"])
def test_target_accuracy_is_the_first_epoch_that_reaches_it(ds, accuracies, target, epochs):
    out = run(ds, accuracies, target)
    assert out["test_accuracy_per_epoch"] == pytest.approx(accuracies)
    assert out["test_accuracy"] == pytest.approx(accuracies[-1])
    assert out.get("epochs_to_target") == epochs
    if epochs is None:
        assert out.get("sec_to_target") is None
    else:   # the training time of those epochs, evaluation excluded
        assert out["sec_to_target"] == pytest.approx(sum(out["sec_per_epoch"][:epochs]))
    assert len(out["sec_per_epoch"]) == len(accuracies)     # the run goes on to its epochs
