"""The contract's checks (tests/conformance.py), one test per framework, check and
model, each framework in a process of its own. A check whose capability the
framework lists as a known gap shows as skipped with the gap's reason."""
import pytest

from common import models
from tests.conformance import check_ids
from tests.conftest import covered


@pytest.mark.parametrize("check", check_ids(models.NAMES))
@pytest.mark.parametrize("framework", covered())
def test_conformance(conformance, framework, check):
    result = conformance(framework)[check]
    if result["status"] == "skipped":
        pytest.skip(result["detail"])
    assert result["status"] == "passed", result["detail"]


def test_predict_check_fails_on_a_planted_bug():
    """The evaluation check holds predictions to the oracle's labels, not to the
    trainer's own logits: a predict that is off by one class, or that returns the
    argmax of logits from other weights, fails it; the oracle's own labels pass."""
    from tests.conformance import _batch, _nontrivial_params, _predict_matches_oracle
    model = models.get("lenet")
    X, _ = _batch(64, seed=7)
    want = model.forward(_nontrivial_params(model), X)
    _predict_matches_oracle(want.argmax(axis=1), want, 1e-4, "oracle")
    with pytest.raises(AssertionError, match="predict gave"):
        _predict_matches_oracle((want.argmax(axis=1) + 1) % 10, want, 1e-4, "off by one")
    other = model.forward(_nontrivial_params(model, seed=4), X)
    with pytest.raises(AssertionError, match="predict gave"):
        _predict_matches_oracle(other.argmax(axis=1), want, 1e-4, "other weights")
