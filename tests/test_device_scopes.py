"""The device-scopes example (common.experiments.scopes, python -m benchmarks.device_scopes): every
framework's shared-LSTM model against the NumPy oracle, forward and backward; its
two-branch placement equal to its one-device model step for step, each part where the
placement says; the frameworks' step losses against one another; the command's
records, report, crash handling and bad input. Each framework runs in a process of
its own (tests/helpers/scopes_checks.py, or the command's worker)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from common.experiments import scopes
from common.facts import registry
from tests.conftest import (ROOT, covered, having, incomplete_subclass_error, lacking,
                            per_framework, subprocess_env, usage_error)

# Float32 tolerances, measured (tests/helpers/scopes_checks.py, all five frameworks, CPU). The
# oracle is float64; a framework's float32 LSTM rounds in every gate of every step,
# and backpropagation through time sums over T steps x the batch x 256 inputs.
# Measured errors relative to the largest value compared: probabilities <= 1.4e-7,
# the loss <= 1.3e-7, each gradient <= 4.9e-7 at T=8 and <= 7.6e-7 at the chapter's
# T=140 (TensorFlow's W_h; the others 1.7e-7 to 5.8e-7), step losses <= 6.5e-8 from
# the oracle's over 3 SGD steps, parameters after them <= 2e-7. The tolerances leave
# an order of magnitude above those and still catch any real mistake: a wrong gate
# order, a bias counted twice, a gradient of one branch lost or a learning rate off
# by the batch size move these figures by 1e-2 to 1.
TOL = {"probs": 1e-6, "loss": 1e-6, "grads": 1e-5, "step_loss": 1e-6, "params": 1e-5}
# Two placements of one framework run the same kernels in the same order: measured
# bitwise identical (difference 0) in every framework, distinct devices or not. A
# rounding-level allowance only.
SAME = 1e-6


@pytest.fixture(scope="session")
def checks(tmp_path_factory):
    """framework -> tests/helpers/scopes_checks.py's measurements, made once in its own process
    (one thread: OpenMP threads that wait for a descheduled sibling stall PyTorch's LSTM
    for seconds on a busy 2-core machine)."""
    return per_framework(tmp_path_factory, "tests.helpers.scopes_checks", threads=1, timeout=300)


PLANTED = "two-branch-unshared"     # scopes_checks' planted bug: it must fail the checks


def _ran(result):
    return {k: v for k, v in result["placements"].items()
            if "not_applicable" not in v and k != PLANTED}


@pytest.mark.parametrize("framework", having("scopes"))
def test_forward_and_backward_equal_the_oracle(checks, framework):
    for name, r in _ran(checks(framework)).items():
        for size in ("small", "full"):
            e = r[size]
            if e is None:
                continue
            assert e["probs"] < TOL["probs"] and e["loss"] < TOL["loss"], (name, size, e)
            bad = {k: v for k, v in e["grads"].items() if not v < TOL["grads"]}
            assert not bad, f"{name}, {size}: gradients off the oracle's: {bad}"
    assert _ran(checks(framework))["two-branch"]["full"], "T=140 was not checked"


@pytest.mark.parametrize("framework", having("scopes"))
def test_sgd_steps_equal_the_oracle(checks, framework):
    for name, r in _ran(checks(framework)).items():
        assert r["loss_vs_oracle"] < TOL["step_loss"], (name, r["losses"])
        assert r["params_vs_oracle"] < TOL["params"], (name, r["params_vs_oracle"])


@pytest.mark.parametrize("framework", having("scopes"))
def test_the_cross_device_path_runs_and_a_planted_unshared_branch_fails(checks, framework):
    """Where the framework has one CPU device (PyTorch, Paddle without GPUs) the
    two-branch run forces branch b onto a copy of the shared weights, the path distinct
    devices take, and is held to the oracle above; planting the bug that copy exists to
    avoid (branch b's gradient never reaches the shared weights) fails those checks."""
    result = checks(framework)
    two = _ran(result)["two-branch"]
    if len(set(two["placement"].values())) > 1:
        assert PLANTED not in result["placements"], "distinct devices: nothing to force"
        return
    assert "two-branch-replica" in result["placements"], "the copy path did not run"
    planted = result["placements"][PLANTED]
    lstm = {k: v for k, v in planted["small"]["grads"].items() if k in scopes.PARAM_NAMES[:3]}
    assert min(lstm.values()) > 100 * TOL["grads"], f"the planted bug passed: {lstm}"
    assert planted["params_vs_oracle"] > 100 * TOL["params"], planted["params_vs_oracle"]


@pytest.mark.parametrize("framework", having("scopes"))
def test_two_branches_equal_one_device_step_for_step(checks, framework):
    result = checks(framework)
    assert result["two_vs_one"]["losses"] <= SAME and result["two_vs_one"]["params"] <= SAME, \
        result["two_vs_one"]


@pytest.mark.parametrize("framework", having("scopes"))
def test_each_part_runs_where_the_placement_says(checks, framework):
    """Read back from the framework's own arrays: no faked placement. Without GPUs,
    TensorFlow, Keras, MXNet and JAX put the branches on distinct CPU devices; PyTorch
    and Paddle have one CPU device and say so."""
    for name, r in _ran(checks(framework)).items():
        want = r["placement"]
        assert r["placed"] == {**want, "weights": want["branch_a"]}, (name, r["placed"])
    two = _ran(checks(framework))["two-branch"]["placement"]
    from common.facts.machine import gpu_count
    if not gpu_count():
        expected = 3 if framework in ("tensorflow", "keras-tensorflow", "mxnet", "jax") else 1
        assert len(set(two.values())) == expected, two


def test_frameworks_agree_step_by_step(checks):
    """Every framework's step losses (3 SGD steps from the same weights on the same
    batches) against every other's."""
    losses = {fw: _ran(checks(fw))["one-device"]["losses"] for fw in having("scopes")}
    oracle = checks(having("scopes")[0])["oracle_losses"]
    for fw, got in losses.items():
        for other, theirs in losses.items():
            assert np.max(np.abs(np.subtract(got, theirs))) < 2 * TOL["step_loss"], (fw, other)
    assert oracle[-1] < oracle[0]                 # and the model learns


@pytest.mark.parametrize("framework", lacking("scopes"))
def test_a_listed_gap_is_still_one(checks, framework):
    """Where the facts list the example as a gap, loading it says so with their reason
    (and once it loads, this fails: remove the gap)."""
    assert checks(framework) == {"not_applicable": registry.gap(framework, "scopes")}


def test_bytes_moved_follow_the_shapes():
    n, t = 32, scopes.T
    lstm = (256 * 256 + 64 * 256 + 256) * 4
    two = scopes.bytes_moved(scopes.Placement("gpu:0", "gpu:1", "cpu:0"), n, t)
    assert two == {"inputs": 2 * n * t * 256 * 4, "shared_weights": 2 * lstm,
                   "encodings": 2 * 2 * n * 64 * 4, "total": two["total"]}
    assert two["total"] == two["inputs"] + two["shared_weights"] + two["encodings"]
    assert scopes.bytes_moved(scopes.Placement("cpu:0", "cpu:0", "cpu:0"), n, t)["total"] == 0
    # a on the merge device: only b's input and encoding cross, and the weights
    part = scopes.bytes_moved(scopes.Placement("cpu:0", "cpu:1", "cpu:0"), n, t)
    assert part["inputs"] == n * t * 256 * 4 and part["encodings"] == 2 * n * 64 * 4


def test_placements_without_and_with_gpus():
    p = scopes.placements
    assert p(0, True)["two-branch"] == scopes.Placement("cpu:1", "cpu:2", "cpu:0")
    assert p(0, False)["two-branch"] == scopes.Placement("cpu:0", "cpu:0", "cpu:0")
    assert p(2, False) == {"one-device": scopes.Placement("gpu:0", "gpu:0", "gpu:0"),
                           "two-branch": scopes.Placement("gpu:0", "gpu:1", "cpu:0")}
    assert "needs two GPUs" in p(1, True)["two-branch"]


def test_an_incomplete_framework_fails_loudly():
    error = incomplete_subclass_error("common.experiments.scopes", "Scopes", "build")
    assert "abstract" in error and "forward_backward" in error, error


BAD_INPUT = [
    (["--framework", "caffe"], "unknown framework 'caffe'"),
    (["--framework", ","], "--framework ',' has an empty name"),
    (["--steps", "0"], "must be at least 1"),
    (["--batch", "-3"], "must be at least 1"),
    (["--lr", "nan"], "finite number above 0"),
    (["--warmup", "x"], "is not an integer"),
    (["--out", "/proc/scopes-out"], "cannot be created or written"),
]


@pytest.mark.parametrize("args,message", BAD_INPUT)
def test_bad_input_is_one_line_and_exit_2(args, message):
    assert message in usage_error(["-m", "benchmarks.device_scopes", *args])


def test_the_command_writes_records_and_report_and_survives_a_crash(tmp_path):
    """Two frameworks, tiny: the first one's worker crashes (as a segfault would) on its
    two-branch placement; its one-device record stays, the crash is recorded, the
    second framework runs on, the report shows both, and the command exits 1."""
    fws = [fw for fw in ("mxnet", "pytorch") if fw in covered()] or covered()[:2]
    crashed = fws[0]
    env = {**subprocess_env(threads=1), "DL_COMPARE_DEVICES_CRASH": f"{crashed}:two-branch"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.device_scopes", "--framework",
                           ",".join(fws), "--steps", "2", "--batch", "2", "--warmup", "1",
                           "--threads", "1", "--out", str(tmp_path), "--json"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    records = {(r["framework"], r["placement"]): r for r in json.loads(proc.stdout)}
    on_disk = {(json.loads(p.read_text())["framework"], json.loads(p.read_text())["placement"])
               for p in tmp_path.glob("*.scopes.json")}
    assert on_disk == set(records) == {(fw, p) for fw in fws for p in scopes.PLACEMENTS}
    assert records[(crashed, "two-branch")]["status"] == "failed"
    assert "signal 6" in records[(crashed, "two-branch")]["error"]
    ok = [r for key, r in records.items() if key != (crashed, "two-branch")]
    for r in ok:
        assert r["status"] == "ok", r.get("error")
        assert len(r["step_s"]) == 2 and r["step_min_s"] <= r["step_median_s"] <= r["step_max_s"]
        assert r["env"]["cpu_model"] and r["devices"] and r["sharing"]
    for fw in fws[1:]:
        two = records[(fw, "two-branch")]
        assert two["vs_one_device"] == {"max_loss_diff": 0.0, "max_param_diff": 0.0} or \
            max(two["vs_one_device"].values()) <= SAME
        distinct = len(set(two["devices"].values())) > 1
        assert (two["bytes_moved_per_step"] > 0) == distinct
    report = (tmp_path / "report.md").read_text()
    assert all(f"| {fw} |" in report for fw in fws) and "signal 6" in report
    assert "ms/step, two branches" in report and "Machine:" in report
