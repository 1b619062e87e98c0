"""The chapter's LeNet as a Keras model (channels-last), its weights set from the
common initial weights through TensorFlow's layout conversion."""
import numpy as np
import keras
import tensorflow as tf
from keras import layers

from frameworks.tensorflow.lenet import from_tf, to_tf


def keras_lenet(params):
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(20, 3, activation="relu"),
        layers.AveragePooling2D(2),
        layers.Conv2D(50, 5, activation="relu"),
        layers.AveragePooling2D(2),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dense(10),
    ])
    model.set_weights(to_tf(params))
    return model


def nhwc(X):
    return np.asarray(X, np.float32).transpose(0, 2, 3, 1)


class LeNet:
    def lenet(self, replica, X):
        return replica[0](tf.transpose(X, [0, 2, 3, 1]), training=False)

    def forward_backward(self, params, X, y):
        model = keras_lenet(params)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
        with tf.GradientTape() as tape:
            logits = model(nhwc(X), training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        return np.asarray(logits), float(loss), from_tf([g.numpy() for g in grads])
