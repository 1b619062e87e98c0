"""The models of common/models in TensorFlow. TensorFlow's CPU kernels want NHWC
images and HWIO filters: the parameters are converted once, at the edge (NumPy to
NumPy, see to_framework), and images are transposed inside the model."""
import numpy as np
import tensorflow as tf

from common.contract import ModelOps


def loss_sum(logits, y):
    return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def hwio(W):
    return W.transpose(2, 3, 1, 0)


def oihw(W):
    return W.transpose(3, 2, 0, 1)


class LeNet(ModelOps):
    POOLED = (50, 4, 4)   # channels, height, width before the flatten

    def to_framework(self, params):
        # the flattened features are ordered (H, W, C) here, so W3's rows are permuted
        W1, b1, W2, b2, W3, b3, W4, b4 = [np.asarray(p) for p in params]
        W3 = W3.reshape(*self.POOLED, -1).transpose(1, 2, 0, 3).reshape(W3.shape)
        return [hwio(W1), b1, hwio(W2), b2, W3, b3, W4, b4]

    def from_framework(self, params):
        W1, b1, W2, b2, W3, b3, W4, b4 = [np.asarray(p) for p in params]
        c, h, w = self.POOLED
        W3 = W3.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(W3.shape)
        return [oihw(W1), b1, oihw(W2), b2, W3, b3, W4, b4]

    def apply(self, params, state, X, training):
        X = tf.transpose(X, [0, 2, 3, 1])
        h1 = tf.nn.avg_pool2d(tf.nn.relu(tf.nn.conv2d(X, params[0], 1, "VALID") + params[1]), 2, 2, "VALID")
        h2 = tf.nn.avg_pool2d(tf.nn.relu(tf.nn.conv2d(h1, params[2], 1, "VALID") + params[3]), 2, 2, "VALID")
        h3 = tf.nn.relu(tf.reshape(h2, [-1, params[4].shape[0]]) @ params[4] + params[5])
        return h3 @ params[6] + params[7]


class Models:
    models = {"lenet": LeNet()}
