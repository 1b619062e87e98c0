"""The models of common/models as MXNet functions (common layout: NCHW, OIHW). Each
takes the operator namespace F (mx.nd, or mx.sym inside a hybridized block), so the
same code runs imperatively and as a cached graph; shapes come from common/models,
since a symbol has none; and each model as gluon's own layers (native mode)."""
from mxnet import gluon, nd
from mxnet.gluon import nn

from common import models
from common.core.contract import ModelOps, SizedOps, TransformerOps
from common.models import lenet as L, vit

loss = gluon.loss.SoftmaxCrossEntropyLoss()


class LeNet(ModelOps):
    def apply(self, params, state, X, training, F=nd):
        return self.apply_units(params, state, X, (0, 2), training, F)

    def apply_units(self, params, state, X, units, training, F=nd):
        def conv(x, w, b):
            shape = L.PARAM_SHAPES[w]
            return F.Convolution(data=x, weight=params[w], bias=params[b], kernel=shape[2:],
                                 num_filter=shape[0])
        if units[0] == 0:            # the conv block
            h1 = F.Pooling(F.relu(conv(X, 0, 1)), pool_type="avg", kernel=(2, 2), stride=(2, 2))
            X = F.Pooling(F.relu(conv(h1, 2, 3)), pool_type="avg", kernel=(2, 2), stride=(2, 2))
        if units[1] == 2:            # the dense block
            h3 = F.relu(F.broadcast_add(F.dot(F.flatten(X), params[4]), params[5]))
            X = F.broadcast_add(F.dot(h3, params[6]), params[7])
        return X


class ResNet18(SizedOps):
    # MXNet 1.x updates the running statistics in the backward pass, with the biased
    # variance; momentum is the weight of the old value (0.9 = PyTorch's 0.1)
    unbiased_running_var = False
    running_stats_in_backward = True   # measured: a pipeline's M micro-batches update them last to first

    def apply(self, params, state, X, training, F=nd):
        return self.apply_units(params, state, X, (0, len(self.R.UNITS)), training, F)

    def apply_units(self, params, state, X, units, training, F=nd):
        R = self.R                   # this size's structure

        def conv(x, c, stride, pad):
            shape = R.PARAM_SHAPES[c["weight"]]
            return F.Convolution(data=x, weight=params[c["weight"]], bias=params[c["bias"]],
                                 kernel=shape[2:], stride=(stride, stride), pad=(pad, pad),
                                 num_filter=shape[0])

        def bn(x, i):
            return F.BatchNorm(x, params[i["gamma"]], params[i["beta"]], state[i["mean"]],
                               state[i["var"]], eps=R.BN_EPS, momentum=1 - R.BN_MOMENTUM,
                               fix_gamma=False, use_global_stats=not training)

        h = R.walk(X, conv, bn, F.relu, units)
        if units[1] <= R.HEAD:
            return h
        return F.broadcast_add(F.dot(F.mean(h, axis=(2, 3)), params[R.FC["weight"]]),
                               params[R.FC["bias"]])


# --- the ViT's steps that its scratch form and its gluon layers share (F: mx.nd or mx.sym) ---

def transpose_qkv(F, X, heads):
    """d2l's transpose_qkv: (batch, tokens, width) -> (batch x heads, tokens, head width),
    so that one batch_dot computes every head."""
    return F.reshape(F.transpose(F.reshape(X, (0, 0, heads, -1)), (0, 2, 1, 3)), (-3, 0, 0))


def transpose_output(F, X, heads):
    """d2l's transpose_output: transpose_qkv undone, the heads side by side again."""
    return F.reshape(F.transpose(F.reshape(X, (-4, -1, heads, 0, 0)), (0, 2, 1, 3)), (0, 0, -3))


def attention(F, q, k, v, head_width):
    """d2l's DotProductAttention over (batch x heads): no mask, no dropout."""
    scores = F.batch_dot(q, k, transpose_b=True) / head_width ** 0.5
    return F.batch_dot(F.softmax(scores, axis=-1), v)


def with_class_token(F, x, cls, pos):
    """The class token before the patches' tokens, the position embeddings added."""
    cls = F.broadcast_like(F.reshape(cls, (1, 1, -1)), F.slice_axis(x, axis=1, begin=0, end=1))
    return F.broadcast_add(F.concat(cls, x, dim=1), F.expand_dims(pos, 0))


def class_token(F, X):
    """(batch, tokens, width) -> the class token's (batch, width)."""
    return F.reshape(F.slice_axis(X, axis=1, begin=0, end=1), (0, -1))


