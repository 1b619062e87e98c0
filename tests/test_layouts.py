"""The channels-last layout, which TensorFlow's and Keras's models take (each model's
CHANNELS_LAST, with common/models/layouts.py's conversions): converting there and back is
the identity for every model, and LeNet's first dense weight, permuted, computes the same
features from an NHWC flatten as the common weight from an NCHW one (planted: the
permutation left out fails)."""
import numpy as np
import pytest

from common import models
from common.models import lenet


@pytest.mark.parametrize("model", models.NAMES)
def test_there_and_back_is_the_identity(model):
    to_last, to_first = models.get(model).CHANNELS_LAST
    params = models.get(model).init_params(0, "glorot")
    for a, b in zip(params, to_first(to_last(params))):
        np.testing.assert_array_equal(a, b)
    assert any(a.shape != b.shape for a, b in zip(params, to_last(params)) if a.ndim == 4)


def _dense_features(to_last) -> tuple[np.ndarray, np.ndarray]:
    c, h, w = lenet.UNITS[0][3]
    params = lenet.init_params(0, "glorot")
    A = np.random.default_rng(0).standard_normal((c, h, w))
    W3, W3_last = params[4], to_last(params)[4]
    return A.reshape(-1) @ W3, A.transpose(1, 2, 0).reshape(-1) @ W3_last


def test_lenets_dense_weight_follows_the_flatten():
    first, last = _dense_features(lenet.CHANNELS_LAST[0])
    np.testing.assert_allclose(first, last, rtol=1e-12)


def test_a_dense_weight_left_unpermuted_fails():
    def unpermuted(params):
        out = lenet.CHANNELS_LAST[0](params)
        return out[:4] + [np.asarray(params[4])] + out[5:]
    first, last = _dense_features(unpermuted)
    assert not np.allclose(first, last)
