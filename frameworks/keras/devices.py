"""The device API. Keras 3 holds its arrays as its backend's own (TensorFlow tensors,
jax.Arrays, torch tensors) on that backend's devices, so the device API is the
backend's framework package's, chosen once by keras.config.backend() (KERAS_BACKEND,
which common.facts.registry.get sets before this package loads). Only that backend is
imported: the GPU machines have PyTorch and JAX but no TensorFlow."""
import keras

BACKEND = keras.config.backend()
if BACKEND == "jax":
    from frameworks.jax.devices import Devices as BackendDevices
elif BACKEND == "torch":
    from frameworks.pytorch.devices import Devices as BackendDevices
elif BACKEND == "tensorflow":
    from frameworks.tensorflow.devices import Devices as BackendDevices
else:
    raise ImportError(f"Keras backend {BACKEND!r} is not one of the suite's (KERAS_BACKEND="
                      "tensorflow, jax or torch)")


class Devices(BackendDevices):
    def version(self):
        return keras.__version__

    def apply_setting(self, name):
        # Keras's own mixed precision on any backend: every layer built after this computes
        # in bfloat16 and keeps float32 weights; its losses cast to float32
        if name == "mixed-bf16":
            keras.config.set_dtype_policy("mixed_bfloat16")
        else:
            super().apply_setting(name)
