"""MXNet 1.9 on the common contract."""
import numpy as np

# MXNet 1.9.1 (the last release) still uses numpy.bool, removed in NumPy 1.24;
# restore the alias before mxnet is first imported.
if "bool" not in np.__dict__:   # (hasattr would warn)
    np.bool = bool

from common.core.contract import Backend  # noqa: E402

from .devices import Devices  # noqa: E402
from .models import Models  # noqa: E402
from .native import Native  # noqa: E402
from .pipeline import Pipeline  # noqa: E402
from .profile import Profile  # noqa: E402
from .scratch import Scratch  # noqa: E402


class MXNetBackend(Devices, Models, Scratch, Native, Pipeline, Profile, Backend):
    name = "mxnet"


BACKEND = MXNetBackend()
