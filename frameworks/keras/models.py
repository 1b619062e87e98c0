"""The models of common/models as Keras models (channels-last), built from Keras layers
alone so that they run on every backend; their weights set from the common initial
weights in the channels-last layout (each model's CHANNELS_LAST). Keras has no scratch
mode, so its oracle check (forward_backward) runs the Keras model, its gradients taken
by the backend's own autodiff (frameworks/keras/backends: grads_of_loss_sum)."""
import keras
import numpy as np
from keras import layers

from common import models
from common.core.contract import ModelOps, NotApplicable
from common.facts import registry
from common.models import resnet18 as R

from .backends import FRAMEWORK, current

# Keras's BatchNorm momentum weights the old value: 0.9 for PyTorch's 0.1
BN_MOMENTUM = 1.0 - R.BN_MOMENTUM


def keras_lenet(model="lenet", sync_bn=False, units=None):   # no BatchNorm: nothing to synchronise
    """LeNet, or one of its pipeline units (model mode): the conv block, the dense block."""
    conv = [keras.Input((28, 28, 1)),
            layers.Conv2D(20, 3, activation="relu"),
            layers.AveragePooling2D(2),
            layers.Conv2D(50, 5, activation="relu"),
            layers.AveragePooling2D(2)]
    dense = [layers.Flatten(),
             layers.Dense(128, activation="relu"),
             layers.Dense(10)]
    return keras.Sequential({(0, 2): conv + dense, (0, 1): conv,
                             (1, 2): [keras.Input((4, 4, 50))] + dense}[tuple(units or (0, 2))])


def layer_name(param_name):
    """The Keras layer of a common parameter name: 'stage1.block1.conv1.weight' ->
    'stage1_block1_conv1' (on torch a layer is a torch module, whose name has no '.')."""
    return param_name.rsplit(".", 1)[0].replace(".", "_")


def keras_resnet18(model="resnet18", sync_bn=False, units=None):
    """The chapter's concise ResNet-18 as a functional Keras model, each layer named
    after its parameters in common/models/resnet18.py (see named_slots); with units
    (lo, hi), only those units of R.UNITS (a pipeline stage, model mode); the Keras model
    is named `model` (the size: named_slots reads its structure by that name)."""
    R = models.get(model)
    lo, hi = units or (0, len(R.UNITS))
    def conv(x, c, stride, pad):
        name = layer_name(R.PARAM_NAMES[c["weight"]])
        cout, _, k, _ = R.PARAM_SHAPES[c["weight"]]
        if pad and stride > 1:
            # PyTorch pads 1 on both sides; "same" at stride 2 would pad only after
            x = layers.ZeroPadding2D(pad, name=f"{name}_pad")(x)
        return layers.Conv2D(cout, k, stride, "same" if pad and stride == 1 else "valid",
                             name=name)(x)

    # synchronized=True where the backend has it (frameworks/keras/backends: SYNC_BN)
    sync_bn = sync_bn and current.SYNC_BN

    def bn(x, i):
        return layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=R.BN_EPS, synchronized=sync_bn,
                                         name=layer_name(R.PARAM_NAMES[i["gamma"]]))(x)

    c, hh, ww = R.UNITS[lo - 1][3] if lo else R.IMAGE_SHAPE
    X = h = keras.Input((hh, ww, c))
    if lo == 0:
        h = layers.ReLU()(bn(conv(X, R.STEM["conv"], 1, 1), R.STEM["bn"]))
    for b in R.BLOCKS[max(lo, 1) - 1: max(min(hi, R.HEAD) - 1, 0)]:
        y = layers.ReLU()(bn(conv(h, b["conv1"], b["stride"], 1), b["bn1"]))
        y = bn(conv(y, b["conv2"], 1, 1), b["bn2"])
        h = layers.ReLU()(layers.Add()([y, conv(h, b["shortcut"], b["stride"], 0) if b["shortcut"] else h]))
    if hi > R.HEAD:
        h = layers.Dense(R.NUM_CLASSES, name="fc")(layers.GlobalAveragePooling2D()(h))
    return keras.Model(X, h, name=model)


def keras_slots(m, stage=None):
    """(parameters, state): Keras's own order, where it is the common one (LeNet)."""
    return list(m.trainable_weights), list(m.non_trainable_weights)


# common name suffix -> Keras attribute of the layer named by the rest of the name
_ATTRS = {"weight": "kernel", "bias": "bias", "gamma": "gamma", "beta": "beta",
          "running_mean": "moving_mean", "running_var": "moving_variance"}


