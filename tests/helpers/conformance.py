"""The contract's checks for one framework, run in a process of its own:

    python -m tests.helpers.conformance [--profiled] FRAMEWORK OUT_JSON [MODEL ...]

Writes {"check[model]": {"status": "passed"|"failed"|"skipped", "detail": str}} to
OUT_JSON; tests/test_conformance.py turns each entry into a test. A check declares
what it needs (a mode, a model feature); where the framework lists that as a known
gap the check is skipped with the gap's reason, and known_gaps_still_gaps checks
the gap the other way. A check raises AssertionError with what differed. `--profiled`
runs only the checks that need the framework's profiled process (main)."""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
import traceback

import numpy as np

from common.facts import devices as dev, registry
from common import models
from common.core import modes
from common.core.contract import NeedsGPU, NotApplicable
from tests.helpers import oracle_cache as oracle

CHECKS = {}   # name -> (function, needs, per_model)

# Float32 tolerances per model, relative to the largest value compared; gradients per
# tensor, relative to that tensor's own norm, ||got - want|| / ||want|| (_grads_close),
# so that a small tensor's gradient is held to its own size, not hidden behind the
# model's largest gradient. Measured per tensor (the worst tensor) for the five
# frameworks, both initial weights and batches 0-2 (the checks use batch 0):
# LeNet: within 1.0e-5 of each tensor's largest value and 7.6e-6 of its norm; 1e-4.
# ResNet-18 at batch 8: 4e-6 to 5e-6 where no ReLU flips (PyTorch, Paddle, batch 0).
# But among a batch's ~3.5 million pre-activations about 80 lie within 3e-5 standard
# deviations of zero, where the float32 rounding of the layers below decides the ReLU;
# a flip moves one value of the gradient entering a BatchNorm, which sums only
# 8 x 4 x 4 = 128 values per channel in the last stage, so that channel's conv weight
# gradient moves by up to half the tensor's largest value, and every earlier layer a
# little. Relative to a tensor's largest value: up to 0.49 (TensorFlow,
# stage4.block2.conv1.weight, batch 0), 0.08-0.16 in every framework on some batch;
# relative to its norm up to 3.2e-2 (TensorFlow, batch 0; the others 1.9e-2). That is
# float32's rounding, in no framework's implementation: the NumPy oracle itself run in
# float32 gives the same errors (0.49 on the same tensor), PyTorch's and TensorFlow's
# ops in float64 agree with the oracle to 1e-13 on the same batches, and the float64
# oracle with 1 to 13 ReLUs flipped (each within 2.6e-5 standard deviations of zero)
# agrees with each framework to 6e-5 per tensor. Which batches flip is luck, in every
# framework (PyTorch, chapter's weights, batch 1: 8.9e-2 of a tensor's largest value).
# The NumPy oracle in float32 over batches 0-29: at most 3.25e-2 of a tensor's norm
# (1.5e-2 from the chapter's weights); batch 0 with all its 86 ReLUs within 3e-5
# standard deviations of zero flipped at once: 4.1e-2. 0.1 holds that, and fails a
# tensor 20% wrong or zeroed (tests/test_conformance.py); a tensor 10% wrong is at the
# bound: errors of a few percent in one tensor are below what float32 lets a batch of 8
# show. The logits (1e-4) and the loss (1e-5) stay strict, so a layout or ordering bug
# in the forward pass cannot hide behind it.
# The checks train ResNet-18 at its tiny size (its CHECK_MODEL: two stages, 16 and 32
# channels); the bounds hold there with the same margins. Measured, five frameworks,
# both initial weights, batches 0-5 of 8: gradients within 1.1e-2 of their norm
# (PyTorch, TensorFlow, JAX, Paddle: stage1.block1.bn2.beta, chapter's weights, batch 0,
# the same tensor in each: float32's ReLU flips again) and 1.6e-2 (MXNet), the
# zero-in-theory ones within 8.7e-5 of their scale, logits 2.6e-6, the loss 1.2e-6,
# running statistics 3.3e-6 (each framework's forward_backward against the oracle, on
# the 2-vCPU Intel Xeon with AVX-512, 2026-11-29: a measurement, not a test).
# A conv bias followed by BatchNorm has a gradient of exactly zero in theory (the batch
# mean takes any per-channel constant away). float32 leaves the rounding of a sum of the
# gradient dz entering the BatchNorm; the same conv's weight gradient is the same sum of
# dz weighted by the conv's inputs (images, or ReLUs of BatchNorm outputs: of order one),
# so its largest value is the scale ("zero_grads"): measured at most 3e-5 of it (6.4e-5
# for the float32 oracle over batches 0-29); 1e-3 allowed. A BatchNorm backward that
# left out the batch mean would hand the bias gamma / std times the beta gradient: at
# least 0.35 of that scale in every layer.
# Parameters after SGD steps: LeNet's within tol["params"] of each tensor's largest
# value. ResNet-18's ("params": None) after its one step (CHECK_STEPS), where a tensor's
# update is lr times its gradient: each update against the oracle's relative to that
# update's own norm, with the gradients' bounds above (_updates_close), so that a small
# tensor's wrong update fails however large the model's other updates are (judged
# against the model's largest update, 5e-2 of it, a BatchNorm shift's update zeroed or
# doubled passed: tests/test_conformance.py). A ReLU that silences a channel leaves the
# next BatchNorm a variance near zero, and 1/sqrt(eps) = 316 then magnifies float32
# rounding: measured in PyTorch after one step at lr 0.2, batch 8 and 16, one and two
# shards, 2e-6 to 1.8e-2 of the largest update; normalising per shard instead of over
# the full batch moves the parameters by 80-100% of it.
TOLERANCES = {
    "lenet": {"logits": 1e-4, "loss": 1e-5, "grads": 1e-4, "zero_grads": None,
              "step_loss": 1e-5, "params": 1e-4, "state": 1e-5},
    "resnet18_tiny": {"logits": 1e-4, "loss": 1e-5, "grads": 1e-1, "zero_grads": 1e-3,
                      "step_loss": 1e-5, "params": None,
                      # running statistics after one step: batch means and variances,
                      # sums that float32 gets to ~1e-6; the biased and unbiased variance
                      # differ by 1/(n-1) of the batch's share, 3e-5 and more in the last
                      # stage
                      "state": 1e-5},
    # the ViT's tiny size (its CHECK_MODEL): no BatchNorm, LeNet's bounds
    "vit_tiny": {"logits": 1e-4, "loss": 1e-5, "grads": 1e-4, "zero_grads": None,
                 "step_loss": 1e-5, "params": 1e-4, "state": 1e-5},
}


ORACLE_BATCH = {"lenet": 64, "resnet18_tiny": 8, "vit_tiny": 16}
# SGD steps of the multi-step checks. ResNet-18 is checked on one step: with
# non-trivial weights one step at lr 0.2 takes its loss from 3.1 to 24 (and at lr
# 0.02 still far), where BatchNorm's 1/std amplifies float32 rounding of the first
# step into errors of several percent in the second step's gradients (measured
# between float32 frameworks and the float64 oracle alike; float64 PyTorch agrees
# with the oracle to 1e-14). The 20-step runs of tests/test_training.py cover the
# longer haul with the chapter's initialisation.
CHECK_STEPS = {"lenet": 2, "resnet18_tiny": 1, "vit_tiny": 2}
CHECK_LR = 0.2


class Skipped(Exception):
    pass


def check(needs: str | None = None, per_model: bool | tuple = True):
    """Register a check; `needs` names a capability (a mode) that a known gap may lack;
    `per_model`: run once per model, once (False), or for these models only (a tuple)."""
    def register(fn):
        CHECKS[fn.__name__] = (fn, needs, per_model)
        return fn
    return register


def _rng(seed=0):
    return np.random.default_rng(seed)


