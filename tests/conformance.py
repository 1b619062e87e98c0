"""The contract's checks for one framework, run in a process of its own:

    python -m tests.conformance FRAMEWORK OUT_JSON

Writes {check: {"ok": bool, "detail": str}} to OUT_JSON; tests/test_conformance.py
turns each entry into a test. A check raises AssertionError with what differed."""
from __future__ import annotations

import json
import sys
import traceback

import numpy as np

from common import devices as dev, lenet, registry
from common.contract import NotApplicable

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def _rng(seed=0):
    return np.random.default_rng(seed)


def _batch(n=64, seed=0):
    r = _rng(seed)
    return r.random((n, 1, 28, 28), dtype=np.float32), r.integers(0, 10, n).astype(np.int64)


def _nontrivial_params(seed=3):
    """Weights large enough that every layer's signal and gradient is far from zero
    (the chapter's 0.01 initialisation leaves them tiny), biases non-zero."""
    r = _rng(seed)
    return [(r.standard_normal(s) * (0.3 / np.sqrt(np.prod(s[1:]) if len(s) > 1 else 1.0))
             ).astype(np.float32) for s in lenet.PARAM_SHAPES]


def _close(name, got, want, rtol=1e-4):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if want.ndim == 0 and got.size == 1:      # MXNet 1.x has no 0-d arrays: scalars are (1,)
        got = got.reshape(())
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    scale = max(np.abs(want).max(), 1e-12)
    err = np.abs(got - want).max() / scale
    assert err <= rtol, f"{name}: max error {err:.2e} of its largest value (allowed {rtol:.0e})"


def _scratch(b):
    return registry.KNOWN_GAPS.get((b.name, "scratch"))


@check
def device_api(b):
    n = b.num_gpus()
    assert isinstance(n, int) and n >= 0, f"num_gpus() gave {n!r}"
    assert b.try_gpu() == ("gpu:0" if n else "cpu:0"), f"try_gpu() gave {b.try_gpu()}"
    assert b.try_gpu(10_000) == "cpu:0", "try_gpu(i) without GPU i must give the CPU"
    all_gpus = b.try_all_gpus()
    assert all_gpus and all(dev.parse(d) for d in all_gpus), f"try_all_gpus() gave {all_gpus}"
    two = b.devices(2)
    assert len(two) == 2 and all(dev.parse(d) for d in two), f"devices(2) gave {two}"
    if not n and b.distinct_cpu_devices:
        assert two == ["cpu:0", "cpu:1"], f"devices(2) gave {two}"
    try:
        b.devices(0)
    except ValueError:
        pass
    else:
        raise AssertionError("devices(0) must raise ValueError")
    value = _rng().random((3, 4)).astype(np.float32)
    x = b.array(value, two[0])
    assert b.device_of(x) == two[0], f"array on {two[0]} reports {b.device_of(x)}"
    assert b.to_device(x, two[0]) is x, "to_device onto its own device must return x itself"
    y = b.to_device(x, two[1])
    assert b.device_of(y) == two[1], f"to_device onto {two[1]} gave {b.device_of(y)}"
    if two[0] != two[1]:
        assert y is not x, "to_device onto another device returned the same object"
    b.synchronize()
    np.testing.assert_array_equal(b.to_numpy(y), value)


@check
def oracle_chapter_init(b):
    """Outputs and gradients with the suite's own initial weights."""
    _against_oracle(b, lenet.init_params(0))


@check
def oracle_nontrivial_weights(b):
    """The same with weights where a layout or flatten-order bug cannot hide."""
    _against_oracle(b, _nontrivial_params())


def _against_oracle(b, params):
    X, y = _batch()
    logits, loss, grads = b.forward_backward(params, X, y)
    want_loss, want_logits, want_grads = lenet.loss_and_grads(params, X, y)
    _close("logits", logits, want_logits)
    _close("loss", loss, want_loss, rtol=1e-5)
    assert len(grads) == len(want_grads), f"{len(grads)} gradients, expected 8"
    for name, g, w in zip(lenet.PARAM_NAMES, grads, want_grads):
        _close(f"d loss / d {name}", g, w)


@check
def allreduce_in_place(b):
    if _scratch(b):
        return _expect_gap(b)
    devices = b.devices(2)
    values = [_rng(i).random((5, 3)).astype(np.float32) for i in range(2)]
    arrays = [b.array(v, d) for v, d in zip(values, devices)]
    kept = list(arrays)
    b.allreduce(arrays)
    assert all(a is k for a, k in zip(arrays, kept)), "allreduce replaced list entries"
    for i, a in enumerate(kept):
        assert b.device_of(a) == devices[i], "allreduce moved an array off its device"
        np.testing.assert_allclose(b.to_numpy(a), values[0] + values[1], rtol=1e-6,
                                   err_msg=f"device {i}'s array does not hold the sum")


