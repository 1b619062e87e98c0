"""The models of common/models as Keras models (channels-last), their weights set
from the common initial weights through TensorFlow's layout conversion. Keras has
no scratch mode, so its oracle check (forward_backward) runs the Keras model."""
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from common.models import resnet18 as R
from frameworks.tensorflow.models import BN_MOMENTUM, Models as TensorFlowModels


def keras_lenet(sync_bn=False):     # no BatchNorm: nothing to synchronise
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(20, 3, activation="relu"),
        layers.AveragePooling2D(2),
        layers.Conv2D(50, 5, activation="relu"),
        layers.AveragePooling2D(2),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dense(10),
    ])


def keras_resnet18(sync_bn=False):
    """The chapter's concise ResNet-18 as a functional Keras model, each layer named
    after its parameters in common/models/resnet18.py (see named_slots)."""
    def conv(x, c, stride, pad):
        name = R.PARAM_NAMES[c["weight"]].rsplit(".", 1)[0]
        cout, _, k, _ = R.PARAM_SHAPES[c["weight"]]
        if pad and stride > 1:
            # PyTorch pads 1 on both sides; "same" at stride 2 would pad only after
            x = layers.ZeroPadding2D(pad, name=f"{name}.pad")(x)
        return layers.Conv2D(cout, k, stride, "same" if pad and stride == 1 else "valid",
                             name=name)(x)

    def bn(x, i):
        return layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=R.BN_EPS, synchronized=sync_bn,
                                         name=R.PARAM_NAMES[i["gamma"]].rsplit(".", 1)[0])(x)

    X = keras.Input((28, 28, 1))
    h = layers.ReLU()(bn(conv(X, R.STEM["conv"], 1, 1), R.STEM["bn"]))
    for b in R.BLOCKS:
        y = layers.ReLU()(bn(conv(h, b["conv1"], b["stride"], 1), b["bn1"]))
        y = bn(conv(y, b["conv2"], 1, 1), b["bn2"])
        h = layers.ReLU()(layers.Add()([y, conv(h, b["shortcut"], b["stride"], 0) if b["shortcut"] else h]))
    h = layers.GlobalAveragePooling2D()(h)
    return keras.Model(X, layers.Dense(R.NUM_CLASSES, name="fc")(h), name="resnet18")


def keras_slots(m):
    """(parameters, state): Keras's own order, where it is the common one (LeNet)."""
    return list(m.trainable_weights), list(m.non_trainable_weights)


# common name suffix -> Keras attribute of the layer named by the rest of the name
_ATTRS = {"weight": "kernel", "bias": "bias", "gamma": "gamma", "beta": "beta",
          "running_mean": "moving_mean", "running_var": "moving_variance"}


def named_slots(m):
    """(parameters, state) in the order of PARAM_NAMES and STATE_NAMES, found by layer
    name (a functional model's weights come in graph order, with the moving statistics
    among the parameters)."""
    def find(names):
        return [getattr(m.get_layer(layer), _ATTRS[attr])
                for layer, attr in (n.rsplit(".", 1) for n in names)]
    return find(R.PARAM_NAMES), find(R.STATE_NAMES)


# model name -> (Keras model builder taking sync_bn, its (parameters, state) in the
# common order); the weights' layout is TensorFlow's (its ModelOps)
KERAS_MODELS = {"lenet": (keras_lenet, keras_slots), "resnet18": (keras_resnet18, named_slots)}


def nhwc(X):
    return np.asarray(X, np.float32).transpose(0, 2, 3, 1)


class Models:
    models = TensorFlowModels.models     # the layouts (and functional forms) are TensorFlow's

    def keras_model(self, model, params, state=(), sync_bn=False):
        """The Keras model `model` with the common weights `params` and `state`, and its
        (parameter, state) variables in the common order."""
        if model not in KERAS_MODELS:
            self.model_ops(model)        # an unknown model or a known gap: a clear error
        build, slots = KERAS_MODELS[model]
        m = build(sync_bn)
        variables = slots(m)
        self.set_weights(model, variables, params, state)
        return m, variables

    def set_weights(self, model, variables, params, state):
        for v, p in zip(variables[0], self.model_ops(model).to_framework(params)):
            v.assign(p)
        for v, s in zip(variables[1], state):
            v.assign(s)

    def forward_backward(self, model, params, X, y, state=None):
        from common import models
        m, (param_vars, state_vars) = self.keras_model(
            model, params, models.get(model).init_state() if state is None else state)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
        with tf.GradientTape() as tape:
            logits = m(nhwc(X), training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, param_vars)
        return (np.asarray(logits), float(loss),
                self.model_ops(model).from_framework([g.numpy() for g in grads]),
                [v.numpy() for v in state_vars])
