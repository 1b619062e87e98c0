"""The models of common/models as PyTorch functions (the common layout is PyTorch's own),
and ResNet-18 as the chapter's concise nn.Module too (native mode, SyncBatchNorm)."""
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from common.core.contract import ModelOps, SizedOps, TransformerOps
from common import models
from common.models import resnet18 as R, vit


def to_layout(p):
    """Conv weights (and images) in channels-last memory: the same values, and oneDNN's
    CPU convolutions run a LeNet step about 10% faster that way (measured here:
    68.7 -> 60.0 ms per step at batch 256 on 2 cores)."""
    return p.contiguous(memory_format=torch.channels_last) if p.dim() == 4 else p


def loss_sum(logits, y):
    return F.cross_entropy(logits, y, reduction="sum")


class LeNet(ModelOps):
    channels_last = True             # see to_layout

    def apply(self, params, state, X, training):
        return self.apply_units(params, state, X, (0, 2), training)

    def apply_units(self, params, state, X, units, training):
        if units[0] == 0:            # the conv block
            X = to_layout(X)
            h1 = F.avg_pool2d(F.relu(F.conv2d(X, params[0], params[1])), kernel_size=2, stride=2)
            X = F.avg_pool2d(F.relu(F.conv2d(h1, params[2], params[3])), kernel_size=2, stride=2)
        if units[1] == 2:            # the dense block
            h3 = F.relu(torch.mm(X.reshape(X.shape[0], -1), params[4]) + params[5])
            X = torch.mm(h3, params[6]) + params[7]
        return X


class ResNet18(SizedOps):
    unbiased_running_var = True      # F.batch_norm's running variance is the unbiased one
    # Not channels-last: with it, oneDNN's float32 kernels on this CPU gave ResNet-18
    # gradients 1e-2 to 1e-1 away from the float64 oracle (NCHW: 5e-6; float64: 1e-14
    # either way) for the same weights and batch.
    channels_last = False

    def apply(self, params, state, X, training):
        return self.apply_units(params, state, X, (0, len(self.R.UNITS)), training)

    def apply_units(self, params, state, X, units, training):
        R = self.R                   # this size's structure

        def conv(x, c, stride, pad):
            return F.conv2d(x, params[c["weight"]], params[c["bias"]], stride, pad)

        def bn(x, i):   # in training, updates the running statistics in place
            return F.batch_norm(x, state[i["mean"]], state[i["var"]], params[i["gamma"]],
                                params[i["beta"]], training, R.BN_MOMENTUM, R.BN_EPS)

        h = R.walk(X, conv, bn, F.relu, units)
        if units[1] <= R.HEAD:
            return h
        return torch.mm(h.mean(dim=(2, 3)), params[R.FC["weight"]]) + params[R.FC["bias"]]