class ViT(TransformerOps):
    """d2l's Vision Transformer (common/models/vit.py) in MXNet's operators (F: mx.nd, or
    mx.sym in a hybridized block): Convolution with stride = kernel = patch, LayerNorm at
    the model's epsilon, attention with batch_dot over (batch x heads) as d2l's MXNet
    writes it, GELU as LeakyReLU(act_type="gelu")."""

    loss_sum = staticmethod(lambda logits, y: nd.sum(loss(logits, y)))

    def apply(self, params, state, X, training, F=nd):
        return self.apply_units(params, state, X, (0, vit.shape(self.name).units), training, F=F)

    def embed(self, X, patch_w, patch_b, cls, pos, F=nd):
        s = vit.shape(self.name)
        patch = (s.patch, s.patch)
        x = F.Convolution(data=X, weight=patch_w, bias=patch_b, kernel=patch, stride=patch,
                          num_filter=s.width)
        return with_class_token(F, F.transpose(F.reshape(x, (0, s.width, -1)), (0, 2, 1)), cls, pos)

    def norm(self, X, gamma, beta, F=nd):
        return F.LayerNorm(X, gamma, beta, axis=-1, eps=vit.shape(self.name).eps)

    def attend(self, a, Wq, Wk, Wv, Wo, heads, F=nd):
        q, k, v = (transpose_qkv(F, F.dot(a, W), heads) for W in (Wq, Wk, Wv))
        return F.dot(transpose_output(F, attention(F, q, k, v, vit.shape(self.name).head_width), heads), Wo)

    def mlp(self, a, W1, c1, W2, F=nd):
        return F.dot(F.LeakyReLU(F.broadcast_add(F.dot(a, W1), c1), act_type="gelu"), W2)

    def bias(self, x, c, F=nd):
        return F.broadcast_add(x, c)

    def head(self, X, gamma, beta, W, c, F=nd):
        return F.broadcast_add(F.dot(self.norm(class_token(F, X), gamma, beta, F=F), W), c)


# --- each model in gluon's own layers (native mode: a gluon Trainer over them) ---

def gluon_lenet(model, sync_devices=0):
    net = nn.HybridSequential()
    net.add(nn.Conv2D(20, kernel_size=3, activation="relu", in_channels=1),
            nn.AvgPool2D(pool_size=2, strides=2),
            nn.Conv2D(50, kernel_size=5, activation="relu", in_channels=20),
            nn.AvgPool2D(pool_size=2, strides=2),
            nn.Dense(128, activation="relu", in_units=800),
            nn.Dense(10, in_units=128))
    return net


class Residual(nn.HybridBlock):
    """d2l's Residual block, as the chapter's concise MXNet writes it."""

    def __init__(self, cin, cout, use_1x1conv, strides, norm):
        super().__init__()
        self.conv1 = nn.Conv2D(cout, kernel_size=3, padding=1, strides=strides, in_channels=cin)
        self.conv2 = nn.Conv2D(cout, kernel_size=3, padding=1, in_channels=cout)
        self.conv3 = (nn.Conv2D(cout, kernel_size=1, strides=strides, in_channels=cin)
                      if use_1x1conv else None)
        self.bn1, self.bn2 = norm(cout), norm(cout)

    def hybrid_forward(self, F, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3:
            X = self.conv3(X)
        return F.relu(Y + X)


def gluon_resnet18(model, sync_devices=0):
    """The chapter's concise resnet18(10) in gluon; BatchNorm synchronised over
    sync_devices contexts when that is more than zero (gluon.contrib's SyncBatchNorm)."""
    R = models.get(model)            # the size's structure

    def norm(c):
        kw = dict(momentum=1 - R.BN_MOMENTUM, epsilon=R.BN_EPS, in_channels=c)
        return (gluon.contrib.nn.SyncBatchNorm(num_devices=sync_devices, **kw) if sync_devices
                else nn.BatchNorm(**kw))
    width = R.STAGES[0][0]
    net = nn.HybridSequential()
    net.add(nn.Conv2D(width, kernel_size=3, strides=1, padding=1, in_channels=1), norm(width),
            nn.Activation("relu"))
    for b in R.BLOCKS:
        net.add(Residual(b["in"], b["out"], b["shortcut"] is not None, b["stride"], norm))
    net.add(nn.GlobalAvgPool2D(), nn.Dense(R.NUM_CLASSES, in_units=R.STAGES[-1][0]))
    return net


class MultiHeadAttention(nn.HybridBlock):
    """d2l's MultiHeadAttention in MXNet: Dense layers without biases for the queries,
    keys, values and output, the heads folded into the batch for batch_dot."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads, self.head_width = heads, width // heads
        self.W_q, self.W_k, self.W_v, self.W_o = (
            nn.Dense(width, use_bias=False, flatten=False, in_units=width) for _ in range(4))

    def hybrid_forward(self, F, X):
        q, k, v = (transpose_qkv(F, W(X), self.heads) for W in (self.W_q, self.W_k, self.W_v))
        return self.W_o(transpose_output(F, attention(F, q, k, v, self.head_width), self.heads))


class ViTBlock(nn.HybridBlock):
    """d2l's ViTBlock: pre-norm LayerNorm, attention, a residual; LayerNorm, Dense, GELU
    (nn.GELU: LeakyReLU's act_type "gelu", erf's to 2e-7 in float64), Dense, a residual."""

    def __init__(self, width, mlp, heads, eps):
        super().__init__()
        self.ln1 = nn.LayerNorm(epsilon=eps, in_channels=width)
        self.attention = MultiHeadAttention(width, heads)
        self.ln2 = nn.LayerNorm(epsilon=eps, in_channels=width)
        self.mlp = nn.HybridSequential()
        self.mlp.add(nn.Dense(mlp, flatten=False, in_units=width), nn.GELU(),
                     nn.Dense(width, flatten=False, in_units=mlp))

    def hybrid_forward(self, F, X):
        X = X + self.attention(self.ln1(X))
        return X + self.mlp(self.ln2(X))


class ClassToken(nn.HybridBlock):
    """The class token and the position embeddings: a block of their own after the patch
    embedding, so that gluon registers the ViT's Parameters in the common order (the
    model's KEY_ORDER, the KVStore's keys); a block's own Parameters precede its
    children's."""

    def __init__(self, width, tokens):
        super().__init__()
        self.cls = self.params.get("cls", shape=(width,))
        self.pos = self.params.get("pos", shape=(tokens, width))

    def hybrid_forward(self, F, x, cls, pos):
        return with_class_token(F, x, cls, pos)


