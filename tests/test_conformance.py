"""The contract's checks (tests/conformance.py), one test per framework and check,
each framework in a process of its own."""
import pytest

from tests.conformance import CHECKS
from tests.conftest import covered


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("framework", covered())
def test_conformance(conformance, framework, check):
    result = conformance(framework)[check]
    assert result["ok"], result["detail"]