@check
def split_batch_covers_batch(b):
    if _scratch(b):
        return _expect_gap(b)
    X, y = _batch(10)
    devices = b.devices(2)
    Xs, ys = b.split_batch(b.tensor(X, "cpu:0"), b.tensor(y, "cpu:0"), devices)
    assert len(Xs) == len(ys) == 2, "one shard per device expected"
    assert [b.device_of(s) for s in Xs] == devices, "shards are not on their devices"
    np.testing.assert_array_equal(np.concatenate([b.to_numpy(s) for s in Xs]), X)
    np.testing.assert_array_equal(np.concatenate([b.to_numpy(s) for s in ys]).astype(np.int64), y)


@check
def two_devices_equal_one(b):
    """k-device scratch steps equal 1-device steps on the full batch, and the
    replicas stay identical after every step."""
    if _scratch(b):
        return _expect_gap(b)
    params = _nontrivial_params()
    two, one = b.devices(2), b.devices(1)
    rep2 = [b.get_params(params, d) for d in two]
    rep1 = [b.get_params(params, one[0])]
    batches = [_batch(64, seed=s) for s in range(3)]
    want_losses, want_params = lenet.sgd_steps(params, batches, lr=0.2)
    for step, (X, y) in enumerate(batches):
        l2 = b.train_batch(b.tensor(X, "cpu:0"), b.tensor(y, "cpu:0"), rep2, two, 0.2)
        l1 = b.train_batch(b.tensor(X, "cpu:0"), b.tensor(y, "cpu:0"), rep1, one, 0.2)
        b.synchronize()
        _close(f"step {step} loss, 2 devices vs 1", b.to_numpy(l2), b.to_numpy(l1), rtol=1e-6)
        _close(f"step {step} loss vs the NumPy oracle", b.to_numpy(l2), want_losses[step], rtol=1e-5)
        first, second = (b.read_params(r) for r in rep2)
        for name, p, q, r in zip(lenet.PARAM_NAMES, first, second, b.read_params(rep1[0])):
            np.testing.assert_array_equal(p, q, err_msg=f"step {step}: replicas differ in {name}")
            _close(f"step {step}: {name}, 2 devices vs 1", p, r, rtol=1e-5)
    for name, p, w in zip(lenet.PARAM_NAMES, b.read_params(rep2[0]), want_params):
        _close(f"{name} after 3 steps vs the NumPy oracle", p, w, rtol=1e-4)


@check
def native_trainer_matches_oracle(b):
    """The native trainer in this process (2 devices where the framework runs them in
    one process, else 1): its replicas agree and its steps equal the oracle's; its
    load_params resets every replica."""
    n = 1 if b.native_uses_processes else 2
    params = _nontrivial_params()
    trainer = b.native_trainer(params, b.devices(n), 0.2)
    batches = [_batch(64, seed=s) for s in range(2)]
    want_losses, want_params = lenet.sgd_steps(params, batches, lr=0.2)
    handles = [trainer.step(X, y) for X, y in batches]
    _close("native step losses vs the NumPy oracle", trainer.losses(handles), want_losses, rtol=1e-5)
    replicas = trainer.replica_params()
    assert len(replicas) == n, f"{len(replicas)} replicas for {n} devices"
    for name, *copies in zip(lenet.PARAM_NAMES, *replicas):
        for c in copies[1:]:
            np.testing.assert_array_equal(copies[0], c, err_msg=f"replicas differ in {name}")
    for name, p, w in zip(lenet.PARAM_NAMES, replicas[0], want_params):
        _close(f"native {name} after 2 steps vs the NumPy oracle", p, w, rtol=1e-4)
    trainer.load_params(params)
    for replica in trainer.replica_params():
        for name, p, w in zip(lenet.PARAM_NAMES, replica, params):
            np.testing.assert_array_equal(p, w, err_msg=f"load_params did not reset {name}")
    assert trainer.predict(batches[0][0]).shape == (64,)


@check
def known_gaps_still_gaps(b):
    """A listed gap must still be one; an unlisted mode must not raise NotApplicable."""
    if _scratch(b):
        return _expect_gap(b)
    b.scratch_trainer(lenet.init_params(0), b.devices(1), 0.2)


def _expect_gap(b):
    params, devices = lenet.init_params(0), b.devices(1)
    for call in (lambda: b.scratch_trainer(params, devices, 0.2),
                 lambda: b.get_params(params, devices[0]),
                 lambda: b.allreduce([]),
                 lambda: b.train_batch(None, None, [], devices, 0.2)):
        try:
            call()
        except NotApplicable:
            continue
        raise AssertionError(f"{b.name} scratch is listed in KNOWN_GAPS but now works: "
                             "remove it from common.registry.KNOWN_GAPS")


def main(framework: str, out: str) -> int:
    b = registry.get(framework)
    b.setup(cpu_devices=2, threads=2)
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn(b)
            results[name] = {"ok": True, "detail": ""}
        except Exception as e:  # noqa: BLE001 - every check reports, none stops the others
            results[name] = {"ok": False, "detail": f"{type(e).__name__}: {e}\n"
                                                    f"{traceback.format_exc(limit=6)}"}
    with open(out, "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
