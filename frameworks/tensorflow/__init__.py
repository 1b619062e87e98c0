"""TensorFlow 2 on the common contract."""
from common.contract import Backend

from .devices import Devices
from .lenet import LeNet
from .native import Native
from .scratch import Scratch


class TensorFlowBackend(Devices, LeNet, Scratch, Native, Backend):
    name = "tensorflow"


BACKEND = TensorFlowBackend()
