"""Keras 3 (TensorFlow backend) on the common contract."""
import os

# This package drives Keras through TensorFlow's distribution strategies, so it
# needs the TensorFlow backend, whatever the user's default is.
os.environ["KERAS_BACKEND"] = "tensorflow"

from common.core.contract import Backend  # noqa: E402

from .devices import Devices  # noqa: E402
from .models import Models  # noqa: E402
from .native import Native  # noqa: E402
from .pipeline import Pipeline  # noqa: E402
from .scratch import Scratch  # noqa: E402


class KerasBackend(Devices, Models, Scratch, Native, Pipeline, Backend):
    name = "keras"


BACKEND = KerasBackend()
