"""The device API. Keras 3 on its TensorFlow backend holds its arrays as
TensorFlow tensors on TensorFlow's devices, so the device API is TensorFlow's."""
import keras

from frameworks.tensorflow.devices import Devices as TensorFlowDevices


class Devices(TensorFlowDevices):
    def version(self):
        return keras.__version__