class Residual(nn.Module):
    """d2l's Residual block, as the chapter writes it."""

    def __init__(self, cin, cout, use_1x1conv=False, strides=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, kernel_size=3, padding=1, stride=strides)
        self.conv2 = nn.Conv2d(cout, cout, kernel_size=3, padding=1)
        self.conv3 = nn.Conv2d(cin, cout, kernel_size=1, stride=strides) if use_1x1conv else None
        self.bn1 = nn.BatchNorm2d(cout, eps=R.BN_EPS, momentum=R.BN_MOMENTUM)
        self.bn2 = nn.BatchNorm2d(cout, eps=R.BN_EPS, momentum=R.BN_MOMENTUM)

    def forward(self, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3:
            X = self.conv3(X)
        return F.relu(Y + X)


class ResNet18Module(nn.Module):
    """The chapter's concise resnet18(10, 1) as an nn.Module, its weights and running
    statistics set from the common lists; slots() maps them to the common order."""

    def __init__(self, params, state, model="resnet18"):
        super().__init__()
        self.model = model           # the size (common.models.get(model): its structure)
        R = models.get(model)
        width = R.STAGES[0][0]
        self.stem = nn.Sequential(nn.Conv2d(1, width, kernel_size=3, stride=1, padding=1),
                                  nn.BatchNorm2d(width, eps=R.BN_EPS, momentum=R.BN_MOMENTUM), nn.ReLU())
        self.blocks = nn.Sequential(*[Residual(b["in"], b["out"], b["shortcut"] is not None,
                                               b["stride"]) for b in R.BLOCKS])
        self.fc = nn.Linear(R.STAGES[-1][0], R.NUM_CLASSES)
        self.load(params, state)     # NCHW, as ResNet18 above

    def slots(self):
        """(parameters, state tensors) in the order of PARAM_NAMES and STATE_NAMES."""
        return models.get(self.model).layer_slots(
            self.stem[:2], [(m.conv1, m.bn1, m.conv2, m.bn2, m.conv3) for m in self.blocks],
            self.fc, ("weight", "bias", "running_mean", "running_var"))

    def read(self):
        ps, ss = self.slots()
        out = [p.detach().cpu().numpy().copy() for p in ps]
        fc = models.get(self.model).FC["weight"]
        out[fc] = out[fc].T.copy()   # nn.Linear keeps (out, in)
        return out, [s.cpu().numpy().copy() for s in ss]

    def load(self, params, state):
        ps, ss = self.slots()
        params = list(params)
        fc = models.get(self.model).FC["weight"]
        params[fc] = np.asarray(params[fc]).T
        with torch.no_grad():
            for p, v in zip(ps, params):
                p.copy_(torch.from_numpy(np.ascontiguousarray(v)))
            for s, v in zip(ss, state):
                s.copy_(torch.from_numpy(np.asarray(v)))

    def forward(self, X):
        h = self.blocks(self.stem(X))
        return self.fc(F.adaptive_avg_pool2d(h, (1, 1)).flatten(1))


class ViT(TransformerOps):
    """d2l's Vision Transformer (common/models/vit.py) in PyTorch's functional ops: the
    patch embedding a strided conv2d, F.layer_norm at the model's epsilon, attention by
    F.scaled_dot_product_attention (its default scale 1/sqrt(head width), no mask, no
    dropout), the exact GELU (F.gelu's default)."""
    loss_sum = staticmethod(loss_sum)

    def embed(self, X, patch_w, patch_b, cls, pos):
        x = F.conv2d(X, patch_w, patch_b, stride=vit.shape(self.name).patch).flatten(2).transpose(1, 2)
        return torch.cat([cls.expand(len(x), 1, cls.shape[0]), x], 1) + pos

    def norm(self, X, gamma, beta):
        return F.layer_norm(X, gamma.shape, gamma, beta, vit.shape(self.name).eps)

    def attend(self, a, Wq, Wk, Wv, Wo, heads):
        n, t = a.shape[:2]
        q, k, v = ((a @ W).view(n, t, heads, -1).transpose(1, 2) for W in (Wq, Wk, Wv))
        o = F.scaled_dot_product_attention(q, k, v)
        return o.transpose(1, 2).reshape(n, t, -1) @ Wo

    def mlp(self, a, W1, c1, W2):
        return F.gelu(a @ W1 + c1) @ W2

    def head(self, X, gamma, beta, W, c):
        return self.norm(X[:, 0], gamma, beta) @ W + c


class Attention(nn.Module):
    """d2l's MultiHeadAttention as the book writes it: W_q, W_k, W_v and W_o each an
    nn.Linear (bias=False), the heads side by side in their features; the heads counted
    from the features each projection gives (head width fixed), so that a device holding
    some heads' columns (tp mode's ColwiseParallel) computes those heads."""

    def __init__(self, w, head_width):
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(w, w, bias=False) for _ in range(4))
        self.head_width = head_width

    def forward(self, X):
        n, t = X.shape[:2]
        q, k, v = (f(X).view(n, t, -1, self.head_width).transpose(1, 2) for f in (self.q, self.k, self.v))
        return self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, t, -1))


