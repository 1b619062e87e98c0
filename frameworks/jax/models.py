"""The models of common/models as JAX functions, in the common layout (NCHW images,
OIHW filters: XLA picks its own memory layout). JAX is functional: in training,
`apply` writes BatchNorm's new running statistics into the `state` list it is given
(a Python list, so this works inside jax.jit and jax.vjp too, where the caller
returns that list), and `loss_and_grads` returns them."""
import copy

import jax
import jax.numpy as jnp
from jax import lax

from common.core.contract import ModelOps, SizedOps, TransformerOps
from common.models import resnet18 as R, vit

from .devices import value

_NCHW = ("NCHW", "OIHW", "NCHW")


def loss_sum(logits, y):
    """The summed cross-entropy of integer labels y."""
    return -jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def conv2d(x, W, b, stride=1, pad=0):
    out = lax.conv_general_dilated(x, W, (stride, stride), [(pad, pad), (pad, pad)],
                                   dimension_numbers=_NCHW)
    return out + b[None, :, None, None]


def avg_pool2(x):
    """2x2 average pooling, stride 2 (an odd last row or column is dropped, as PyTorch does)."""
    n, c, h, w = x.shape
    x = x[:, :, : h // 2 * 2, : w // 2 * 2]
    return x.reshape(n, c, h // 2, 2, w // 2, 2).mean(axis=(3, 5))


class LeNet(ModelOps):
    def grouped(self, groups):
        return self              # no BatchNorm: nothing per replica

    def apply(self, params, state, X, training):
        return self.apply_units(params, state, X, (0, 2), training)

    def apply_units(self, params, state, X, units, training):
        if units[0] == 0:            # the conv block
            h1 = avg_pool2(jax.nn.relu(conv2d(X, params[0], params[1])))
            X = avg_pool2(jax.nn.relu(conv2d(h1, params[2], params[3])))
        if units[1] == 2:            # the dense block
            h3 = jax.nn.relu(X.reshape(X.shape[0], -1) @ params[4] + params[5])
            X = h3 @ params[6] + params[7]
        return X


def batch_norm(x, gamma, beta, state, i, training, groups=1):
    """BatchNorm over NCHW x. Training: the batch's statistics, and state[mean], state[var]
    replaced by their running update (PyTorch's convention: momentum 0.1, the unbiased
    batch variance). Else the running statistics. groups > 1: the batch is `groups`
    contiguous shards, each normalised with its own statistics and keeping its own
    running statistics (state entries (groups, C)): native mode's replicas."""
    if not training:
        mean, var = state[i["mean"]], state[i["var"]]
        inv = gamma * lax.rsqrt(var + R.BN_EPS)
        return (x - mean[None, :, None, None]) * inv[None, :, None, None] + beta[None, :, None, None]
    xg = x.reshape(groups, -1, *x.shape[1:])
    mean = xg.mean(axis=(1, 3, 4))
    var = jnp.square(xg - mean[:, None, :, None, None]).mean(axis=(1, 3, 4))
    n = xg[0].size // x.shape[1]
    m, shape = R.BN_MOMENTUM, state[i["mean"]].shape
    state[i["mean"]] = (1 - m) * state[i["mean"]] + m * lax.stop_gradient(mean).reshape(shape)
    state[i["var"]] = (1 - m) * state[i["var"]] + m * lax.stop_gradient(
        var * n / (n - 1)).reshape(shape)
    inv = gamma[None] * lax.rsqrt(var + R.BN_EPS)
    y = (xg - mean[:, None, :, None, None]) * inv[:, None, :, None, None]
    return (y + beta[None, None, :, None, None]).reshape(x.shape)


class ResNet18(SizedOps):
    unbiased_running_var = True      # as PyTorch

    def __init__(self, groups=1):
        self.groups = groups         # BatchNorm's shards (batch_norm), native mode's replicas

    def grouped(self, groups):
        other = copy.copy(self)      # this size's
        other.groups = groups
        return other

    def apply(self, params, state, X, training):
        return self.apply_units(params, state, X, (0, len(self.R.UNITS)), training)

    def apply_units(self, params, state, X, units, training):
        R = self.R                   # this size's structure

        def conv(x, c, stride, pad):
            return conv2d(x, params[c["weight"]], params[c["bias"]], stride, pad)

        def bn(x, i):
            return batch_norm(x, params[i["gamma"]], params[i["beta"]], state, i, training,
                              self.groups)

        h = R.walk(X, conv, bn, jax.nn.relu, units)
        if units[1] <= R.HEAD:
            return h
        return h.mean(axis=(2, 3)) @ params[R.FC["weight"]] + params[R.FC["bias"]]


def sgd_update(params, grads, scale):
    """p - scale * grad for every parameter: the new parameters (JAX updates nothing in place)."""
    return [p - scale * g for p, g in zip(params, grads)]


def training_step_fn(ops, units=None):
    """(params, state, X, y) -> ((summed loss, (logits, new state)), gradients): the
    model's training pass and its gradients, by jax.value_and_grad."""
    def loss(params, state, X, y):
        state = list(state)
        logits = (ops.apply(params, state, X, True) if units is None
                  else ops.apply_units(params, state, X, units, True))
        return loss_sum(logits, y), (logits, state)
    return jax.value_and_grad(loss, has_aux=True)


def layer_norm(x, g, b, eps):
    """LayerNorm over the last axis (the biased variance, as every framework's)."""
    mean = x.mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps) * g + b


class ViT(TransformerOps):
    """d2l's Vision Transformer (common/models/vit.py) in JAX: the patch embedding a
    strided convolution, LayerNorm written out, attention by jax.nn.dot_product_attention
    (its default scale 1/sqrt(head width); tokens before heads, its layout), and GELU
    the exact one: jax.nn.gelu defaults to the tanh approximation, so approximate=False."""

    def grouped(self, groups):
        return self              # no BatchNorm: nothing per replica

    loss_sum = staticmethod(loss_sum)

    def embed(self, X, patch_w, patch_b, cls, pos):
        x = conv2d(X, patch_w, patch_b, stride=vit.shape(self.name).patch)
        x = x.reshape(x.shape[0], x.shape[1], -1).transpose(0, 2, 1)
        return jnp.concatenate([jnp.broadcast_to(cls, (x.shape[0], 1, cls.shape[0])), x], 1) + pos

    def norm(self, X, gamma, beta):
        return layer_norm(X, gamma, beta, vit.shape(self.name).eps)

    def attend(self, a, Wq, Wk, Wv, Wo, heads):
        n, t = a.shape[:2]
        q, k, v = ((a @ W).reshape(n, t, heads, -1) for W in (Wq, Wk, Wv))
        return jax.nn.dot_product_attention(q, k, v).reshape(n, t, -1) @ Wo

    def mlp(self, a, W1, c1, W2):
        return self.gelu(a @ W1 + c1) @ W2

    def head(self, X, gamma, beta, W, c):
        return self.norm(X[:, 0], gamma, beta) @ W + c

    def gelu(self, x):
        # a method, so that benchmarks.vit_defaults can train the ViT with JAX's default
        # (approximate=True) in its place
        return jax.nn.gelu(x, approximate=False)


class Models:
    models = {"lenet": LeNet(), "resnet18": ResNet18(), "vit": ViT("vit")}

    def compiled(self, key, build):
        """A function built once per backend and key (jax.jit caches per shapes)."""
        cache = self.__dict__.setdefault("_compiled", {})
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def forward(self, model, params, X, training=False):
        ops = self.model_ops(model)
        state = [value(s) for s in params.state]
        if training:        # eager: the new running statistics go back into the replica
            out = ops.apply([value(p) for p in params], state, value(X), True)
            for slot, s in zip(params.state, state):
                slot.value = s
            return out
        evaluate = self.compiled(("eval", model), lambda: jax.jit(
            lambda p, s, X: ops.apply(p, list(s), X, False)))
        return evaluate([value(p) for p in params], state, value(X))
