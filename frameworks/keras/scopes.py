"""The device-scopes model (common.experiments.scopes) in Keras 3 (TensorFlow backend): the
chapter's functional model with one keras.layers.LSTM shared by both inputs, each
part called under keras.device."""
from .backends import needs_tensorflow

# the gradients below are TensorFlow's (GradientTape): on JAX and torch the facts'
# `scopes` gap, raised as the module loads (a backend that gains it shows as a listed
# gap that works)
tf = needs_tensorflow("scopes")

import keras  # noqa: E402

from common.experiments import scopes  # noqa: E402


class OnDevice(keras.layers.Layer):
    """Calls `layer` under keras.device(device) every time the model runs. A
    keras.device scope around the functional model's construction, as the chapter
    writes it, is not kept: Keras 3 replays the graph of layers without it (measured:
    with the branches built under keras.device("cpu:1") and ("cpu:2"), both branches'
    outputs came back on cpu:0), so the scope goes inside the call."""

    def __init__(self, layer, device, **kwargs):
        super().__init__(**kwargs)
        self.layer, self.device = layer, device

    def call(self, x):
        with keras.device(self.device):
            return self.layer(x)


class Merge(keras.layers.Layer):
    """The chapter's merge: concatenate the two encodings, then Dense(1, sigmoid)."""

    def __init__(self, dense, **kwargs):
        super().__init__(**kwargs)
        self.dense = dense

    def call(self, encodings):
        return self.dense(keras.ops.concatenate(encodings, axis=-1))


class Scopes(scopes.Scopes):
    sharing = ("One keras.layers.LSTM(64) object called on both inputs of a functional "
               "keras.Model; its weights were built under keras.device(branch a), so branch "
               "b's call (under keras.device(branch b)) reads them across devices: TensorFlow "
               "copies them there in every step and brings their gradient back. Keras's "
               "LSTM has the common layout (kernel (D, 4H), recurrent_kernel (H, 4H), gate "
               "order i, f, c, o, one bias; recurrent_activation sigmoid, Keras 3's default); the "
               "inputs are keras.Input(shape=(None, 256)), the chapter's (140, 256) with the length "
               "left open for short test sequences. "
               "Trained with model.train_on_batch, SGD, BinaryCrossentropy (mean over the batch)")

    def build(self, params, placement):
        keras.utils.clear_session()
        a, b, m = placement.branch_a, placement.branch_b, placement.merge
        lstm = keras.layers.LSTM(scopes.H, name="shared_lstm")
        dense = keras.layers.Dense(1, activation="sigmoid", name="head")
        with keras.device(a):
            lstm.build((None, None, scopes.D))
        with keras.device(m):
            dense.build((None, 2 * scopes.H))
        in_a = keras.Input(shape=(None, scopes.D), name="sequence_a")
        in_b = keras.Input(shape=(None, scopes.D), name="sequence_b")
        ha = OnDevice(lstm, a, name="branch_a")(in_a)
        hb = OnDevice(lstm, b, name="branch_b")(in_b)
        p = OnDevice(Merge(dense), m, name="merge")([ha, hb])
        self.model = keras.Model([in_a, in_b], p)
        self.encoders = keras.Model([in_a, in_b], [ha, hb, p])  # the same layers, for `parts`
        self.model.compile(optimizer=keras.optimizers.SGD(learning_rate=scopes.DEFAULT_LR),
                           loss=keras.losses.BinaryCrossentropy())
        self.vars = [lstm.cell.kernel, lstm.cell.recurrent_kernel, lstm.cell.bias,
                     dense.kernel, dense.bias]
        self.load_params(params)

    def load_params(self, params):
        for v, p in zip(self.vars, params):
            v.assign(p)

    def read_params(self):
        return [keras.ops.convert_to_numpy(v) for v in self.vars]

    def forward_backward(self, Xa, Xb, y):
        with tf.GradientTape() as tape:
            p = self.model([Xa, Xb], training=True)
            loss = self.model.loss(y[:, None], p)
        grads = tape.gradient(loss, [v.value for v in self.vars])
        return p.numpy()[:, 0], float(loss), [g.numpy() for g in grads]

    def step(self, Xa, Xb, y, lr):
        self.model.optimizer.learning_rate.assign(lr)
        return self.model.train_on_batch([Xa, Xb], y[:, None])   # a float: it has waited

    def value(self, loss):
        return float(loss)

    def parts(self, Xa, Xb):
        ha, hb, p = self.encoders([Xa, Xb])                   # eagerly: each op where it ran
        return ha, hb, p, self.vars[0].value
