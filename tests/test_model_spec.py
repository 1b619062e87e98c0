"""The model interface (common/models/spec.py): every model answers it, values included;
a toy model registered from outside common/models is what every model-generic part of
the suite takes with no other edit (the oracle's training, stage cuts and schedules,
costs, the parameter server's keys, a record's file name); a model that lacks a name or
whose parts do not fit is refused at registration with everything it gets wrong."""
from __future__ import annotations

import types

import numpy as np
import pytest

from common import models
from common.models import costs, spec


@pytest.mark.parametrize("name", models.NAMES)
def test_every_model_answers_the_interface_values_included(name):
    assert spec.problems(models.get(name), values=True) == []


def toy(**change) -> types.ModuleType:
    """A two-layer perceptron on 4x4 images, 3 classes, in NumPy: every name of the
    interface, and no other."""
    m = types.ModuleType("toy")
    shapes = ((16, 8), (8,), (8, 3), (3,))

    def init_params(seed, init):
        rng = np.random.default_rng(seed)
        return [models.weight(init, s, s[0], s[1], rng, 0.01) if len(s) == 2
                else np.zeros(s, np.float32) for s in shapes]

    def _forward(params, X):
        W1, b1, W2, b2 = [np.asarray(p, np.float64) for p in params]
        x = np.asarray(X, np.float64).reshape(len(X), -1)
        h = np.maximum(x @ W1 + b1, 0)
        return x, h, h @ W2 + b2

    def cross_entropy(logits, y):
        z = logits - logits.max(1, keepdims=True)
        return np.log(np.exp(z).sum(1)) - z[np.arange(len(y)), y]

    def loss_and_grads(params, X, y, state=None, unbiased_running_var=True):
        x, h, logits = _forward(params, X)
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        d = p.copy()
        d[np.arange(len(y)), y] -= 1
        dh = (d @ np.asarray(params[2], np.float64).T) * (h > 0)
        return (float(cross_entropy(logits, y).sum()), logits,
                [x.T @ dh, dh.sum(0), h.T @ d, d.sum(0)])

    m.__dict__.update(
        NAME="toy", PARAM_NAMES=("W1", "b1", "W2", "b2"), PARAM_SHAPES=shapes,
        STATE_NAMES=(), STATE_SHAPES=(), IMAGE_SHAPE=(1, 4, 4), NUM_CLASSES=3, INIT_SCALE=0.01,
        init_params=init_params, init_state=lambda: [],
        forward=lambda params, X, state=None, training=False: _forward(params, X)[2],
        cross_entropy=cross_entropy, loss_and_grads=loss_and_grads,
        TRAIN_FLOPS_PER_IMAGE=3 * 2 * (16 * 8 + 8 * 3),
        LAYERS=(costs.dense(16, 8), costs.elementwise("activation", 8, 1), costs.dense(8, 3),
                costs.loss(3)),
        UNITS=(("hidden", (0, 1), (), (8,)), ("head", (2, 3), (), (3,))), UNIT_COST=(1, 1),
        COMMANDS={"profile": {"batch": 8, "steps": 2}, "settings": {"agree_steps": 2},
                  "links": {"batch": 8, "compute_batches": (8,), "rates": ("1gbit",), "steps": 2},
                  "pipeline": {"batch": 8, "steps": 2}},
        CHANNELS_LAST=(lambda ps: [np.asarray(p) for p in ps], lambda ps: [np.asarray(p) for p in ps]),
        KEY_ORDER=(0, 1, 2, 3), CHECK_MODEL="toy", DROPOUT=0.0)
    m.__dict__.update(change)
    for name in [k for k, v in change.items() if v is None]:
        delattr(m, name)
    return m


@pytest.fixture
def registered():
    yield models.register(toy())
    models._CHECKED.pop("toy", None)


def test_a_registered_toy_model_needs_no_other_edit(registered):
    from common.core import perf, schedules
    from common.results.record import record_filename
    assert models.get("toy") is registered
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((32, 1, 4, 4)).astype(np.float32), rng.integers(0, 3, 32)
    losses, _ = models.sgd_steps(registered, registered.init_params(0, "glorot"),
                                 [(X, y)] * 20, lr=0.5)
    assert losses[-1] < losses[0]                       # the oracle trains it
    assert [s.out_shape for s in schedules.stages("toy", 2)] == [(8,), (3,)]
    assert perf.key_sizes("toy") == [128, 8, 24, 3] and models.param_bytes("toy") == 4 * 163
    assert {"dense forward", "optimizer update"} <= set(costs.class_costs(registered, 4))
    assert record_filename({"framework": "pytorch", "model": "toy", "mode": "native",
                            "devices": 1}) == "toy-pytorch-native-1dev.json"


@pytest.mark.parametrize("change, said", [
    ({"loss_and_grads": None}, "loss_and_grads is missing"),
    ({"UNITS": (("hidden", (0, 1), (), (8,)), ("head", (2,), (), (3,)))},
     "UNITS do not hold every parameter exactly once"),
    ({"COMMANDS": {"profile": {"batch": 8, "steps": 2}}}, "COMMANDS' keys are not"),
    ({"KEY_ORDER": (0, 1, 2)}, "KEY_ORDER does not name every parameter once"),
    ({"NUM_CLASSES": 3.0}, "NUM_CLASSES is not a int"),
], ids=["no-backward", "unit-gap", "commands", "keys", "type"])
def test_a_model_that_does_not_fit_is_refused_at_registration(change, said):
    with pytest.raises(spec.ModelError, match=said):
        models.register(toy(**change))
    assert "toy" not in models._CHECKED


def test_wrong_values_are_found():
    """Planted: initial values of another shape; a channels-last layout that loses a
    tensor's sign on the way back."""
    bad = toy(init_params=lambda seed, init: [np.zeros((16, 9), np.float32)] * 4)
    assert "init_params' shapes are not PARAM_SHAPES" in spec.problems(bad, values=True)
    lossy = toy(CHANNELS_LAST=(lambda ps: [np.asarray(p) for p in ps],
                               lambda ps: [-np.asarray(p) for p in ps]))
    assert spec.problems(lossy) == []
    assert spec.problems(lossy, values=True) == ["CHANNELS_LAST there and back is not the identity"]


@pytest.mark.parametrize("name", models.NAMES)
def test_each_models_checks_train_it_or_a_size_of_it(name):
    """CHECK_MODEL (what the conformance checks train) loads by name in any process and is
    the model itself or one of its sizes (the ViT's tiny); an unknown size is one line."""
    checked = models.get(models.get(name).CHECK_MODEL)
    assert models.family(checked.NAME) == name
    assert checked.NAME in models.choices()
    with pytest.raises(models.UnknownModel, match=f"unknown model '{name}_huge'"):
        models.get(f"{name}_huge")
