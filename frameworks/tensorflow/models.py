"""The models of common/models in TensorFlow. TensorFlow's CPU kernels want NHWC
images and HWIO filters: the parameters are converted once, at the edge (NumPy to
NumPy, see to_framework), and images are transposed inside the model."""
import tensorflow as tf

from common import models
from common.core.contract import ModelOps, SizedOps, TransformerOps
from common.models import resnet18 as R, vit


def loss_sum(logits, y):
    return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def avg_pool(x):
    return tf.nn.avg_pool2d(x, 2, 2, "VALID")


@tf.custom_gradient
def avg_pool_spmd(x):
    """avg_pool with its gradient written out, for DTensor, which has no layout propagation
    for AvgPoolGrad in TF 2.21 ("'tf.AvgPoolGrad' op does not implement layout
    propagation"): each input of a 2x2 window gets a quarter of its output's gradient
    (the rows and columns VALID dropped get none), the same numbers as AvgPoolGrad."""
    def grad(g):
        up = tf.repeat(tf.repeat(g / 4, 2, axis=1), 2, axis=2)
        return tf.pad(up, [[0, 0], [0, x.shape[1] - up.shape[1]], [0, x.shape[2] - up.shape[2]], [0, 0]])
    return avg_pool(x), grad


class LeNet(ModelOps):
    # the flattened features are ordered (H, W, C) here, so W3's rows are permuted
    to_framework, from_framework = (staticmethod(f) for f in models.get("lenet").CHANNELS_LAST)

    def __init__(self, pool=avg_pool):
        self.pool = pool

    def apply(self, params, state, X, training):
        return self.apply_units(params, state, X, (0, 2), training)

    def apply_units(self, params, state, X, units, training):
        # between the blocks the features are NHWC (what the next stage takes)
        if units[0] == 0:            # the conv block
            X = tf.transpose(X, [0, 2, 3, 1])
            h1 = self.pool(tf.nn.relu(tf.nn.conv2d(X, params[0], 1, "VALID") + params[1]))
            X = self.pool(tf.nn.relu(tf.nn.conv2d(h1, params[2], 1, "VALID") + params[3]))
        if units[1] == 2:            # the dense block
            h3 = tf.nn.relu(tf.reshape(X, [-1, params[4].shape[0]]) @ params[4] + params[5])
            X = h3 @ params[6] + params[7]
        return X


# Keras's (and TensorFlow's) BatchNorm momentum weights the old value: 0.9 for PyTorch's 0.1
BN_MOMENTUM = 1.0 - R.BN_MOMENTUM


def _sync_moments(x):
    """Mean and (biased) variance over every replica's batch, as one BatchNorm on the
    full batch would compute them: sums all-reduced across the replicas (all_reduce
    passes the gradient back through the same sum). Two passes, unlike Keras's
    E[x^2] - E[x]^2, which loses digits when the mean is large against the spread."""
    ctx = tf.distribute.get_replica_context()
    count = tf.cast(tf.reduce_prod(tf.shape(x)[:-1]), x.dtype)
    total, count = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [tf.reduce_sum(x, [0, 1, 2]), count])
    mean = total / count
    var = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                         tf.reduce_sum(tf.square(x - mean), [0, 1, 2])) / count
    return mean, var


def batch_norm(x, gamma, beta, mean, var, training, synchronized=False):
    """BatchNorm over NHWC x. Training: batch statistics, and the running statistics
    (variables `mean`, `var`) updated in place with the biased batch variance, as
    Keras 3 does. Else the running statistics."""
    if not training:
        return tf.raw_ops.FusedBatchNormV3(x=x, scale=gamma, offset=beta, mean=mean, variance=var,
                                           epsilon=R.BN_EPS, is_training=False)[0]
    if synchronized:
        m, v = _sync_moments(x)
        y = tf.nn.batch_normalization(x, m, v, beta, gamma, R.BN_EPS)
    else:
        # the fused kernel (one pass, and its own gradient); the raw op, because
        # tf.compat.v1.nn.fused_batch_norm raises epsilon to 1.001e-5. It returns the
        # unbiased batch variance: rescaled to the biased one.
        empty = tf.zeros([0], x.dtype)
        y, m, v, *_ = tf.raw_ops.FusedBatchNormV3(x=x, scale=gamma, offset=beta, mean=empty,
                                                  variance=empty, epsilon=R.BN_EPS, is_training=True)
        n = tf.cast(tf.reduce_prod(tf.shape(x)[:-1]), x.dtype)
        v = v * (n - 1) / n
    mean.assign(BN_MOMENTUM * mean + (1 - BN_MOMENTUM) * m)
    var.assign(BN_MOMENTUM * var + (1 - BN_MOMENTUM) * v)
    return y