def _batch(n=64, seed=0):
    r = _rng(seed)
    return r.random((n, 1, 28, 28), dtype=np.float32), r.integers(0, 10, n).astype(np.int64)


def _nontrivial_params(model, seed=3):
    """Weights large enough that every layer's signal and gradient is far from zero
    (the chapter's 0.01 initialisation leaves them tiny), biases non-zero, BatchNorm
    scales near one."""
    r = _rng(seed)
    out = []
    for name, s in zip(model.PARAM_NAMES, model.PARAM_SHAPES):
        gain = 0.3
        if name.endswith("gamma"):
            out.append((1 + 0.1 * r.standard_normal(s)).astype(np.float32))
        else:
            out.append((r.standard_normal(s) * (gain / np.sqrt(np.prod(s[1:]) if len(s) > 1 else 1.0))
                        ).astype(np.float32))
    return out


def _close(name, got, want, rtol=1e-4, floor=1e-12, of="its largest value"):
    """Largest error relative to the largest expected value (at least `floor`)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if want.ndim == 0 and got.size == 1:      # MXNet 1.x has no 0-d arrays: scalars are (1,)
        got = got.reshape(())
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    scale = max(np.abs(want).max(), floor)
    err = np.abs(got - want).max() / scale
    assert err <= rtol, f"{name}: max error {err:.2e} of {of} (allowed {rtol:.0e})"


def _zero_in_theory(model) -> dict[int, int]:
    """The gradients that are exactly zero in theory, each with the gradient whose
    largest value is the scale of its rounding (see TOLERANCES): ResNet-18's conv biases
    followed by BatchNorm, with their own conv's weight gradient."""
    if not hasattr(model, "BLOCKS"):
        return {}
    convs = [model.STEM["conv"], *(b[c] for b in model.BLOCKS for c in ("conv1", "conv2"))]
    return {c["bias"]: c["weight"] for c in convs}


def _grads_close(model, got, want, tol, of="d loss / d {}"):
    """Each gradient against the oracle's relative to its own norm (tol["grads"]), so that
    a wrong gradient in a small tensor fails however large the model's other gradients
    are; one that is zero in theory against the scale _zero_in_theory names
    (tol["zero_grads"]). `of` names a tensor's value from its parameter's name."""
    assert len(got) == len(want), f"{len(got)} gradients, expected {len(want)}"
    zero = _zero_in_theory(model)
    for i, (pname, g, w) in enumerate(zip(model.PARAM_NAMES, got, want)):
        name = of.format(pname)
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert g.shape == w.shape, f"{name}: shape {g.shape}, expected {w.shape}"
        if i in zero:
            _close(f"{name} (zero in theory)", g, w, tol["zero_grads"], np.abs(want[zero[i]]).max(),
                   f"{of.format(model.PARAM_NAMES[zero[i]])}'s largest value")
            continue
        err = np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-300)
        assert err <= tol["grads"], (f"{name}: error {err:.2e} of its norm (allowed "
                                     f"{tol['grads']:.0e}; largest error {np.abs(g - w).max():.2e} "
                                     f"of largest value {np.abs(w).max():.2e})")


def _updates_close(model, what, got, want, initial, tol):
    """Parameters after SGD steps against the oracle's (TOLERANCES): LeNet's each within
    tol["params"] of its largest value; ResNet-18's each update (final minus `initial`)
    as _grads_close holds a gradient, relative to its own norm."""
    if tol["params"] is not None:
        for pname, p, w in zip(model.PARAM_NAMES, got, want):
            _close(f"{what}: {pname}", p, w, tol["params"])
        return
    start = [np.asarray(p, np.float64) for p in initial]
    _grads_close(model, [np.asarray(p, np.float64) - p0 for p, p0 in zip(got, start)],
                 [np.asarray(w, np.float64) - p0 for w, p0 in zip(want, start)], tol,
                 f"{what}: {{}}'s update")


def _unbiased(b, name):
    return b.model_ops(name).unbiased_running_var


@check(per_model=False)
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


@check()
def oracle_chapter_init(b, name):
    """Outputs, gradients and state after one step with the suite's own initial weights."""
    _against_oracle(b, name, models.get(name).init_params(0, "chapter"))


@check()
def oracle_nontrivial_weights(b, name):
    """The same with weights where a layout or flatten-order bug cannot hide."""
    _against_oracle(b, name, _nontrivial_params(models.get(name)))


def _against_oracle(b, name, params):
    model, tol = models.get(name), TOLERANCES[name]
    X, y = _batch(ORACLE_BATCH[name])
    state = model.init_state()
    logits, loss, grads, new_state = b.forward_backward(name, params, X, y, state)
    want_state = [s.astype(np.float64) for s in state]
    want_loss, want_logits, want_grads = oracle.loss_and_grads(
        model, params, X, y, state=want_state, unbiased_running_var=_unbiased(b, name))
    _close("logits", logits, want_logits, tol["logits"])
    _close("loss", loss, want_loss, tol["loss"])
    _grads_close(model, grads, want_grads, tol)
    assert len(new_state) == len(want_state), f"{len(new_state)} state arrays, expected {len(want_state)}"
    for sname, s, w in zip(model.STATE_NAMES, new_state, want_state):
        _close(f"{sname} after one step", s, w, tol["state"])


@check(needs="scratch", per_model=False)
def allreduce_in_place(b):
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


@check(needs="scratch", per_model=False)
def split_batch_covers_batch(b):
    """Shards on their devices, in order, cut as common.facts.data.shard_bounds: a batch the
    device count does not divide included."""
    from common.facts.data import shard_bounds
    for n in (10, 11):
        X, y = _batch(n)
        devices = b.devices(2)
        Xs, ys = b.split_batch(b.tensor(X, "cpu:0"), b.tensor(y, "cpu:0"), devices)
        assert len(Xs) == len(ys) == 2, "one shard per device expected"
        assert [b.device_of(s) for s in Xs] == devices, "shards are not on their devices"
        sizes = [len(b.to_numpy(s)) for s in Xs]
        assert sizes == [hi - lo for lo, hi in shard_bounds(n, 2)], f"batch {n} cut as {sizes}"
        np.testing.assert_array_equal(np.concatenate([b.to_numpy(s) for s in Xs]), X)
        np.testing.assert_array_equal(np.concatenate([b.to_numpy(s) for s in ys]).astype(np.int64), y)


@check(needs="scratch")
def scratch_two_devices_match_oracle(b, name):
    """2-device scratch steps equal the oracle run per shard with the gradients summed
    (for a model without BatchNorm, that is 1-device training on the full batch, also
    checked directly); the replicas' parameters stay identical after every step."""
    model, tol = models.get(name), TOLERANCES[name]
    params, n = _nontrivial_params(model), ORACLE_BATCH[name]
    # 1 device on the full batch equals 2 only without BatchNorm (each shard normalises by
    # its own statistics): a model with it runs no 1-device step here (one compilation less)
    with_one = not model.STATE_NAMES
    two, one = b.devices(2), b.devices(1)
    rep2 = [b.get_params(params, d, name, model.init_state()) for d in two]
    rep1 = [b.get_params(params, one[0], name, model.init_state())] if with_one else []
    batches = [_batch(n, seed=s) for s in range(CHECK_STEPS[name])]
    lr = CHECK_LR
    want_losses, want_params, _ = _oracle_steps(name, 2, _unbiased(b, name))
    from common.core.scratch import train_batch
    execution = registry.default_execution(b.name, "scratch")
    step2 = b.bind_train_batch(train_batch, rep2, two, lr, execution)
    step1 = b.bind_train_batch(train_batch, rep1, one, lr, execution) if with_one else None
    for step, (X, y) in enumerate(batches):
        l2 = step2(b.tensor(X, "cpu:0"), b.tensor(y, "cpu:0"))
        l1 = step1(b.tensor(X, "cpu:0"), b.tensor(y, "cpu:0")) if with_one else None
        b.synchronize()
        _close(f"step {step} loss vs the per-shard oracle", b.to_numpy(l2), want_losses[step],
               tol["step_loss"])
        if with_one:
            _close(f"step {step} loss, 2 devices vs 1", b.to_numpy(l2), b.to_numpy(l1), 1e-6)
        first, second = (b.read_params(r) for r in rep2)
        for pname, p, q in zip(model.PARAM_NAMES, first, second):
            np.testing.assert_array_equal(p, q, err_msg=f"step {step}: replicas differ in {pname}")
        if with_one:
            for pname, p, r in zip(model.PARAM_NAMES, first, b.read_params(rep1[0])):
                _close(f"step {step}: {pname}, 2 devices vs 1", p, r, 1e-5)
    _updates_close(model, f"after {len(batches)} steps vs the per-shard oracle",
                   b.read_params(rep2[0]), want_params, params, tol)


