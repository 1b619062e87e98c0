"""The models of common/models as Keras models (channels-last), their weights set
from the common initial weights through TensorFlow's layout conversion. Keras has
no scratch mode, so its oracle check (forward_backward) runs the Keras model."""
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from frameworks.tensorflow.models import Models as TensorFlowModels


def keras_lenet():
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


# model name -> a Keras model builder; the weights' layout is TensorFlow's (its ModelOps)
KERAS_MODELS = {"lenet": keras_lenet}


def nhwc(X):
    return np.asarray(X, np.float32).transpose(0, 2, 3, 1)


class Models:
    models = TensorFlowModels.models     # the layouts (and functional forms) are TensorFlow's

    def keras_model(self, model, params):
        """The Keras model `model` with the common weights `params`."""
        if model not in KERAS_MODELS:
            self.model_ops(model)        # an unknown model or a known gap: a clear error
        m = KERAS_MODELS[model]()
        m.set_weights(self.model_ops(model).to_framework(params))
        return m

    def forward_backward(self, model, params, X, y, state=None):
        m = self.keras_model(model, params)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
        with tf.GradientTape() as tape:
            logits = m(nhwc(X), training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, m.trainable_variables)
        return (np.asarray(logits), float(loss),
                self.model_ops(model).from_framework([g.numpy() for g in grads]),
                [w.numpy() for w in m.non_trainable_weights])