class ResNet18(SizedOps):
    """The chapter's ResNet-18 (common/models/resnet18.py) in NHWC, walked from its
    structure. `synchronized`: BatchNorm statistics over every replica of a
    tf.distribute strategy (native mode's sync_bn)."""
    unbiased_running_var = False    # Keras 3's running variance is the biased one

    def __init__(self, synchronized=False):
        self.synchronized = synchronized

    def to_framework(self, params):
        return self.R.CHANNELS_LAST[0](params)

    def from_framework(self, params):
        return self.R.CHANNELS_LAST[1](params)

    def apply(self, params, state, X, training):
        return self.apply_units(params, state, X, (0, len(self.R.UNITS)), training)

    def apply_units(self, params, state, X, units, training):
        R = self.R                   # this size's structure

        def conv(x, c, stride, pad):
            # pad 1 on both sides as PyTorch: "SAME" at stride 2 would pad only after
            padding = ("VALID" if not pad else "SAME" if stride == 1
                       else [[0, 0], [pad, pad], [pad, pad], [0, 0]])
            return tf.nn.bias_add(tf.nn.conv2d(x, params[c["weight"]], stride, padding),
                                  params[c["bias"]])

        def bn(x, i):
            return batch_norm(x, params[i["gamma"]], params[i["beta"]], state[i["mean"]],
                              state[i["var"]], training, self.synchronized)

        # between the stages the features are NHWC (what the next stage takes)
        h = R.walk(tf.transpose(X, [0, 2, 3, 1]) if units[0] == 0 else X, conv, bn, tf.nn.relu, units)
        if units[1] <= R.HEAD:
            return h
        return tf.reduce_mean(h, [1, 2]) @ params[R.FC["weight"]] + params[R.FC["bias"]]


def _layer_norm(x, g, b, eps):
    """LayerNorm over the last axis (TensorFlow has no functional one): tf.nn.moments'
    biased variance, as every framework's LayerNorm."""
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + eps) * g + b


class ViT(TransformerOps):
    """d2l's Vision Transformer (common/models/vit.py) in TensorFlow's ops: the patch
    embedding a strided tf.nn.conv2d on NHWC images (its filter HWIO: the model's
    CHANNELS_LAST), LayerNorm from tf.nn.moments, attention written out, the exact
    tf.nn.gelu (approximate=False, its default)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.to_framework, self.from_framework = models.get(name).CHANNELS_LAST

    loss_sum = staticmethod(loss_sum)

    def embed(self, X, patch_w, patch_b, cls, pos):
        x = tf.nn.conv2d(tf.transpose(X, [0, 2, 3, 1]), patch_w, vit.shape(self.name).patch,
                         "VALID") + patch_b
        x = tf.reshape(x, [tf.shape(x)[0], -1, x.shape[-1]])
        cls = tf.tile(tf.reshape(cls, [1, 1, -1]), [tf.shape(x)[0], 1, 1])
        return tf.concat([cls, x], axis=1) + pos

    def norm(self, X, gamma, beta):
        return _layer_norm(X, gamma, beta, vit.shape(self.name).eps)

    def attend(self, a, Wq, Wk, Wv, Wo, heads):
        s = vit.shape(self.name)

        def heads_of(W):
            return tf.transpose(tf.reshape(a @ W, [-1, s.tokens, heads, s.head_width]), [0, 2, 1, 3])
        q, k, v = heads_of(Wq), heads_of(Wk), heads_of(Wv)
        att = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) / s.head_width ** 0.5, axis=-1)
        return tf.reshape(tf.transpose(att @ v, [0, 2, 1, 3]), [-1, s.tokens, heads * s.head_width]) @ Wo

    def mlp(self, a, W1, c1, W2):
        return tf.nn.gelu(a @ W1 + c1) @ W2

    def head(self, X, gamma, beta, W, c):
        return self.norm(X[:, 0], gamma, beta) @ W + c


class Models:
    models = {"lenet": LeNet(), "resnet18": ResNet18(), "vit": ViT("vit")}
    # native mode with sync_bn: the models whose BatchNorm then spans the replicas
    sync_bn_models = {"resnet18": ResNet18(synchronized=True)}
    # fsdp and tp (DTensor): the models whose gradients need ops DTensor can lay out
    dtensor_models = {"lenet": LeNet(pool=avg_pool_spmd)}
