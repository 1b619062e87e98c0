"""PaddlePaddle on the common contract. Never import it in a process that has
imported TensorFlow: that crashes (see DESIGN); the suite runs each framework
in its own process."""
from common.core.contract import Backend

from .devices import Devices
from .models import Models
from .native import Native
from .pipeline import Pipeline
from .profile import Profile
from .scratch import Scratch


class PaddleBackend(Devices, Models, Scratch, Native, Pipeline, Profile, Backend):
    name = "paddle"


BACKEND = PaddleBackend()
