"""JAX on the common contract."""
from common.core.contract import Backend

from .devices import Devices
from .models import Models
from .native import Native
from .pipeline import Pipeline
from .profile import Profile
from .scratch import Scratch


class JaxBackend(Devices, Models, Scratch, Native, Pipeline, Profile, Backend):
    name = "jax"


BACKEND = JaxBackend()
