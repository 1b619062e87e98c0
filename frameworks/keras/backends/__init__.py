"""Keras 3's backend, picked once, as Keras itself picks keras/src/backend/<name>/: one
module per backend (tensorflow.py, jax.py, torch.py), the same names in each, and the
only place in frameworks/keras that knows which backend runs (tests/test_keras_backends.py
checks that no other file compares its name). Only the running backend's framework is
imported: the GPU machines have PyTorch and JAX but no TensorFlow.

What each backend module holds:

- `Devices`: the device API, its framework package's (Keras holds its arrays as the
  backend's own, on the backend's devices), with what several workers need where Keras
  runs them;
- `Profiler`: its framework's op-level profiler;
- `SYNC_BN`: whether BatchNormalization(synchronized=True) is there;
- `tf`: TensorFlow where Keras's arrays are TensorFlow tensors (the calls ops.py,
  scopes.py and pipeline.py are written with), else None;
- `grads_of_loss_sum(m, param_vars, state_vars, X, y, loss_sum)`: one training-mode pass
  and its gradients, by the backend's autodiff (Keras 3 has no backend-neutral gradient);
- `refuse(model, devices, execution, sync_bn)`: raises where native mode cannot run that;
- `placement(devices, sync_bn, strategy)`: how model.fit spreads over the devices;
- `laid_out(devices, mode, mesh)`: fsdp's and tp's placement, one model laid out over the
  devices (keras.distribution.ModelParallel), or NotApplicable with the row's gap;
- `compiled(model, execution)`: what the backend needs after model.compile.
"""
import importlib

import keras

from common.core.contract import NotApplicable
from common.facts import registry

NAME = keras.config.backend()
# this backend's row of common.facts.registry (keras-tensorflow, keras-jax, keras-torch)
FRAMEWORK = "keras-" + NAME

try:
    current = importlib.import_module(f"{__name__}.{NAME}")
except ModuleNotFoundError as e:
    if e.name != f"{__name__}.{NAME}":
        raise
    raise ImportError(f"Keras backend {NAME!r} is not one of the suite's (KERAS_BACKEND="
                      "tensorflow, jax or torch)") from None


def needs_tensorflow(feature: str):
    """TensorFlow, for the Keras code written with its calls; on a backend whose arrays
    are not TensorFlow's, the facts' gap `feature` as NotApplicable (a backend that gains
    the feature shows up as a listed gap that works)."""
    if current.tf is None:
        raise NotApplicable(registry.gap(FRAMEWORK, feature))
    return current.tf
