"""TensorFlow 2 on the common contract."""
from common.contract import Backend

from .devices import Devices
from .models import Models
from .native import Native
from .scratch import Scratch


class TensorFlowBackend(Devices, Models, Scratch, Native, Backend):
    name = "tensorflow"


BACKEND = TensorFlowBackend()
