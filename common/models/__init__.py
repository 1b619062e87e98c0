"""Models as plug-ins. Each module here defines one model once, in NumPy, with the names
of the model interface (common/models/spec.py: INTERFACE says each, `check` holds a
module to it when get() first loads it): its parameters and state, their initial values,
the NumPy oracle's forward and backward, its layers for costs and the profile's classes,
its units for model mode, the defaults of every command that runs it, its channels-last
layout and its layered key order.

Each framework supplies the same model in its own ops (frameworks/<name>/models.py);
adding a model is one file here, one entry in each framework's models.py, and its
name in NAMES below.
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import numpy as np

from common.facts.data import shard_bounds

NAMES = ("lenet", "resnet18", "vit")
# How the weights start (the same NumPy arrays for every framework); biases start at
# zero and BatchNorm at scale 1, shift 0 in both. A run's default is DEFAULT_INIT: from
# the chapter's N(0, 0.01^2), LeNet sits on the ln 10 plateau for about an epoch and
# when a run leaves it depends on float rounding (one framework's row ended at 0.66, the
# others' at 0.76, on a CPU without AVX-512), while from Glorot's every row is at
# 0.765-0.772 test accuracy after the first epoch (docs/results/cpu-2core-default.md). "chapter" reproduces the
# chapter.
INITS = {
    "chapter": "the chapter's: every conv and dense weight ~ N(0, 0.01^2)",
    "glorot": "Glorot (Xavier) uniform, U(+-sqrt(6 / (fan_in + fan_out))): Keras's default, "
              "and d2l's xavier_uniform; every layer's signal and gradient far from zero",
}
DEFAULT_INIT = "glorot"


FINGERPRINT_SEED = 20261124
# The projections a fingerprint keeps per tensor: one fixed random direction cut into
# this many interleaved parts (element i in part i % FINGERPRINT_PARTS). A projection is
# linear, so an update's (final minus initial) is the difference of two fingerprints'; and
# the parts' projections of an update u have a summed square of about ||u||^2 whatever
# where in the tensor u lies, so a tensor left frozen, or stepped twice as far, is off by
# about its whole update (one projection alone is off by |N(0, 1)| of it: sometimes
# nearly nothing).
FINGERPRINT_PARTS = 8


def param_bytes(name: str) -> int:
    """The bytes of a model's parameters in float32, as many as its gradients: what an
    all-reduce or a parameter server moves per step (predict, the link's byte check)."""
    return 4 * sum(int(np.prod(s)) for s in get(name).PARAM_SHAPES)


def fingerprint(params, indices=None) -> list[list[float]]:
    """Per tensor, its L2 norm and its FINGERPRINT_PARTS projections on a fixed random
    direction (float64): what a run's record keeps of its final parameters (and then its
    model state), so that runs in other processes (ranks, stages, nodes) can be compared
    tensor by tensor, their updates too. `indices`: the tensors' places in that list (a
    pipeline stage's), which fix their directions."""
    out = []
    for i, p in zip(range(len(params)) if indices is None else indices, params):
        p = np.asarray(p, np.float64).ravel()
        direction = np.random.default_rng([FINGERPRINT_SEED, i]).standard_normal(p.size)
        parts = np.bincount(np.arange(p.size) % FINGERPRINT_PARTS, weights=p * direction,
                            minlength=FINGERPRINT_PARTS)
        out.append([float(np.linalg.norm(p)), *map(float, parts)])
    return out


def weight(init: str, shape: tuple, fan_in: int, fan_out: int, rng, scale: float) -> np.ndarray:
    """One weight tensor, float32: `scale` x N(0, 1) for the chapter's init (its scale
    is the model's), Glorot uniform for "glorot"."""
    if init == "chapter":
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    if init == "glorot":
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-limit, limit, shape).astype(np.float32)
    raise ValueError(f"unknown init {init!r}; choose from: {', '.join(INITS)}")


class UnknownModel(ValueError):
    pass


_CHECKED: dict[str, ModuleType] = {}