class GluonViT(nn.HybridBlock):
    """d2l's ViT in gluon's layers: a Conv2D patch embedding (kernel = stride = patch),
    the class token and positions, the blocks, the class token's LayerNorm and a Dense head."""

    def __init__(self, model):
        super().__init__()
        s, m = vit.shape(model), models.get(model)
        self.patch_embedding = nn.Conv2D(s.width, kernel_size=s.patch, strides=s.patch,
                                         in_channels=m.IMAGE_SHAPE[0])
        self.tokens = ClassToken(s.width, s.tokens)
        self.blocks = nn.HybridSequential()
        self.blocks.add(*[ViTBlock(s.width, s.mlp, s.heads, s.eps) for _ in range(s.blocks)])
        self.head = nn.HybridSequential()
        self.head.add(nn.LayerNorm(epsilon=s.eps, in_channels=s.width),
                      nn.Dense(m.NUM_CLASSES, in_units=s.width))

    def hybrid_forward(self, F, X):
        x = F.transpose(F.reshape(self.patch_embedding(X), (0, 0, -1)), (0, 2, 1))
        return self.head(class_token(F, self.blocks(self.tokens(x))))


def gluon_vit(model, sync_devices=0):
    """The ViT at the size `model` names; it has no BatchNorm to synchronise."""
    return GluonViT(model)


def _registered_slots(net, model):
    params = list(net.collect_params().values())   # registered in the common order
    return params, []


def _resnet18_slots(net, model):
    """The gluon Parameters in the order of PARAM_NAMES and STATE_NAMES."""
    R = models.get(model)
    blocks = list(net)[3:3 + len(R.BLOCKS)]
    return R.layer_slots((net[0], net[1]), [(m.conv1, m.bn1, m.conv2, m.bn2, m.conv3)
                                            for m in blocks], net[-1],
                         ("gamma", "beta", "running_mean", "running_var"))


def _transposing(which):
    """(common -> gluon, gluon -> common): gluon's Dense keeps its weight (out, in), the
    common layout (in, out), so the parameters that which(index, array) picks are
    transposed, each way alike."""
    def convert(params):
        return [p.T if which(i, p) else p for i, p in enumerate(params)]
    return convert, convert


def every_2d_layout(model):
    """Every 2-D parameter is a Dense weight (LeNet, ResNet-18)."""
    return _transposing(lambda i, p: p.ndim == 2)


def vit_layout(model):
    """The Dense weights alone: the position embeddings are 2-D too, and the same in both."""
    kinds = models.get(model).PARAM_KINDS
    return _transposing(lambda i, p: kinds[i] == "dense_weight")


# model family (common.models.family) -> (build(model, sync_devices), slots(net, model):
# its (parameters, state) in the common order, layout(model): its conversions (common -> gluon,
# gluon -> common))
GLUON_MODELS = {"lenet": (gluon_lenet, _registered_slots, every_2d_layout),
                "resnet18": (gluon_resnet18, _resnet18_slots, every_2d_layout),
                "vit": (gluon_vit, _registered_slots, vit_layout)}


class Models:
    models = {"lenet": LeNet(), "resnet18": ResNet18(), "vit": ViT("vit")}
