"""Keras 3 on the common contract, on whichever backend KERAS_BACKEND names
(tensorflow, jax or torch): the frameworks keras-tensorflow, keras-jax and keras-torch
of common.facts.registry, one package, whose facts entries set KERAS_BACKEND before
Keras loads."""
from common.core.contract import Backend

from .backends import FRAMEWORK
from .devices import Devices
from .models import Models
from .native import Native
from .pipeline import Pipeline
from .profile import Profile
from .scratch import Scratch


class KerasBackend(Devices, Models, Scratch, Native, Pipeline, Profile, Backend):
    name = FRAMEWORK


BACKEND = KerasBackend()
