"""The chapter's LeNet in TensorFlow. TensorFlow's CPU kernels want NHWC images
and HWIO filters: the parameters are converted once, at the edge, and the
flattened features are ordered (H, W, C), so W3's rows are permuted to match."""
import numpy as np
import tensorflow as tf

POOLED = (50, 4, 4)   # channels, height, width before the flatten


def to_tf(params):
    W1, b1, W2, b2, W3, b3, W4, b4 = params
    W3 = W3.reshape(*POOLED, -1).transpose(1, 2, 0, 3).reshape(W3.shape)
    return [W1.transpose(2, 3, 1, 0), b1, W2.transpose(2, 3, 1, 0), b2, W3, b3, W4, b4]


def from_tf(params):
    W1, b1, W2, b2, W3, b3, W4, b4 = [np.asarray(p) for p in params]
    c, h, w = POOLED
    W3 = W3.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(W3.shape)
    return [W1.transpose(3, 2, 0, 1), b1, W2.transpose(3, 2, 0, 1), b2, W3, b3, W4, b4]


def lenet(X, params):
    """X in the common NCHW layout, params in TensorFlow's."""
    X = tf.transpose(X, [0, 2, 3, 1])
    h1 = tf.nn.avg_pool2d(tf.nn.relu(tf.nn.conv2d(X, params[0], 1, "VALID") + params[1]), 2, 2, "VALID")
    h2 = tf.nn.avg_pool2d(tf.nn.relu(tf.nn.conv2d(h1, params[2], 1, "VALID") + params[3]), 2, 2, "VALID")
    h3 = tf.nn.relu(tf.reshape(h2, [-1, params[4].shape[0]]) @ params[4] + params[5])
    return h3 @ params[6] + params[7]


def loss_sum(logits, y):
    return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


class LeNet:
    def lenet(self, replica, X):
        return lenet(X, replica)

    def forward_backward(self, params, X, y):
        ps = [tf.Variable(p) for p in to_tf(params)]
        with tf.GradientTape() as tape:
            logits = lenet(tf.constant(X, tf.float32), ps)
            loss = loss_sum(logits, tf.constant(y, tf.int64))
        grads = tape.gradient(loss, ps)
        return logits.numpy(), float(loss), from_tf([g.numpy() for g in grads])
