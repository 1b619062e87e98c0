"""The models of common/models as Paddle functions (common layout: NCHW, OIHW: Paddle's
own), and ResNet-18 (the chapter's concise one) and the ViT as paddle.nn Layers too
(native mode)."""
import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from common import models
from common.core.contract import ModelOps, SizedOps, TransformerOps
from common.models import resnet18 as R, vit

# Paddle's BatchNorm momentum weights the old running value: 0.9 is PyTorch's 0.1
BN_MOMENTUM = 1 - R.BN_MOMENTUM


def plus_bias(h, b, shape):
    # Paddle's CPU kernels for a broadcasting add (and its gradient) are slow: adding
    # the bias expanded to the full shape gives the same values and makes a training
    # step about 30% faster (measured: 224 -> 157 ms at batch 256 on 2 cores).
    return h + b.reshape(shape).expand(h.shape)


def loss_sum(logits, y):
    return F.cross_entropy(logits, y, reduction="sum")


class LeNet(ModelOps):
    def apply(self, params, state, X, training):
        return self.apply_units(params, state, X, (0, 2), training)

    def apply_units(self, params, state, X, units, training):
        if units[0] == 0:            # the conv block
            h1 = F.avg_pool2d(F.relu(plus_bias(F.conv2d(X, params[0]), params[1], [1, -1, 1, 1])),
                              kernel_size=2, stride=2)
            X = F.avg_pool2d(F.relu(plus_bias(F.conv2d(h1, params[2]), params[3], [1, -1, 1, 1])),
                             kernel_size=2, stride=2)
        if units[1] == 2:            # the dense block
            h3 = F.relu(plus_bias(paddle.matmul(X.flatten(1), params[4]), params[5], [1, -1]))
            X = plus_bias(paddle.matmul(h3, params[6]), params[7], [1, -1])
        return X


class ResNet18(SizedOps):
    # F.batch_norm's running variance takes the batch's biased variance (measured against
    # the oracle: 4e-7 with the biased one, 1e-4 with the unbiased)
    unbiased_running_var = False

    def apply(self, params, state, X, training):
        return self.apply_units(params, state, X, (0, len(self.R.UNITS)), training)

    def apply_units(self, params, state, X, units, training):
        R = self.R                   # this size's structure

        def conv(x, c, stride, pad):
            # the bias added expanded (plus_bias): F.conv2d's broadcasting add and its
            # gradient took 0.60 of 2.33 s op time per step at batch 64 (profiled; native
            # mode's Conv2D layers still pay it), expanded 0.11 s
            return plus_bias(F.conv2d(x, params[c["weight"]], None, stride, pad),
                             params[c["bias"]], [1, -1, 1, 1])

        def bn(x, i):   # in training, updates the running statistics in place
            return F.batch_norm(x, state[i["mean"]], state[i["var"]], params[i["gamma"]],
                                params[i["beta"]], training=training,
                                momentum=BN_MOMENTUM, epsilon=R.BN_EPS)

        h = R.walk(X, conv, bn, F.relu, units)
        if units[1] <= R.HEAD:
            return h
        return plus_bias(paddle.matmul(h.mean(axis=[2, 3]), params[R.FC["weight"]]),
                         params[R.FC["bias"]], [1, -1])


def batch_norm_2d(channels):
    return nn.BatchNorm2D(channels, momentum=BN_MOMENTUM, epsilon=R.BN_EPS)