def named_slots(m, stage=None):
    """(parameters, state) in the order of PARAM_NAMES and STATE_NAMES (of a pipeline
    stage's: stage.params, stage.state), found by layer name (a functional model's
    weights come in graph order, with the moving statistics among the parameters); m is
    named after its model (keras_resnet18)."""
    R = models.get(m.name)

    def find(names):
        return [getattr(m.get_layer(layer_name(n)), _ATTRS[n.rsplit(".", 1)[1]]) for n in names]
    if stage is None:
        return find(R.PARAM_NAMES), find(R.STATE_NAMES)
    return find([R.PARAM_NAMES[i] for i in stage.params]), find([R.STATE_NAMES[j] for j in stage.state])


class ClassToken(layers.Layer):
    """The ViT's learned class token, put before the patches' tokens."""

    def build(self, shape):
        self.token = self.add_weight(shape=(shape[-1],), initializer="zeros", name="token")

    def call(self, x):
        token = keras.ops.broadcast_to(keras.ops.reshape(self.token, (1, 1, -1)),
                                       (keras.ops.shape(x)[0], 1, x.shape[-1]))
        return keras.ops.concatenate([token, x], axis=1)


class Positions(layers.Layer):
    """The ViT's learned position embeddings, added to every token."""

    def build(self, shape):
        self.positions = self.add_weight(shape=tuple(shape[1:]), initializer="zeros",
                                         name="positions")

    def call(self, x):
        return x + self.positions


def keras_vit(name, sync_bn=False, units=None, keras_defaults=()):
    """d2l's ViT (common/models/vit.py) in Keras's own layers: Conv2D for the patches,
    LayerNormalization at the model's epsilon (Keras's default is 1e-3), MultiHeadAttention
    without biases, Dense with the exact GELU (keras.activations.gelu's default). Each
    layer named after its parameters, as ResNet-18's (vit_slots finds them); with units
    (lo, hi), only those units (a pipeline stage, model mode). keras_defaults names the
    choices left to Keras instead (benchmarks.vit_defaults trains each): "epsilon"
    (LayerNormalization's), "bias" (MultiHeadAttention's use_bias), "gelu" (keras.ops.gelu,
    whose default is the tanh approximation)."""
    from common.models import vit
    s, m = vit.shape(name), models.get(name)
    ln = {} if "epsilon" in keras_defaults else {"epsilon": s.eps}
    attn = {} if "bias" in keras_defaults else {"use_bias": False}
    gelu = keras.ops.gelu if "gelu" in keras_defaults else "gelu"
    lo, hi = units or (0, s.units)
    if lo == 0:
        image = m.IMAGE_SHAPE
        X = keras.Input((image[1], image[2], image[0]))
        x = layers.Conv2D(s.width, s.patch, strides=s.patch, name="patch")(X)
        x = Positions(name="pos")(ClassToken(name="cls")(layers.Reshape((-1, s.width))(x)))
    else:
        X = x = keras.Input(m.UNITS[lo - 1][3])
    for i in range(max(lo, 1), min(hi, s.blocks + 1)):
        a = layers.LayerNormalization(**ln, name=f"block{i}_ln1")(x)
        a = layers.MultiHeadAttention(s.heads, s.head_width, **attn,
                                      name=f"block{i}_attn")(a, a)
        x = layers.Add()([x, a])
        h = layers.LayerNormalization(**ln, name=f"block{i}_ln2")(x)
        h = layers.Dense(s.mlp, activation=gelu, name=f"block{i}_fc1")(h)
        x = layers.Add()([x, layers.Dense(s.width, name=f"block{i}_fc2")(h)])
    if s.has_head((lo, hi)):
        c = layers.LayerNormalization(**ln, name="head_ln")(x[:, 0])
        x = layers.Dense(m.NUM_CLASSES, name="head")(c)
    return keras.Model(X, x, name=name)


def vit_slots(m, stage=None):
    """(parameters, state) in the common order: each ViT parameter's Keras variable (of a
    pipeline stage's units: stage.params)."""
    from common.models import vit
    s = vit.shape(m.name)
    lo, hi = stage.units if stage is not None else (0, s.units)
    out = []
    if lo == 0:
        out += [m.get_layer("patch").kernel, m.get_layer("patch").bias, m.get_layer("cls").token,
                m.get_layer("pos").positions]
    for i in range(max(lo, 1), min(hi, s.blocks + 1)):
        attn = m.get_layer(f"block{i}_attn")
        out += [m.get_layer(f"block{i}_ln1").gamma, m.get_layer(f"block{i}_ln1").beta,
                attn.query_dense.kernel, attn.key_dense.kernel, attn.value_dense.kernel,
                attn.output_dense.kernel,
                m.get_layer(f"block{i}_ln2").gamma, m.get_layer(f"block{i}_ln2").beta,
                m.get_layer(f"block{i}_fc1").kernel, m.get_layer(f"block{i}_fc1").bias,
                m.get_layer(f"block{i}_fc2").kernel, m.get_layer(f"block{i}_fc2").bias]
    if s.has_head((lo, hi)):
        out += [m.get_layer("head_ln").gamma, m.get_layer("head_ln").beta,
                m.get_layer("head").kernel, m.get_layer("head").bias]
    return out, []