class ViTBlock(nn.Module):
    """d2l's ViTBlock in PyTorch's own layers: pre-norm nn.LayerNorm, nn.MultiheadAttention
    (its Q, K and V one fused in_proj_weight; bias=False, as d2l's use_bias), or with
    split=True d2l's own four projections (Attention), a residual; nn.LayerNorm, Linear,
    nn.GELU (exact), Linear, a residual."""

    def __init__(self, w, mlp, heads, eps, split=False):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(w, eps=eps), nn.LayerNorm(w, eps=eps)
        self.attention = (Attention(w, w // heads) if split else
                          nn.MultiheadAttention(w, heads, bias=False, batch_first=True))
        self.mlp = nn.Sequential(nn.Linear(w, mlp), nn.GELU(), nn.Linear(mlp, w))

    def forward(self, X):
        a = self.ln1(X)
        if isinstance(self.attention, Attention):
            X = X + self.attention(a)
        else:
            X = X + self.attention(a, a, a, need_weights=False)[0]
        return X + self.mlp(self.ln2(X))


class ViTModule(nn.Module):
    """d2l's ViT as an nn.Module (native mode), its weights set from the common list;
    slots() pairs each common parameter with its tensor here and the view that turns one
    into the other (nn.Linear keeps (out, in); in_proj_weight stacks Q, K, V)."""

    def __init__(self, params, state, name="vit", split=False):
        super().__init__()
        from common import models
        m = models.get(name)
        s, eps = m.SIZE, m.LN_EPS
        w, p = s["width"], s["patch"]
        self.per_block = m.PER_BLOCK
        self.patch = nn.Conv2d(m.IMAGE_SHAPE[0], w, p, stride=p)
        self.cls, self.pos = nn.Parameter(torch.zeros(w)), nn.Parameter(torch.zeros(m.TOKENS, w))
        self.blocks = nn.Sequential(*[ViTBlock(w, s["mlp"], s["heads"], eps, split)
                                      for _ in range(s["blocks"])])
        self.head = nn.Sequential(nn.LayerNorm(w, eps=eps), nn.Linear(w, m.NUM_CLASSES))
        self.load(params, state)

    def forward(self, X):
        x = self.patch(X).flatten(2).transpose(1, 2)
        X = torch.cat([self.cls.expand(len(x), 1, -1), x], 1) + self.pos
        return self.head(self.blocks(X)[:, 0])

    def slots(self):
        """(tensor, its rows or None, transposed) for each common parameter, in order."""
        out = [(self.patch.weight, None, False), (self.patch.bias, None, False),
               (self.cls, None, False), (self.pos, None, False)]
        for b in self.blocks:
            w, att = b.ln1.normalized_shape[0], b.attention
            qkv = ([(att.q.weight, None, True), (att.k.weight, None, True), (att.v.weight, None, True),
                    (att.out.weight, None, True)] if isinstance(att, Attention) else
                   [*[(att.in_proj_weight, slice(i * w, (i + 1) * w), True) for i in range(3)],
                    (att.out_proj.weight, None, True)])
            out += [(b.ln1.weight, None, False), (b.ln1.bias, None, False), *qkv,
                    (b.ln2.weight, None, False), (b.ln2.bias, None, False),
                    (b.mlp[0].weight, None, True), (b.mlp[0].bias, None, False),
                    (b.mlp[2].weight, None, True), (b.mlp[2].bias, None, False)]
        return out + [(self.head[0].weight, None, False), (self.head[0].bias, None, False),
                      (self.head[1].weight, None, True), (self.head[1].bias, None, False)]

    def read(self):
        out = []
        for t, rows, transposed in self.slots():
            v = t.detach().cpu().numpy()
            v = v[rows] if rows is not None else v
            out.append((v.T if transposed else v).copy())
        return out, []

    def load(self, params, state):
        with torch.no_grad():
            for (t, rows, transposed), v in zip(self.slots(), params):
                v = torch.from_numpy(np.ascontiguousarray(np.asarray(v).T if transposed else v))
                (t[rows] if rows is not None else t).copy_(v)


# model family (common.models.family) -> build(model, params, state): its nn.Module of
# PyTorch's own layers (native mode), where one is written, from the common (params,
# state): the chapter's concise ResNet-18 (nn.BatchNorm2d, which SyncBatchNorm can
# replace) and the ViT at each size; the others' native form is their functional one
# wrapped in an OpsModule (native.py)
LAYERED = {"resnet18": lambda model, params, state: ResNet18Module(params, state, model),
           "vit": lambda model, params, state: ViTModule(params, state, model)}


class Models:
    models = {"lenet": LeNet(), "resnet18": ResNet18(), "vit": ViT("vit")}

    def forward(self, model, params, X, training=False):
        with torch.no_grad():
            return super().forward(model, params, X, training)
