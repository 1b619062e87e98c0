"""model.fit on one device, on NumPy arrays: what every backend does with one device
(Keras on JAX and on torch; TensorFlow's strategies place even one device their own way)."""
import keras


class ArraysPlacement:
    """fit on NumPy arrays (Keras's own batching, in order: shuffle=False), evaluation by
    a plain call, every variable one array."""
    numbers_show_placement = True      # one device: the batch has nowhere else to go

    def __init__(self, devices, sync_bn):
        self.devices = list(devices)

    def placement(self):
        return None

    def scope(self):
        return keras.device(self.devices[0])

    def fit(self, model, X, y, batch, callback):
        with self.scope():
            return model.fit(X, y, batch_size=batch, epochs=1, verbose=0, shuffle=False,
                             callbacks=[callback])

    def logits(self, model, X):
        with self.scope():
            return keras.ops.convert_to_numpy(model(X, training=False))

    def copies(self, variables):
        """Each replica's copy of the variables, as NumPy arrays."""
        return [[keras.ops.convert_to_numpy(v.value) for v in variables]]
