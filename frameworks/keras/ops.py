"""Keras 3's calls for the device experiments (common.experiments.device_experiments), on its
TensorFlow backend: arithmetic through keras.ops under keras.device, parameters
through a Model's save_weights / load_weights. Keras 3 has no collective of its
own there (keras.distribution's TensorFlow distribution_lib supplies only
list_devices and distribute_value), so the native all-reduce is TensorFlow's. On JAX and
torch this module raises NotApplicable as it loads (the facts' `devices` gap), so that
common.experiments.ops.load records the reason, and a backend that gains its Ops shows up
as a listed gap that works."""
from .backends import needs_tensorflow

needs_tensorflow("devices")    # on JAX and torch: NotApplicable, the facts' gap, as this loads

import keras  # noqa: E402

from frameworks.tensorflow.ops import Ops as TensorFlowOps  # noqa: E402


def _neutral(tf_device_string):
    """'/job:localhost/.../device:CPU:1' -> 'cpu:1' (what keras.device takes)."""
    kind, index = tf_device_string.rsplit("device:", 1)[-1].split(":")
    return f"{kind.lower()}:{index}"


class _Params(keras.Model):
    def __init__(self, shapes, dtypes):
        super().__init__()
        self.ps = [self.add_weight(shape=s, dtype=d, initializer="zeros", trainable=True,
                                   name=f"p{i}") for i, (s, d) in enumerate(zip(shapes, dtypes))]
        self.built = True      # a bag of weights: nothing to build


class Ops(TensorFlowOps):
    native_allreduce_description = (
        "TensorFlow's MirroredStrategy reduce_to(SUM) (Keras 3 has no collective of its own "
        "on the TensorFlow backend)")

    def matmul(self, a, b):
        with keras.device(_neutral(a.device)):
            return keras.ops.matmul(a, b)

    def norm(self, x):
        with keras.device(_neutral(x.device)):
            return keras.ops.norm(x)

    def stack(self, scalars):
        with keras.device(_neutral(scalars[0].device)):
            return keras.ops.stack(scalars)

    def item(self, x):
        return float(keras.ops.convert_to_numpy(x))

    def add_one(self, x):
        with keras.device(_neutral(x.device)):
            return keras.ops.add(x, 1)

    def allreduce_by_hand(self, arrays):
        # the chapter's allreduce in Keras ops: sum onto the first device, then
        # write the sum into every device's variable in place
        with keras.device(_neutral(arrays[0].device)):
            total = arrays[0]
            for a in arrays[1:]:
                total = keras.ops.add(total, a)
        for a in arrays:
            with keras.device(_neutral(a.device)):
                a.assign(total)

    def _path(self, path):
        return path if path.endswith(".weights.h5") else path + ".weights.h5"

    def save(self, arrays, path):
        model = _Params([a.shape for a in arrays], [a.dtype.name for a in arrays])
        for p, a in zip(model.ps, arrays):
            p.assign(a)
        model.save_weights(self._path(path), overwrite=True)

    def load(self, path, device, like):
        with keras.device(device):
            model = _Params([a.shape for a in like], [a.dtype.name for a in like])
            model.load_weights(self._path(path))
        return [p.value for p in model.ps]
