"""Whole runs through the worker (the compare command's path), on synthetic data:
native mode against scratch mode, and the frameworks against one another and
against the NumPy oracle over the first 20 steps."""
import numpy as np
import pytest

from common import data, models, registry
from tests.conftest import covered

STEPS = 20
# Tolerance on a step's mean loss, absolute. A float32 loss near ln 10 has an ulp of
# 2.4e-7; the batch's sum of 256 such values, convolution and cross-entropy kernels
# that differ between frameworks and 20 SGD steps of rounding differences add up to
# a few 1e-6 (the largest difference seen between any two of the 18 runs of a
# default comparison on real Fashion-MNIST: 4.3e-6). 2e-5 leaves a factor of about
# five, and is far below the typical change of the loss from one step to the next
# (1e-4 to 1e-3), so a step that used other data or another update would show.
LOSS_ATOL = 2e-5


def _first_mode(framework):
    return "native" if (framework, "scratch") in registry.KNOWN_GAPS else "scratch"


@pytest.mark.parametrize("framework", covered())
def test_native_two_devices_matches_scratch(worker_record, framework):
    native = worker_record(framework, "native", 2)
    assert native["status"] == "ok", native["error"]
    assert len(native["device_names"]) == 2
    if registry.facts(framework).native_processes:
        # one process per device, really: the losses below are then only equal to
        # scratch mode's if the processes reduced gradients (and losses) between them
        assert native["processes"] == 2, native["processes"]
    if (framework, "scratch") in registry.KNOWN_GAPS:
        reference = worker_record(framework, "native", 1)
    else:
        reference = worker_record(framework, "scratch", 2)
    assert reference["status"] == "ok", reference["error"]
    np.testing.assert_allclose(native["step_losses"][:10], reference["step_losses"][:10],
                               rtol=0, atol=LOSS_ATOL)


@pytest.mark.parametrize("framework", covered())
def test_records_hold_exactly_the_schema_keys(worker_record, framework):
    from common.results import RECORD_KEYS
    for mode in ("scratch", "native"):
        record = worker_record(framework, mode, 1) if (framework, mode) not in registry.KNOWN_GAPS \
            else worker_record(framework, mode, 1, steps=1)
        assert set(record) <= set(RECORD_KEYS), set(record) - set(RECORD_KEYS)
        assert set(RECORD_KEYS) - {"traceback"} <= set(record), set(RECORD_KEYS) - set(record)


@pytest.fixture(scope="module")
def oracle_losses():
    ds = data.synthetic(0)
    order = data.batch_order(len(ds.X_train), 256, 0, 0)[:STEPS]
    lenet = models.get("lenet")
    losses, _ = models.sgd_steps(lenet, lenet.init_params(0),
                                 [(ds.X_train[i], ds.y_train[i]) for i in order], lr=0.2)
    return losses


@pytest.mark.parametrize("framework", covered())
def test_step_losses_match_numpy_oracle(worker_record, oracle_losses, framework):
    record = worker_record(framework, _first_mode(framework), 1)
    assert record["status"] == "ok", record["error"]
    assert len(record["step_losses"]) == STEPS
    np.testing.assert_allclose(record["step_losses"], oracle_losses, rtol=0, atol=LOSS_ATOL)


def test_step_losses_agree_across_frameworks(worker_record):
    runs = {f: worker_record(f, _first_mode(f), 1) for f in covered()}
    if len(runs) < 2:
        pytest.skip("only one framework installed: nothing to compare it with")
    names = list(runs)
    for a in names:
        for b in names[names.index(a) + 1:]:
            np.testing.assert_allclose(runs[a]["step_losses"], runs[b]["step_losses"], rtol=0,
                                       atol=LOSS_ATOL, err_msg=f"{a} vs {b}")


@pytest.mark.parametrize("framework", [f for f in covered() if (f, "scratch") in registry.KNOWN_GAPS])
def test_known_gap_recorded_not_applicable(worker_record, framework):
    record = worker_record(framework, "scratch", 1, steps=1)
    assert record["status"] == "not-applicable", (
        f"{framework} scratch is listed as a gap but its run says {record['status']}")
    assert record["error"] == registry.KNOWN_GAPS[(framework, "scratch")]