def get(name: str) -> ModuleType:
    """The model `name`, checked against the model interface (common/models/spec.py) the
    first time a process loads it."""
    if name in _CHECKED:
        return _CHECKED[name]
    base, _, size = name.rpartition("_")
    if _loadable(base) and size in getattr(get(base), "SIZES", ()):   # a model at another size
        return get(base).variant(size)
    if not _loadable(name):
        raise UnknownModel(f"unknown model {name!r}; choose from: {', '.join(choices())}")
    return register(importlib.import_module(f"{__name__}.{name}"))


def _loadable(name: str) -> bool:
    # a model file that is not yet in NAMES (being added) can be loaded by name
    return name in NAMES or (name.isidentifier()
                             and importlib.util.find_spec(f"{__name__}.{name}") is not None)


def choices() -> list[str]:
    """Every name --model takes: the models, and each one's other sizes (<model>_<size>)."""
    out = []
    for name in NAMES:
        m = get(name)
        out += [name, *(f"{name}_{s}" for s in getattr(m, "SIZES", ()) if s != "default")]
    return out


def check_models() -> list[str]:
    """What the conformance checks train: each model's CHECK_MODEL (itself or a small size)."""
    return [get(name).CHECK_MODEL for name in NAMES]


def family(name: str) -> str:
    """The model a sized name is a size of (vit_tiny -> vit); a model's own name else:
    what each framework's models.py keys its ops by."""
    return getattr(get(name), "FAMILY", name)


def register(module: ModuleType) -> ModuleType:
    """A model module, checked against the model interface (common/models/spec.py: a
    ModelError names everything it lacks), then what get(its NAME) returns: how the
    models here load, and how one from elsewhere (a plug-in, a test's toy model) joins
    them."""
    from common.models import spec
    _CHECKED[module.NAME] = spec.check(module)
    return module


def sgd_steps(model: ModuleType, params, batches, lr: float, state=None, shards: int = 1,
              unbiased_running_var: bool = True, state_order: str | None = None):
    """The reference training: SGD on the summed loss divided by the batch size, in
    float64. With shards > 1 each batch is cut as the frameworks cut it and every shard
    goes through the model on its own (BatchNorm normalises with that shard's
    statistics, as each replica of unsynchronised data parallelism does, and each
    micro-batch of a pipeline) and the shards' gradients are summed; `state` then
    follows the first shard, as the first replica's does; with state_order "forward"
    every shard in turn, as a pipeline's stages do, or "backward" in reverse (a
    framework that updates the running statistics in the backward pass, which meets the
    micro-batches in reverse). Returns the mean loss of every step and the final
    parameters."""
    params = [np.asarray(p, np.float64).copy() for p in params]
    losses = []
    for X, y in batches:
        total, grads = 0.0, None
        cuts = list(enumerate(shard_bounds(len(y), shards)))
        for i, (lo, hi) in cuts[::-1] if state_order == "backward" else cuts:
            loss, _, g = model.loss_and_grads(params, X[lo:hi], y[lo:hi],
                                              state=state if (i == 0 or state_order) else None,
                                              unbiased_running_var=unbiased_running_var)
            total += loss
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        losses.append(total / len(y))
        for p, g in zip(params, grads):
            p -= lr * g / len(y)
    return np.array(losses), params


def stage_cuts(model: ModuleType, k: int) -> list[tuple[int, int]]:
    """The unit ranges (lo, hi) of k pipeline stages (model mode): contiguous runs of
    model.UNITS whose largest summed model.UNIT_COST is as small as it can be (on a tie,
    the earlier cut). Stage i holds units lo..hi-1 and their parameters and state."""
    costs, n = list(model.UNIT_COST), len(model.UNITS)
    if not 1 <= k <= n:
        raise ValueError(f"{model.NAME} has {n} units to cut into stages: 1 to {n} stages, not {k}")
    prefix = np.concatenate([[0], np.cumsum(costs)])
    # best[j][i]: the smallest largest-stage cost of units 0..i-1 in j stages, and its last cut
    best = {(0, 0): (0.0, None)}
    for j in range(1, k + 1):
        for i in range(j, n - (k - j) + 1):
            best[(j, i)] = min((max(best[(j - 1, c)][0], prefix[i] - prefix[c]), c)
                               for c in range(j - 1, i) if (j - 1, c) in best)
    cuts, i = [], n
    for j in range(k, 0, -1):
        c = best[(j, i)][1]
        cuts.append((c, i))
        i = c
    return cuts[::-1]