def _one_model_steps_match_oracle(b, trainer, model, params, what, shards=2):
    """The CHECK_STEPS steps of a trainer that holds one model over 2 devices (sharded,
    fsdp: the batch cut into 2 shards; tensor: 1, every device runs the whole batch)
    against the oracle run per shard: losses, parameters, the first device's running
    statistics. Returns the parameters after them (common layout)."""
    name, tol = model.NAME, TOLERANCES[model.NAME]
    batches = [_batch(ORACLE_BATCH[name], seed=s) for s in range(CHECK_STEPS[name])]
    want_losses, want_params, want_state = _oracle_steps(name, shards, _unbiased(b, name))
    handles = [trainer.step(X, y) for X, y in batches]
    _close(f"{what} step losses vs the oracle ({shards} shard{'s' * (shards > 1)})", trainer.losses(handles),
           want_losses, tol["step_loss"])
    (got,) = trainer.replica_params()
    _updates_close(model, f"{what}, after {len(batches)} steps vs the oracle ({shards} shard{'s' * (shards > 1)})",
                   got, want_params, params, tol)
    for sname, st, w in zip(model.STATE_NAMES, trainer.replica_state()[0], want_state):
        _close(f"{what} {sname} after {len(batches)} steps vs the oracle", st, w, tol["state"])
    return got


def _holds_rows(held, whole, model, rows_of) -> list[int]:
    """held[i][p] (what device i keeps of parameter p between steps) is rows_of(p)[i] of
    the whole parameter whole[p] (framework layout), by shape and by content. Returns
    each device's bytes of them."""
    kept = [0] * len(held)
    for p, full in enumerate(whole):
        for i, (lo, hi) in enumerate(rows_of(full)):
            assert held[i][p].shape == full[lo:hi].shape, (
                f"device {i} holds {held[i][p].shape} of {model.PARAM_NAMES[p]} {full.shape}, "
                f"not rows {lo}:{hi}")
            np.testing.assert_array_equal(held[i][p], full[lo:hi])
            kept[i] += full[lo:hi].nbytes
    return kept


@check(needs="sharded")
def sharded_two_devices_match_oracle(b, name):
    """Sharded data parallelism by hand (common/core/sharded.py) on 2 devices: its steps
    equal the oracle run per shard with the gradients summed (what scratch mode's steps
    are held to), its evaluation is the oracle's; between steps each device keeps only its
    rows of every parameter: by shape shard_bounds' rows of the first axis, by content
    those rows of the whole parameters, the two shards the whole model; and the bytes a
    step sends are 2(k-1)/k of the parameters' (perf.sharded_bytes, gathered once)."""
    from common.core import perf
    from common.core.sharded import ShardedTrainer
    from common.facts.data import shard_bounds
    model, tol = models.get(name), TOLERANCES[name]
    params = _nontrivial_params(model)
    trainer = ShardedTrainer(b, name, params, model.init_state(), b.devices(2), CHECK_LR,
                             registry.default_execution(b.name, "sharded"))
    got = _one_model_steps_match_oracle(b, trainer, model, params, "sharded")
    whole = [np.asarray(w) for w in b.model_ops(name).to_framework(got)]
    kept = _holds_rows(trainer.shard_arrays(), whole, model, lambda w: shard_bounds(w.shape[0], 2))
    fig = trainer.figures()
    assert fig["shard_bytes"] == kept
    assert fig["grad_bytes"] == kept, (
        f"the devices update their rows with {fig['grad_bytes']} bytes of gradients, not "
        f"their rows' {kept}: a gradient not reduce-scattered")
    assert sum(fig["shard_bytes"]) == fig["param_bytes"] == 4 * sum(
        int(np.prod(s)) for s in model.PARAM_SHAPES), "the shards are not the whole model"
    assert fig["sent_bytes_per_step"] == [perf.sharded_bytes(fig["param_bytes"], 2, regather=False)] * 2
    _evaluation_matches_oracle(trainer, model, tol, "sharded")


