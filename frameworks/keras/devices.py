"""The device API. Keras 3 holds its arrays as its backend's own (TensorFlow tensors,
jax.Arrays, torch tensors) on that backend's devices, so the device API is the
backend's framework package's (frameworks/keras/backends: KERAS_BACKEND, which
common.facts.registry.get sets before this package loads, picks it once)."""
import keras

from .backends import current


class Devices(current.Devices):
    def version(self):
        return keras.__version__

    def apply_setting(self, name):
        # Keras's own mixed precision on any backend: every layer built after this computes
        # in bfloat16 and keeps float32 weights; its losses cast to float32
        if name == "mixed-bf16":
            keras.config.set_dtype_policy("mixed_bfloat16")
        else:
            super().apply_setting(name)