class Residual(nn.Layer):
    """d2l's Residual block, as the chapter writes it in Paddle."""

    def __init__(self, cin, cout, use_1x1conv=False, strides=1):
        super().__init__()
        self.conv1 = nn.Conv2D(cin, cout, kernel_size=3, padding=1, stride=strides)
        self.conv2 = nn.Conv2D(cout, cout, kernel_size=3, padding=1)
        self.conv3 = nn.Conv2D(cin, cout, kernel_size=1, stride=strides) if use_1x1conv else None
        self.bn1, self.bn2 = batch_norm_2d(cout), batch_norm_2d(cout)

    def forward(self, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return F.relu(Y + X)


class ResNet18Layer(nn.Layer):
    """The chapter's concise resnet18 as a paddle.nn Layer, its weights and running
    statistics set from the common lists (Paddle's layout is the common one: Linear
    keeps (in, out)); slots() maps them to the common order. BatchNorm2D is what
    SyncBatchNorm.convert_sync_batchnorm replaces."""

    def __init__(self, params, state, model="resnet18"):
        super().__init__()
        self.model = model           # the size (common.models.get(model): its structure)
        R = models.get(model)
        width = R.STAGES[0][0]
        self.stem = nn.Sequential(nn.Conv2D(1, width, kernel_size=3, stride=1, padding=1),
                                  batch_norm_2d(width), nn.ReLU())
        self.blocks = nn.Sequential(*[Residual(b["in"], b["out"], b["shortcut"] is not None,
                                               b["stride"]) for b in R.BLOCKS])
        self.fc = nn.Linear(R.STAGES[-1][0], R.NUM_CLASSES)
        self.load(params, state)

    def slots(self):
        """(parameters, state tensors) in the order of PARAM_NAMES and STATE_NAMES."""
        return models.get(self.model).layer_slots((self.stem[0], self.stem[1]),
                             [(m.conv1, m.bn1, m.conv2, m.bn2, m.conv3) for m in self.blocks],
                             self.fc, ("weight", "bias", "_mean", "_variance"))

    def read(self):
        ps, ss = self.slots()
        return [p.numpy().copy() for p in ps], [s.numpy().copy() for s in ss]

    def load(self, params, state):
        ps, ss = self.slots()
        for t, v in zip(ps + ss, list(params) + list(state)):
            t.set_value(np.asarray(v))

    def forward(self, X):
        h = self.blocks(self.stem(X))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


class ViT(TransformerOps):
    """d2l's Vision Transformer (common/models/vit.py) in Paddle's functional ops: the
    patch embedding a strided conv2d, F.layer_norm at the model's epsilon, attention
    written out (softmax(q k^T / sqrt(head width)) v, as the chapter writes it), the
    exact GELU (F.gelu's default, approximate=False)."""

    loss_sum = staticmethod(loss_sum)

    def embed(self, X, patch_w, patch_b, cls, pos):
        x = F.conv2d(X, patch_w, patch_b, stride=vit.shape(self.name).patch).flatten(2).transpose([0, 2, 1])
        w = x.shape[2]
        return paddle.concat([cls.reshape([1, 1, w]).expand([x.shape[0], 1, w]), x], axis=1) + pos

    def norm(self, X, gamma, beta):
        return F.layer_norm(X, gamma.shape, gamma, beta, vit.shape(self.name).eps)

    def attend(self, a, Wq, Wk, Wv, Wo, heads):
        n, t = a.shape[:2]
        hw = vit.shape(self.name).head_width
        q, k, v = (paddle.matmul(a, W).reshape([n, t, heads, hw]).transpose([0, 2, 1, 3])
                   for W in (Wq, Wk, Wv))
        att = F.softmax(paddle.matmul(q, k, transpose_y=True) / hw ** 0.5, axis=-1)
        return paddle.matmul(paddle.matmul(att, v).transpose([0, 2, 1, 3]).reshape([n, t, heads * hw]), Wo)

    def mlp(self, a, W1, c1, W2):
        return paddle.matmul(F.gelu(paddle.matmul(a, W1) + c1), W2)

    def head(self, X, gamma, beta, W, c):
        return paddle.matmul(self.norm(X[:, 0], gamma, beta), W) + c


class ViTBlock(nn.Layer):
    """d2l's ViTBlock in Paddle's own layers: pre-norm nn.LayerNorm, nn.MultiHeadAttention
    (its q_proj, k_proj, v_proj and out_proj Linears; bias_attr=False, as d2l's
    use_bias; it scales q by head width^-0.5 before q k^T), a residual; nn.LayerNorm,
    Linear, nn.GELU (exact: approximate=False, its default), Linear, a residual."""

    def __init__(self, w, mlp, heads, eps):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(w, epsilon=eps), nn.LayerNorm(w, epsilon=eps)
        self.attention = nn.MultiHeadAttention(w, heads, bias_attr=False)
        self.mlp = nn.Sequential(nn.Linear(w, mlp), nn.GELU(), nn.Linear(mlp, w))

    def forward(self, X):
        a = self.ln1(X)
        X = X + self.attention(a, a, a)
        return X + self.mlp(self.ln2(X))


class ViTLayer(nn.Layer):
    """d2l's ViT as a paddle.nn Layer (native mode), its weights set from the common
    list; slots() gives its parameters in the common order, each in the common layout
    already (Linear keeps (in, out), Conv2D OIHW). load takes arrays of the parameters'
    dtype (set_value asserts it): float32, float64 after paddle.set_default_dtype."""

    def __init__(self, params, state, name="vit"):
        super().__init__()
        s = vit.shape(name)
        w = s.width
        self.patch = nn.Conv2D(vit.CHANNELS, w, s.patch, stride=s.patch)
        self.cls = self.create_parameter([w])
        self.pos = self.create_parameter([s.tokens, w])
        self.blocks = nn.Sequential(*[ViTBlock(w, s.mlp, s.heads, s.eps) for _ in range(s.blocks)])
        self.head = nn.Sequential(nn.LayerNorm(w, epsilon=s.eps), nn.Linear(w, vit.NUM_CLASSES))
        self.load(params, state)

    def forward(self, X):
        x = self.patch(X).flatten(2).transpose([0, 2, 1])
        w = x.shape[2]
        cls = self.cls.reshape([1, 1, w]).expand([x.shape[0], 1, w])
        X = paddle.concat([cls, x], axis=1) + self.pos
        return self.head(self.blocks(X)[:, 0])

    def slots(self):
        """Its parameters in the order of PARAM_NAMES."""
        out = [self.patch.weight, self.patch.bias, self.cls, self.pos]
        for b in self.blocks:
            a = b.attention
            out += [b.ln1.weight, b.ln1.bias, a.q_proj.weight, a.k_proj.weight,
                    a.v_proj.weight, a.out_proj.weight, b.ln2.weight, b.ln2.bias,
                    b.mlp[0].weight, b.mlp[0].bias, b.mlp[2].weight, b.mlp[2].bias]
        return out + [self.head[0].weight, self.head[0].bias, self.head[1].weight,
                      self.head[1].bias]

    def read(self):
        return [p.numpy().copy() for p in self.slots()], []

    def load(self, params, state):
        for t, v in zip(self.slots(), params):
            t.set_value(np.asarray(v))


class Models:
    models = {"lenet": LeNet(), "resnet18": ResNet18(), "vit": ViT("vit")}

    def forward(self, model, params, X, training=False):
        with paddle.no_grad():
            return super().forward(model, params, X, training)