def _holds_parts(trainer, model, got, b) -> dict:
    """Each of the 2 devices holds its half of every weight the model's TENSOR_SPLIT cuts
    (along that axis) and the rest whole, by shape and by content, from the parameters
    `got` (common layout); the trainer's figures count those bytes: the halves and the
    replicated whole, computed from the model's shapes. Returns the figures."""
    whole = [np.asarray(w) for w in b.model_ops(model.NAME).to_framework(got)]
    held = trainer.shard_arrays()
    for p, (full, axis) in enumerate(zip(whole, model.TENSOR_SPLIT)):
        for i in range(2):
            want = full if axis is None else np.split(full, 2, axis=axis)[i]
            assert held[i][p].shape == want.shape, (
                f"device {i} holds {held[i][p].shape} of {model.PARAM_NAMES[p]} {full.shape}, "
                f"not {want.shape}")
            np.testing.assert_array_equal(held[i][p], want, err_msg=f"device {i}: {model.PARAM_NAMES[p]}")
    sizes = [4 * int(np.prod(s)) for s in model.PARAM_SHAPES]
    replicated = sum(n for n, axis in zip(sizes, model.TENSOR_SPLIT) if axis is None)
    fig = trainer.figures()
    assert fig["replicated_bytes"] == replicated and fig["param_bytes"] == sum(sizes)
    assert fig["shard_bytes"] == [replicated + (sum(sizes) - replicated) // 2] * 2, fig["shard_bytes"]
    if "grad_bytes" in fig:        # where the trainer reads its gradients (tensor mode by hand)
        assert fig["grad_bytes"] == fig["shard_bytes"], (
            f"the devices' gradients are {fig['grad_bytes']} bytes, not those of their parts "
            f"{fig['shard_bytes']}")
    return fig


@check(needs="tensor", per_model=("vit_tiny",))
def tensor_two_devices_match_oracle(b, name):
    """Tensor parallelism by hand (common/core/tensor.py) on 2 devices: its steps equal the
    1-device oracle on the whole batch, its evaluation the oracle's; each device holds
    its half of every split weight (TENSOR_SPLIT: Q, K, V and fc1 by columns, the output
    projection and fc2 by rows) and the rest whole (_holds_parts), and the bytes its
    all-reduces send a step are the formula's (perf.tensor_parallel_bytes: two
    all-reduces of batch x tokens x width per block forward, two backward)."""
    from common.core import perf
    from common.core.tensor import TensorTrainer
    model, tol = models.get(name), TOLERANCES[name]
    params = _nontrivial_params(model)
    trainer = TensorTrainer(b, name, params, model.init_state(), b.devices(2), CHECK_LR,
                            registry.default_execution(b.name, "tensor"))
    got = _one_model_steps_match_oracle(b, trainer, model, params, "tensor", shards=1)
    fig = _holds_parts(trainer, model, got, b)
    size = model.SIZE
    activations = 4 * ORACLE_BATCH[name] * model.TOKENS * size["width"]
    assert fig["sent_bytes_per_step"] == [perf.tensor_parallel_bytes(activations, size["blocks"], 2)] * 2, (
        f"the all-reduces sent {fig['sent_bytes_per_step']} bytes a step, not the formula's")
    _evaluation_matches_oracle(trainer, model, tol, "tensor")


@check(needs="tp", per_model=("vit_tiny",))
def tp_two_devices_match_oracle(b, name):
    """The framework's own tensor parallelism (tp mode) on 2 devices: its steps equal the
    1-device oracle on the whole batch, its evaluation the oracle's; each device holds
    its half of every weight TENSOR_SPLIT cuts and the rest whole (_holds_parts); a
    compiled step's program has collectives (which ones is the compiler's choice)."""
    if b.facts.native_processes:
        raise Skipped(f"{b.name}'s tp mode runs a process per device: held to the oracle "
                      "through the worker (tests/test_training.py)")
    model, tol = models.get(name), TOLERANCES[name]
    params = _nontrivial_params(model)
    trainer = b.tp_trainer(name, params, b.devices(2), CHECK_LR, registry.default_execution(b.name, "tp"))
    got = _one_model_steps_match_oracle(b, trainer, model, params, "tp", shards=1)
    fig = _holds_parts(trainer, model, got, b)
    moved = fig.get("collective_bytes")
    if moved is not None:
        assert sum(moved.values()) > 0, f"the step's program has no collective: {moved}"
    _evaluation_matches_oracle(trainer, model, tol, "tp")


@check(needs="fsdp")
def fsdp_two_devices_match_oracle(b, name):
    """The framework's own sharded data parallelism (fsdp mode) on 2 devices: its steps
    equal the oracle run per shard, its evaluation the oracle's, the batch split over the
    devices; between steps each device holds its rows of every parameter whose first
    axis 2 divides (the rest whole), by shape and by content, and those are at least
    four fifths of the model's bytes."""
    from common.facts.data import shard_bounds
    if b.facts.native_processes:
        raise Skipped(f"{b.name}'s fsdp mode runs a process per device: held to the oracle "
                      "through the worker (tests/test_training.py)")
    model, tol = models.get(name), TOLERANCES[name]
    params = _nontrivial_params(model)
    try:
        trainer = b.fsdp_trainer(name, params, b.devices(2), CHECK_LR,
                                 registry.default_execution(b.name, "fsdp"))
    except NotApplicable as e:
        if name == "lenet":      # the mode's own model: a framework without it lists the gap
            raise
        raise Skipped(f"{b.name}'s fsdp mode cannot run {name}: {e}") from None
    got = _one_model_steps_match_oracle(b, trainer, model, params, "fsdp")
    _placement_matches(trainer, model, 2, ORACLE_BATCH[name], "fsdp")
    whole = [np.asarray(w) for w in b.model_ops(name).to_framework(got)]
    kept = _holds_rows(trainer.shard_arrays(), whole, model, lambda w: (
        shard_bounds(w.shape[0], 2) if w.shape[0] % 2 == 0 else [(0, w.shape[0])] * 2))
    total = sum(w.nbytes for w in whole)
    sharded = sum(w.nbytes for w in whole if w.shape[0] % 2 == 0)
    assert sharded >= 0.8 * total, f"only {sharded / total:.0%} of the parameters' bytes are sharded"
    fig = trainer.figures()
    assert fig["shard_bytes"] == kept
    moved = fig.get("collective_bytes")
    if "grad_bytes" in fig:        # where the trainer reads its gradients (TensorFlow's
        # DTensor; JAX's compiled step, from its HLO): each device's rows, or the whole
        # gradient where the program reduces none in parts (XLA:CPU's: its all-reduce hands
        # every device the whole gradient, which each slices; no reduce-scatter)
        whole_grads = moved is not None and not moved["reduce-scatter"] and (
            moved["all-reduce"] >= fig["param_bytes"])
        expected = [fig["param_bytes"]] * 2 if whole_grads else kept
        what = "the whole gradient's" if whole_grads else "their rows'"
        assert fig["grad_bytes"] == expected, (
            f"the devices update their rows with {fig['grad_bytes']} bytes of gradients, not "
            f"{what} {expected}")
    if moved is not None:      # a compiled program: which collectives is XLA's choice (for
        # ResNet-18 it gathers half the weights and moves activations instead), but the
        # devices cannot agree without some
        assert sum(moved.values()) > 0, f"the step's program has no collective: {moved}"
    _evaluation_matches_oracle(trainer, model, tol, "fsdp")


@check()
def native_trainer_matches_oracle(b, name):
    """The native trainer in this process (2 devices where the framework runs them in
    one process, else 1), in its default execution: its replicas agree, its steps equal
    the oracle's (per shard), its evaluation is the oracle's; load_params resets every
    replica."""
    _trainer_matches_oracle(b, name, "native", None)


@check()
def every_execution_matches_oracle(b, name):
    """The trainers the checks above do not cover, held to the oracle the same way
    (steps, state, evaluation, load_params), so that compiled steps equal eager ones
    within float32's tolerances. LeNet (EVERY_EXECUTION): each execution the framework
    has (eager, graph, compiled) in each mode it has, besides the defaults. ResNet-18
    and the ViT, whose every replica costs a compilation (torch.compile's of the tiny
    ViT: 20-35 s a trainer here): the compiled execution on one device, in scratch mode
    (native for a framework without one), unless compiled is that mode's default
    (then the checks above ran it); and ResNet-18's scratch trainer in its default
    execution (its evaluation with BatchNorm's running statistics; its 2-device steps
    are checked above)."""
    ran = []
    first = "native" if (b.name, "scratch") in registry.KNOWN_GAPS else "scratch"
    every = name in EVERY_EXECUTION
    not_here = COMPILED_NOT_CHECKED.get((b.name, models.family(name)))
    for mode in ("scratch", "native"):
        if (b.name, mode) in registry.KNOWN_GAPS:
            continue
        default = registry.default_execution(b.name, mode)
        for execution in registry.EXECUTIONS:
            if (b.name, execution) in registry.KNOWN_GAPS:
                continue
            if every:
                run = execution != default
            else:
                # where compiled is the default it was held to the oracle above
                run = mode == first and ((execution == "compiled" and execution != default) or
                                         (mode == "scratch" and execution == default
                                          and bool(models.get(name).STATE_NAMES)))
            if run and execution == "compiled" and not_here:
                continue
            if run:
                devices = None if every or execution == default else 1
                _trainer_matches_oracle(b, name, mode, None if execution == default else execution,
                                        devices=devices)
                ran.append(f"{mode} {execution}")
    compiled_default = registry.default_execution(b.name, first) == "compiled"
    if not ran and not_here:
        raise Skipped(f"{b.name}'s compiled {name} is not checked here: {not_here}")
    assert ran or (not every and compiled_default), (
        f"{b.name} has no trainer besides those checked above")


# the models whose every execution is checked in every mode (each costs a compilation)
EVERY_EXECUTION = ("lenet",)
# (framework, model family) -> why that model's compiled execution is not checked: the
# check would hold no program that the framework's other compiled checks do not
COMPILED_NOT_CHECKED = {
    ("keras-torch", "resnet18"):
        "torch.compile breaks Keras 3.15's train step at every BatchNormalization (its torch "
        "`moments` hands torch.mean a TrackedList) and reaches Dynamo's recompile limit, so "
        "the step runs partly eager; Keras's compiled train step is held to the oracle on "
        "LeNet and the ViT (61-74 s of a test run's time, docs/testing.md)",
}


_ORACLE_STEPS = {}


def _oracle_steps(name, shards, unbiased):
    """The oracle's CHECK_STEPS steps from _nontrivial_params on the checks' batches, cut
    into `shards` (losses, parameters, the first shard's running statistics); computed
    once per process, since several checks compare against the same (ResNet-18's
    float64 oracle takes seconds)."""
    key = (name, shards, unbiased)
    if key not in _ORACLE_STEPS:
        model = models.get(name)
        batches = [_batch(ORACLE_BATCH[name], seed=s) for s in range(CHECK_STEPS[name])]
        state = [s.astype(np.float64) for s in model.init_state()]
        losses, params = oracle.sgd_steps(model, _nontrivial_params(model), batches, CHECK_LR,
                                          state=state, shards=shards, unbiased_running_var=unbiased)
        _ORACLE_STEPS[key] = (losses, params, state)
    losses, params, state = _ORACLE_STEPS[key]
    return losses.copy(), [p.copy() for p in params], [s.copy() for s in state]


def _native_devices(b, name) -> int:
    """The devices of the native checks: 2 where the framework runs them in one process
    with each replica's own BatchNorm statistics (what the oracle per shard computes),
    else 1 (a process per device; a known gap: one device, or BatchNorm over the full
    batch alone)."""
    one = (b.facts.native_processes or registry.gap(b.name, "multi-device")
           or (models.get(name).STATE_NAMES and registry.gap(b.name, "replica-bn")))
    return 1 if one else 2


def _trainer(b, name, mode, execution, params, n):
    execution = execution or registry.default_execution(b.name, mode)
    if mode == "native":
        return b.native_trainer(name, params, b.devices(n), CHECK_LR, execution)
    from common.core.scratch import ScratchTrainer
    return ScratchTrainer(b, name, params, models.get(name).init_state(), b.devices(n), CHECK_LR,
                          execution)


def _trainer_matches_oracle(b, name, mode, execution, devices=None):
    model, tol = models.get(name), TOLERANCES[name]
    n = devices or (_native_devices(b, name) if mode == "native" else 2)
    params = _nontrivial_params(model)
    try:
        trainer = _trainer(b, name, mode, execution, params, n)
    except NeedsGPU:
        if b.num_gpus():
            raise
        n = 1                  # the execution runs on one CPU device only (a NeedsGPU gap)
        trainer = _trainer(b, name, mode, execution, params, n)
    what = f"{mode} {execution or 'default'}"
    batches = [_batch(ORACLE_BATCH[name], seed=s) for s in range(CHECK_STEPS[name])]
    # the running statistics follow the first shard
    want_losses, want_params, want_state = _oracle_steps(name, n, _unbiased(b, name))
    handles = [trainer.step(X, y) for X, y in batches]
    _close(f"{what} step losses vs the oracle", trainer.losses(handles), want_losses, tol["step_loss"])
    replicas = trainer.replica_params()
    assert len(replicas) == n, f"{len(replicas)} replicas for {n} devices"
    for pname, *copies in zip(model.PARAM_NAMES, *replicas):
        for c in copies[1:]:
            np.testing.assert_array_equal(copies[0], c, err_msg=f"{what}: replicas differ in {pname}")
    _updates_close(model, f"{what} after {len(batches)} steps vs the oracle", replicas[0],
                   want_params, params, tol)
    # each replica's running statistics follow its own shard (no sync-bn here); the
    # first replica's equal the oracle's on the first shard
    for sname, st, w in zip(model.STATE_NAMES, trainer.replica_state()[0], want_state):
        _close(f"{what} {sname} after {len(batches)} steps vs the oracle", st, w, tol["state"])
    _placement_matches(trainer, model, n, ORACLE_BATCH[name], what)
    _evaluation_matches_oracle(trainer, model, tol, what)
    trainer.load_params(params, model.init_state())
    for replica in trainer.replica_params():
        for pname, p, w in zip(model.PARAM_NAMES, replica, params):
            np.testing.assert_array_equal(p, w, err_msg=f"{what}: load_params did not reset {pname}")
    for replica in trainer.replica_state():
        for sname, s, w in zip(model.STATE_NAMES, replica, model.init_state()):
            np.testing.assert_array_equal(s, w, err_msg=f"{what}: load_params did not reset {sname}")


# One device's share of the compiled step's FLOPs (XLA's cost analysis) per image of the
# batch, against the model's counted FLOPs per image: measured in JAX on 1 and 2 devices,
# LeNet 0.99 and 0.50, ResNet-18 0.85 and 0.43 (XLA counts ResNet-18's convolutions a
# little lower); a batch copied to both devices gives each device the whole batch's.
FLOPS_SHARE = (0.7, 1.3)


def _placement_matches(trainer, model, n, batch, what):
    """Where the numbers do not show where the batch went (Trainer.numbers_show_placement),
    the trainer's placement does (placement_is)."""
    if not trainer.numbers_show_placement:
        placement_is(trainer.placement(), model, n, 1, n, batch, what)


def placement_is(placed, model, n, processes, local, batch, what):
    """A step's placement (Trainer.placement) spans n devices in `processes` processes,
    each of this process's `local` devices held batch / n rows of the step's images, and
    each ran 1/n of the step's FLOPs (a batch copied to every device instead gives the
    same numbers, at n times the work; a process whose mesh held its own devices alone,
    its rows alone)."""
    assert placed is not None, f"{what}: the trainer does not say where its batch went"
    assert (placed["devices"], placed["processes"]) == (n, processes), (
        f"{what}: the step spans {placed['devices']} devices in {placed['processes']} "
        f"process(es), not {n} in {processes}")
    assert placed["rows"] == [batch // n] * local, (
        f"{what}: the devices held {placed['rows']} rows of the step's {batch} images, "
        f"not {batch // n} each")
    if placed["flops"] is not None:
        share = placed["flops"] / (model.TRAIN_FLOPS_PER_IMAGE * batch)
        lo, hi = (f / n for f in FLOPS_SHARE)
        assert lo <= share <= hi, (f"{what}: one device ran {share:.2f} of the step's FLOPs, "
                                   f"not 1/{n} ({lo:.2f} to {hi:.2f})")


def _predict_matches_oracle(predicted, want_logits, tol, what):
    """The predicted classes are the oracle's labels (the argmax of its logits) on every
    image whose top two oracle logits lie further apart than the logits' tolerance lets
    the trainer's move (elsewhere rounding may pick either); those are nearly all."""
    top2 = np.sort(want_logits, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * tol * np.abs(want_logits).max()
    assert clear.mean() >= 0.9, f"{what}: only {clear.mean():.0%} of the oracle's labels are clear"
    labels = want_logits.argmax(axis=1)
    wrong = np.flatnonzero((np.asarray(predicted) != labels) & clear)
    assert not len(wrong), (f"{what}: predict gave {np.asarray(predicted)[wrong[:5]]} where the "
                            f"oracle's labels are {labels[wrong[:5]]} (images {wrong[:5]})")


def _evaluation_matches_oracle(trainer, model, tol, what):
    """The trainer's evaluation logits are the oracle's evaluation-mode forward with the
    trainer's own parameters and running statistics (an evaluation that normalised with
    the batch's statistics instead would differ by far more than float32 rounding), its
    predictions the oracle's labels, and evaluating changes no parameter or state."""
    params, state = trainer.replica_params()[0], trainer.replica_state()[0]
    X, _ = _batch(ORACLE_BATCH[model.NAME], seed=7)
    want = model.forward(params, X, state=[s.astype(np.float64) for s in state], training=False)
    _close(f"{what} evaluation logits vs the oracle's evaluation forward", trainer.logits(X), want,
           tol["logits"])
    _predict_matches_oracle(trainer.predict(X), want, tol["logits"], what)
    for pname, p, q in zip(model.PARAM_NAMES, params, trainer.replica_params()[0]):
        np.testing.assert_array_equal(p, q, err_msg=f"{what}: evaluating changed {pname}")
    for sname, s, q in zip(model.STATE_NAMES, state, trainer.replica_state()[0]):
        np.testing.assert_array_equal(s, q, err_msg=f"{what}: evaluating changed {sname}")


# Micro-batch counts of the model-mode checks (2 stages): for LeNet any M is the
# full-batch step (M = 1 is checked against 1 device); ResNet-18's BatchNorm
# normalises each micro-batch by itself (M = 1: the full batch, against 1 device).
MODEL_MICRO_BATCHES = {"lenet": (4,), "resnet18_tiny": (2,), "vit_tiny": (2,)}
# A 2-stage step against the 1-device step (the native trainer on one device), where
# they must be equal: the same sums of float32 products, cut at other places (the
# micro-batches' gradients summed, or another kernel: Keras fit, a tf.function).
# Measured, relative to the largest value: step losses 0 to 1e-7, LeNet's parameters
# after two steps 0 to 9e-6 (Paddle, M = 4); ResNet-18's parameters hold to the
# oracle checks' floor (rounding that BatchNorm magnifies, see TOLERANCES).
ONE_DEVICE = {"loss": 1e-6, "lenet_params": 5e-5}


def _pipeline(b, name, params, M, k=2, schedule="gpipe"):
    from common.core.pipeline import PipelineTrainer
    return PipelineTrainer(b, name, params, models.get(name).init_state(), b.devices(k), CHECK_LR, M,
                           schedule=schedule)


# The schedules held to the oracle per micro-batch: ResNet-18's both (BatchNorm over
# each micro-batch, the running statistics updated in the schedule's order: its
# backwards run in another order, and MXNet updates them in the backward pass); LeNet's
# 1F1B is held to its GPipe, to float32's last bits, by model_mode_1f1b_equals_gpipe.
ORACLE_SCHEDULES = {"lenet": ("gpipe",), "resnet18_tiny": ("gpipe", "1f1b"), "vit_tiny": ("gpipe",)}


def _state_order(b, name, schedule) -> str:
    """The order in which a pipeline's micro-batches update the running statistics: their
    forwards', 0..M-1, with either schedule; their backwards' where the framework updates
    them in the backward pass (MXNet): M-1..0 with GPipe, 0..M-1 with 1F1B."""
    backward = b.model_ops(name).running_stats_in_backward and schedule == "gpipe"
    return "backward" if backward else "forward"


@check(needs="model")
def model_mode_matches_oracle(b, name, schedules=None):
    """2 stages on 2 devices, M micro-batches: the step losses, the parameters and the
    running statistics equal the oracle run micro-batch by micro-batch (gradients
    summed, BatchNorm over each micro-batch, the running statistics updated by every
    micro-batch in turn), with GPipe's schedule and, for ResNet-18, 1F1B's; for ResNet-18
    with M > 1 that differs from the oracle on the full batch, and the check shows by
    how much. `schedules`: these instead (a planted bug's run)."""
    model, tol = models.get(name), TOLERANCES[name]
    params = _nontrivial_params(model)
    batches = [_batch(ORACLE_BATCH[name], seed=s) for s in range(CHECK_STEPS[name])]
    expected = 1 if (b.distinct_cpu_devices or b.num_gpus()) else 2
    assert modes.MODES["model"].processes(b.name, 2) == expected, (
        f"model mode on 2 devices should run {expected} process(es) for {b.name}")
    oracles = {}        # by M and the statistics' order: ResNet-18's float64 oracle is slow
    for M, schedule in itertools.product(MODEL_MICRO_BATCHES[name],
                                         schedules or ORACLE_SCHEDULES[name]):
        trainer = _pipeline(b, name, params, M, schedule=schedule)
        assert [s.index for s in trainer.stages] == [0, 1], "two stages expected"
        order = _state_order(b, name, schedule)
        if (M, order) not in oracles:
            want_state = [s.astype(np.float64) for s in model.init_state()]
            oracles[M, order] = (*oracle.sgd_steps(
                model, params, batches, CHECK_LR, state=want_state, shards=M,
                unbiased_running_var=_unbiased(b, name), state_order=order), want_state)
        want_losses, want_params, want_state = oracles[M, order]
        got = trainer.losses([trainer.step(X, y) for X, y in batches])
        what = f"M={M}" if schedule == "gpipe" else f"M={M}, {schedule}"
        _close(f"{what}: step losses vs the oracle per micro-batch", got, want_losses,
               tol["step_loss"])
        _updates_close(model, f"{what}: after {len(batches)} steps vs the oracle",
                       trainer.replica_params()[0], want_params, params, tol)
        for sname, st, w in zip(model.STATE_NAMES, trainer.replica_state()[0], want_state):
            _close(f"{what}: {sname} after {len(batches)} steps vs the oracle", st, w, tol["state"])
        if schedule != "gpipe":
            continue       # what follows does not depend on the schedule
        if model.STATE_NAMES and M > 1:
            X, y = batches[0]
            full = model.cross_entropy(model.forward(params, X, training=True), y).mean()
            gap = abs(float(got[0]) - full)
            assert gap > 100 * tol["step_loss"] * abs(full), (
                f"M={M}: BatchNorm per micro-batch should differ from the full batch's; "
                f"the first loss differs by only {gap:.1e}")
        _evaluation_matches_oracle(trainer, model, tol, f"model mode M={M}")


@check(needs="model")
def model_mode_equals_one_device(b, name):
    """A 2-stage step equals the 1-device step where it must: LeNet for every M (the
    native trainer on one device, to float32's last bits), ResNet-18 with M = 1 (the
    oracle on the full batch, the arithmetic of the 1-device step that
    native_trainer_matches_oracle holds every framework's to: a native trainer of its
    own here would cost one more compilation, 8 s in JAX, and check nothing more)."""
    model, tol = models.get(name), TOLERANCES[name]
    params = _nontrivial_params(model)
    batches = [_batch(ORACLE_BATCH[name], seed=s) for s in range(CHECK_STEPS[name])]
    if model.STATE_NAMES:
        ones, want, want_state = _oracle_steps(name, 1, _unbiased(b, name))
        loss_tol = tol["step_loss"]
    else:
        one = b.native_trainer(name, params, b.devices(1), CHECK_LR,
                               registry.default_execution(b.name, "native"))
        ones = one.losses([one.step(X, y) for X, y in batches])
        want, want_state, loss_tol = one.replica_params()[0], one.replica_state()[0], ONE_DEVICE["loss"]
    for M in (1, *MODEL_MICRO_BATCHES[name]) if not model.STATE_NAMES else (1,):
        two = _pipeline(b, name, params, M)
        twos = two.losses([two.step(X, y) for X, y in batches])
        _close(f"M={M}: step losses, 2 stages vs 1 device", twos, ones, loss_tol)
        _updates_close(model, f"M={M}: 2 stages vs 1 device", two.replica_params()[0], want,
                       params, tol if model.STATE_NAMES else {"params": ONE_DEVICE["lenet_params"]})
        for sname, st, w in zip(model.STATE_NAMES, two.replica_state()[0], want_state):
            _close(f"M={M}: {sname}, 2 stages vs 1 device", st, w, tol["state"])


# 1F1B against GPipe, the same stages in the same process: only the order of the
# micro-batches' gradient sums differs. Measured (LeNet, 2 stages, M = 4, two steps, the
# six frameworks with model mode): step losses 0 to 1.0e-7 apart relative to the
# loss, parameters 6.9e-8 to 8.9e-8 of a tensor's largest value. Planted
# (tests/test_conformance.py): one micro-batch's backward dropped, 6.9e-3 and 5.1e-2 in
# every framework; `first` (the gradient sums' start) given at GPipe's first backward,
# micro-batch M-1, which is 1F1B's last, 1.0e-2 and 9.1e-2 where the backend keeps the
# sums itself (MXNet, TensorFlow, JAX, Keras; PyTorch and Paddle sum in p.grad and
# ignore it).
ONE_F_ONE_B = {"loss": 1e-6, "params": 1e-5, "micro_batches": 4}


@check(needs="model", per_model=("lenet",))
def model_mode_1f1b_equals_gpipe(b, name):
    """2 stages, M = 4: the 1F1B step equals the GPipe step from the same weights and
    batches (step losses, every parameter); each stage ran its schedule's ops in order
    (its spans, check_every_stage: 1F1B's stage 0 F0 F1 B0 F2 B1 F3 B2 B3 with its sends
    and SGD) and kept at most min(k-s, M)
    micro-batches' tapes alive at once (GPipe: all M), watched as the steps ran."""
    from common.core.schedules import in_flight_predicted
    from tests.test_pipeline import check_every_stage, spans_by_stage
    model, M = models.get(name), ONE_F_ONE_B["micro_batches"]
    params = _nontrivial_params(model)
    batches = [_batch(ORACLE_BATCH[name], seed=s) for s in range(CHECK_STEPS[name])]
    runs = {}
    for schedule in ("gpipe", "1f1b"):
        trainer = _pipeline(b, name, params, M, schedule=schedule)
        runs[schedule] = trainer.losses([trainer.step(X, y) for X, y in batches]), trainer
        k, figures = len(trainer.stages), trainer.figures()
        want = [in_flight_predicted(schedule, k, s, M) for s in range(k)]
        assert figures["stage_peak_micro_batches"] == want, (
            f"{schedule}: tapes alive at once peaked at {figures['stage_peak_micro_batches']}, "
            f"not the formula's {want}")
    (one, gpipe), (two, ofob) = runs["gpipe"], runs["1f1b"]
    _close(f"M={M}: step losses, 1F1B vs GPipe", two, one, ONE_F_ONE_B["loss"])
    for pname, p, w in zip(model.PARAM_NAMES, ofob.replica_params()[0], gpipe.replica_params()[0]):
        _close(f"M={M}: {pname}, 1F1B vs GPipe", p, w, ONE_F_ONE_B["params"])
    # each stage's spans of the last step, after the numbers (a planted dropped backward
    # is the parameters' to catch): its schedule's forwards, backwards, sends and SGD
    for schedule, trainer in (("gpipe", gpipe), ("1f1b", ofob)):
        check_every_stage(spans_by_stage(trainer.spans), schedule, len(trainer.stages), M,
                          what=schedule)


# An epoch past the steps whose losses a record keeps (common.core.loop.STEP_LOSSES_KEPT):
# that many + PAST steps of PAST_BATCH images, on one Keras row: the epoch is the same
# Keras code on every backend, and a row's new trainer costs a compilation on JAX
# (measured in the conformance process: keras-torch 2.6 s, keras-tensorflow 3.0 s,
# keras-jax 23 s on a busy 2-core machine)
PAST, PAST_BATCH, PAST_ROW = 10, 4, "keras-torch"


def _epoch_losses(trainer, X, y, order) -> tuple[np.ndarray, int]:
    """One epoch's losses from the trainer's loop, and how often it called on_step."""
    calls = []
    losses = trainer.losses(trainer.train_epoch(X, y, order, lambda: calls.append(1)))
    return losses, len(calls)


def _past_the_kept_steps(trainer, module, params, state, own=None) -> tuple:
    """The trainer's epoch of KEPT + PAST steps, against the same epoch with each step's own
    loss (`own`, or measured now with the module's STEP_LOSSES_KEPT raised past the epoch,
    from the same weights): the first KEPT alike, each later one the mean of theirs, so the
    epoch's mean (train_loss) is the same; on_step once per step. Returns `own` and the
    trainer's losses."""
    kept = module.STEP_LOSSES_KEPT
    n = kept + PAST
    X, y = _batch(n * PAST_BATCH, seed=5)
    order = np.arange(n * PAST_BATCH).reshape(n, PAST_BATCH)
    got, calls = _epoch_losses(trainer, X, y, order)
    trainer.load_params(params, state)
    if own is None:
        module.STEP_LOSSES_KEPT = n
        try:
            own, own_calls = _epoch_losses(trainer, X, y, order)
        finally:
            module.STEP_LOSSES_KEPT = kept
        trainer.load_params(params, state)
        assert own_calls == n, f"on_step called {own_calls} times in {n} steps"
        assert len(set(own[kept:].tolist())) == PAST, f"each step's own loss? {own[kept:]}"
    assert calls == n and len(got) == n, f"{len(got)} losses and {calls} on_step for {n} steps"
    _close(f"the first {kept} step losses", got[:kept], own[:kept], 1e-6)
    _close(f"the losses past step {kept}: their mean", got[kept:],
           np.full(PAST, own[kept:].mean()), 1e-5)
    _close("the epoch's mean loss", got.mean(), own.mean(), 1e-5)
    return own, got


def _planted_past_the_kept_steps(losses: list, kept: int) -> dict:
    """train_epoch's losses with those past the kept steps wrong: all the last kept
    step's, or the mean of the kept steps (the first fit's)."""
    rest = len(losses) - kept
    return {"the last kept step's loss": losses[:kept] + [losses[kept - 1]] * rest,
            "the kept steps' mean": losses[:kept] + [float(np.mean(losses[:kept]))] * rest}


@check(per_model=("lenet",))
def fit_losses_past_the_kept_steps(b, name):
    """Keras's fit trainer waits on each step's loss only for the steps a record keeps;
    past them fit runs on and each step gets the mean of their losses
    (frameworks/keras/native.py). Held to the same epoch with every step's own loss, and
    seen failing here with a train_epoch that gives the later steps one wrong loss (the
    real one's losses, changed past the kept steps)."""
    if "KERAS_BACKEND" not in b.facts.env:
        raise Skipped("only Keras's fit trainer keeps the losses past the kept steps apart; "
                      "every other trainer's epoch is the contract's loop of steps")
    if b.name != PAST_ROW:
        raise Skipped(f"run once, on {PAST_ROW}: the same Keras epoch on every backend")
    model = models.get(name)
    params, state = model.init_params(0, "glorot"), model.init_state()
    trainer = b.native_trainer(name, params, b.devices(1), 0.05,
                               registry.default_execution(b.name, "native"))
    module = sys.modules[type(trainer).__module__]
    own, got = _past_the_kept_steps(trainer, module, params, state)
    cls, real = type(trainer), type(trainer).train_epoch
    try:
        planted_losses = _planted_past_the_kept_steps(list(got), module.STEP_LOSSES_KEPT)
        for plant, losses in planted_losses.items():
            def planted(self, X, y, order, on_step, losses=losses):
                for _ in order:
                    on_step()
                return list(losses)
            cls.train_epoch = planted
            try:
                _past_the_kept_steps(trainer, module, params, state, own)
            except AssertionError as e:
                assert "past step" in str(e), f"{plant} failed elsewhere: {e}"
                continue
            raise AssertionError(f"the check passed with {plant} planted past the kept steps")
    finally:
        cls.train_epoch = real


def _gap_probes(b):
    """capability -> calls that must each raise NotApplicable while it is a known gap;
    once it is gone, the first (a valid call) must not."""
    lenet = models.get("lenet")
    params, devices = lenet.init_params(0, "chapter"), b.devices(1)
    with_state = [m for m in models.NAMES if models.get(m).STATE_NAMES]
    from common.core.scratch import train_batch
    X, y = _batch(8)
    native = registry.default_execution(b.name, "native")

    from common.core.tensor import TensorTrainer
    from common.models import vit
    vit_params = models.get(vit.CHECK_MODEL).init_params(0, "chapter")

    def one_step(execution):
        mode = "native" if (b.name, "scratch") in registry.KNOWN_GAPS else "scratch"
        trainer = _trainer(b, "lenet", mode, execution, params, 1)
        trainer.losses([trainer.step(X, y)])
    return {
        "scratch": [lambda: b.get_params(params, devices[0]), lambda: b.allreduce([]),
                    lambda: b.bind_train_batch(train_batch, [], devices, 0.2, "eager")],
        **{e: [lambda e=e: one_step(e)] for e in registry.EXECUTIONS},
        "dataparallel": [lambda: b.dataparallel_trainer("lenet", params, devices, 0.2, "eager")],
        "model": [lambda: _pipeline(b, "lenet", params, 2).step(*_batch(4))],
        # where not listed, native_trainer_matches_oracle runs these on 2 devices
        "multi-device": [lambda: b.native_trainer("lenet", params, b.devices(2), 0.2, native)],
        "replica-bn": [lambda m=m: b.native_trainer(m, models.get(m).init_params(0, "chapter"),
                                                    b.devices(2), 0.2, native)
                       for m in with_state],
        "sync-bn": [lambda: b.native_trainer(
            m, models.get(m).init_params(0, "chapter"), b.devices(1 if b.facts.native_processes else 2),
            0.2, registry.default_execution(b.name, "native"), sync_bn=True) for m in with_state],
        # the ViT's tensor parallelism, by hand and the framework's own (2 devices)
        "tensor": [lambda: TensorTrainer(b, vit.CHECK_MODEL, vit_params, [], b.devices(2), 0.2,
                                         registry.default_execution(b.name, "tensor"))],
        # (a process per device, where tp is no gap: held in tests/test_training.py)
        **({} if b.facts.native_processes and not registry.gap(b.name, "tp") else
           {"tp": [lambda: b.tp_trainer(vit.CHECK_MODEL, vit_params, b.devices(2), 0.2,
                                        registry.default_execution(b.name, "tp"))]}),
    }


# Capabilities whose use another check holds where they are no gap, so their probe's
# "must not raise NotApplicable" is said there (a NotApplicable fails a check): the
# executions (every_execution_matches_oracle), 2 devices (native_trainer_matches_oracle),
# the modes' own checks in this process (their `needs`), synchronised BatchNorm in
# tests/test_training.py's worker runs. Probing them again built a trainer for nothing
# (JAX's model step 5.9 s, Keras on JAX's sync-bn ResNet-18 7.9 s and tp 4.4 s)
HELD_ELSEWHERE = (*registry.EXECUTIONS, "multi-device", "replica-bn", "scratch", "model",
                  "sharded", "tensor", "tp", "fsdp", "sync-bn")


@check(per_model=False)
def known_gaps_still_gaps(b):
    """A listed gap must still be one; an unlisted one must not raise NotApplicable
    (but may say NeedsGPU on a machine without GPUs)."""
    for capability, calls in _gap_probes(b).items():
        gap = registry.KNOWN_GAPS.get((b.name, capability))
        if not gap and capability in HELD_ELSEWHERE:
            continue
        for call in (calls if gap else calls[:1]):
            try:
                call()
            except NotApplicable as e:
                if gap or (isinstance(e, NeedsGPU) and not b.num_gpus()):
                    continue
                raise AssertionError(f"{b.name} {capability} raised NotApplicable ({e}) but is "
                                     "not listed in common.facts.registry.KNOWN_GAPS")
            if gap:
                raise AssertionError(f"{b.name} {capability} is listed in KNOWN_GAPS but now "
                                     "works: remove it from common.facts.registry.KNOWN_GAPS")


@check(per_model=False)
def loads_only_its_backend(b):
    """A Keras row imports no other backend's framework, after every check above ran
    (the GPU machines the suite runs on have PyTorch and JAX but no TensorFlow)."""
    if "KERAS_BACKEND" not in b.facts.env:
        return
    # not jax: Keras 3.15 itself imports it wherever it is installed, on every backend
    # (keras/src/callbacks/orbax_checkpoint.py), as it is on the GPU machines
    others = {"tensorflow", "torch"} - set(b.facts.imports)
    loaded = sorted(m for m in others if m in sys.modules)
    assert not loaded, f"{b.name} imported {loaded}"


def _models(per_model, model_names) -> list:
    """The models a check runs on (None: once, for no model)."""
    if per_model is True:
        return list(model_names)
    return [m for m in model_names if m in per_model] if per_model else [None]


def run_checks(b, model_names, only=None) -> dict:
    """{check[model]: result} of the checks `only` names (every check by default)."""
    results = {}
    for cname, (fn, needs, per_model) in CHECKS.items():
        if only is not None and cname not in only:
            continue
        for name in _models(per_model, model_names):
            key = f"{cname}[{name}]" if name else cname
            gap = registry.KNOWN_GAPS.get((b.name, needs)) if needs else None
            t0 = time.perf_counter()
            try:
                if gap:
                    raise Skipped(f"{b.name} lacks {needs}: {gap}")
                fn(b, name) if name else fn(b)
                results[key] = {"status": "passed", "detail": ""}
            except Skipped as e:
                results[key] = {"status": "skipped", "detail": str(e)}
            except Exception as e:  # noqa: BLE001 - every check reports, none stops the others
                results[key] = {"status": "failed", "detail": f"{type(e).__name__}: {e}\n"
                                                              f"{traceback.format_exc(limit=6)}"}
            results[key]["sec"] = time.perf_counter() - t0     # where the suite's time goes
    return results


def check_ids(model_names) -> list[str]:
    return [f"{c}[{m}]" if m else c
            for c, (_, _, per_model) in CHECKS.items() for m in _models(per_model, model_names)]


@check(per_model=False)
def profiles_its_steps(b):
    """The op-level profile (tests/helpers/profile_checks.py): in the conformance process where the
    framework profiles as it runs (no start-up of its own), else in a profiled process."""
    from tests.helpers.profile_checks import profiles_its_steps as run
    why = run(b)
    if why:
        raise Skipped(why)


PROFILED = "--profiled"
PROFILED_CHECKS = {"profiles_its_steps"}


def main(framework: str, out: str, *model_names: str) -> int:
    """The checks of `framework` into `out`. A framework whose profiled processes need
    settings of their own (its facts' profile_env: JAX's persistent compilation cache off,
    since an executable loaded from it cannot be profiled; MXNet's engine bulking off)
    runs its other checks as its users run it, without them, and the profile check in a
    second process with them (`--profiled`): JAX's checks then reuse what the suite's
    other processes and their own second device compiled."""
    profiled_only = framework == PROFILED
    if profiled_only:
        framework, out, *model_names = out, *model_names
    separate = bool(registry.facts(framework).profile_env) and not profiled_only
    b = registry.get(framework, profiled=not separate)
    b.setup(cpu_devices=2, threads=int(os.environ.get("OMP_NUM_THREADS", "1")))
    names = list(model_names) or models.check_models()
    if profiled_only:
        results = run_checks(b, names, only=PROFILED_CHECKS)
    else:
        results = run_checks(b, names, only=set(CHECKS) - PROFILED_CHECKS if separate else None)
    if separate:
        results.update(_profiled_process(framework, out, names))
    with open(out, "w") as f:
        json.dump(results, f)
    return 0


def _profiled_process(framework: str, out: str, names: list[str]) -> dict:
    """The profiled checks' results from `python -m tests.helpers.conformance --profiled`, or each
    failed with why the process did."""
    import subprocess
    sub = f"{out}.profiled.json"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tests.helpers.conformance", PROFILED, framework, sub,
                           *names], capture_output=True, text=True)
    if proc.returncode == 0 and os.path.exists(sub):
        with open(sub) as f:
            return json.load(f)
    why = f"the profiled process failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return {c: {"status": "failed", "detail": why, "sec": time.perf_counter() - t0}
            for c in check_ids(names) if c in PROFILED_CHECKS}


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