def vit_layout(name):
    """(common -> Keras, Keras -> common) of the ViT's parameters: channels-last (the
    model's CHANNELS_LAST), and MultiHeadAttention's kernels by head, query/key/value
    (width, heads, head width), output (heads, head width, width)."""
    from common.models import vit
    s = vit.shape(name)
    to_last, to_first = models.get(name).CHANNELS_LAST
    by_head = {}
    for at in s.blocks_in((1, s.blocks + 1)):       # a block's Wq, Wk, Wv, then Wo
        by_head.update({at + j: (s.width, s.heads, s.head_width) for j in (2, 3, 4)})
        by_head[at + 5] = (s.heads, s.head_width, s.width)

    def to_keras(params):
        return [p.reshape(by_head[i]) if i in by_head else p for i, p in enumerate(to_last(params))]

    def to_common(params):
        return to_first([np.asarray(p).reshape(s.width, s.width) if i in by_head else np.asarray(p)
                         for i, p in enumerate(params)])
    return to_keras, to_common


def channels_last(name):
    return models.get(name).CHANNELS_LAST


# model family (common.models.family) -> (build(model, sync_bn, units), its (parameters,
# state) in the common order, the layout's conversions (common -> Keras, Keras -> common))
KERAS_MODELS = {"lenet": (keras_lenet, keras_slots, channels_last),
                "resnet18": (keras_resnet18, named_slots, channels_last),
                "vit": (keras_vit, vit_slots, vit_layout)}


def nhwc(X):
    return np.asarray(X, np.float32).transpose(0, 2, 3, 1)


class KerasModelOps(ModelOps):
    """A model's layout in Keras (channels-last, on every backend). Keras 3's BatchNorm
    updates its moving variance with the biased batch variance (keras.ops.moments) on
    every backend. Its functional form (apply) is scratch mode's, which Keras lacks."""
    unbiased_running_var = False

    def __init__(self, model):
        self.model = model
        self.to_framework, self.from_framework = KERAS_MODELS[models.family(model)][2](model)

    def sized(self, model):
        return KerasModelOps(model)

    def apply(self, params, state, X, training):
        raise NotApplicable(registry.gap(FRAMEWORK, "scratch"))


def _loss_sum(y, logits):
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")(y, logits)


class Models:
    models = {name: KerasModelOps(name) for name in KERAS_MODELS}

    def keras_model(self, model, params, state=(), sync_bn=False, stage=None):
        """The Keras model `model` with the common weights `params` and `state`, and its
        (parameter, state) variables in the common order; with a pipeline stage
        (common/core/pipeline.py), the sub-model of its units and its variables."""
        if models.family(model) not in KERAS_MODELS:
            self.model_ops(model)        # an unknown model or a known gap: a clear error
        build, slots, _ = KERAS_MODELS[models.family(model)]
        m = build(model, sync_bn, units=None if stage is None else stage.units)
        variables = slots(m, stage)
        self.set_weights(model, variables, params, state, stage)
        return m, variables

    def set_weights(self, model, variables, params, state, stage=None):
        params, state = self.model_ops(model).to_framework(params), list(state)
        if stage is not None:
            params, state = [params[i] for i in stage.params], [state[j] for j in stage.state]
        for v, p in zip(variables[0], params):
            v.assign(p)
        for v, s in zip(variables[1], state):
            v.assign(s)

    def forward_backward(self, model, params, X, y, state=None):
        m, (param_vars, state_vars) = self.keras_model(
            model, params, models.get(model).init_state() if state is None else state)
        logits, loss, grads = current.grads_of_loss_sum(m, param_vars, state_vars, nhwc(X),
                                                        np.asarray(y), _loss_sum)
        numpy = keras.ops.convert_to_numpy
        return (numpy(logits), float(numpy(loss)),
                self.model_ops(model).from_framework([numpy(g) for g in grads]),
                [numpy(v.value) for v in state_vars])
