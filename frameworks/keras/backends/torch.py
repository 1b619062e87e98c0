"""Keras 3 on PyTorch: its arrays are torch tensors, its device API and profiler
PyTorch's; model.fit on one device (Keras 3.15's torch backend has no
keras.distribution), the gradients by loss.backward()."""
import keras
import torch

from common.core.contract import NotApplicable
from common.facts import registry
from frameworks.pytorch.devices import Devices  # noqa: F401  (this backend's device API)
from frameworks.pytorch.profile import TorchProfiler as Profiler  # noqa: F401

from . import FRAMEWORK
from .arrays import ArraysPlacement

SYNC_BN = False     # BatchNormalization(synchronized=True) is TensorFlow's alone
tf = None


def grads_of_loss_sum(m, param_vars, state_vars, X, y, loss_sum):
    for v in param_vars:
        v.value.grad = None
    logits = m(keras.ops.convert_to_tensor(X), training=True)
    loss = loss_sum(keras.ops.convert_to_tensor(y), logits)
    loss.backward()
    return logits.detach(), loss.detach(), [v.value.grad for v in param_vars]


def refuse(model, devices, execution, sync_bn):
    """Nothing beyond placement's one device."""


class OneDevice(ArraysPlacement):
    def scope(self):
        # "cpu", not "cpu:0" (measured: under keras.device("cpu:0") Keras 3.15's torch fit
        # found "No gradients provided for any variable")
        device = self.devices[0]
        return keras.device("cpu" if device.startswith("cpu") else device)


def placement(devices, sync_bn, strategy=None):
    if len(devices) > 1:
        raise NotApplicable(registry.gap(FRAMEWORK, "multi-device"))
    return OneDevice(devices, sync_bn)


def laid_out(devices, mode, mesh):
    """fsdp and tp need keras.distribution, which Keras 3.15's torch backend lacks."""
    raise NotApplicable(registry.gap(FRAMEWORK, mode))


def compiled(model, execution):
    if execution == "compiled":
        # Keras's torch train_step starts with Module.zero_grad, whose `if p.grad is not
        # None` torch.compile guards on: None in the first step only, so the second step
        # compiled everything again (measured: 6.6 s per LeNet trainer). A zero gradient
        # to start from makes the first compilation the only one.
        for v in model.trainable_variables:
            v.value.grad = torch.zeros_like(v.value)
