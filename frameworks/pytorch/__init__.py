"""PyTorch on the common contract."""
from common.contract import Backend

from .devices import Devices
from .lenet import LeNet
from .native import Native
from .scratch import Scratch


class TorchBackend(Devices, LeNet, Scratch, Native, Backend):
    name = "pytorch"


BACKEND = TorchBackend()
