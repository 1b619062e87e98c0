"""One framework's ViT defaults in a process of its own:
`python -m benchmarks.workers.vit_defaults CONFIG_JSON OUT_PATH`
(CONFIG_JSON: framework, steps, batch, lr).

benchmarks.vit_defaults starts one per framework, with the framework's interpreter and
the thread count in the environment (read at import). It measures, and writes to
OUT_PATH as JSON:

- what each default computes, on small inputs: which GELU a call without `approximate`
  gives (its largest distance from erf's GELU and from the tanh approximation's), the
  epsilon a LayerNorm built without one adds (read back from its output), the biases an
  attention layer built without a bias argument has (and their initial values), and
  which attention kernel runs on this CPU;
- the ViT's mean loss at each step in the framework's native mode (its own layers, the
  suite's trainer), float32, from the suite's initial weights and batches: with the
  oracle's choices (the suite's model as it is), and with each default that differs
  swapped into it: the framework's own call without the argument that sets it."""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import re
import sys
from dataclasses import dataclass, field
from unittest import mock

import numpy as np
from scipy.special import erf

from common.facts import data, registry
from common.models import vit
from common.reports.vit_defaults import CHOICE
from common.results.record import write_atomic

# the attention probes' batch: the ViT's other commands'
BATCH = 64
# the GELU probe's inputs, float32: the two GELUs are furthest apart near |x| = 2.7
GRID = np.linspace(-6, 6, 1201).astype(np.float32)
# the LayerNorm probe: a row of +A and -A (mean 0, variance A^2), whose first output,
# A / sqrt(A^2 + eps), gives eps back; A small, so that eps moves it
A = 0.01


@dataclass
class Default:
    """One default of the framework: what it sets ("GELU", "LayerNorm": its epsilon,
    "attention": its biases), the call as a user writes it, what the probe measured, and how
    to swap it into the suite's ViT for a run (None: none needed, the default is the
    oracle's choice and the suite's run is its run)."""
    row: str
    call: str
    measured: dict
    swap: contextlib.AbstractContextManager | None = field(default=None, repr=False)


def gelu_of(fn) -> dict:
    """The largest distance of fn's GELU (float32 in, NumPy out) from erf's and from the
    tanh approximation's, both in float64."""
    x = GRID.astype(np.float64)
    got = np.asarray(fn(GRID), np.float64)
    exact = 0.5 * x * (1 + erf(x / math.sqrt(2)))
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return {"from_erf": float(np.abs(got - exact).max()), "from_tanh": float(np.abs(got - tanh).max())}


def epsilon_of(fn) -> dict:
    """The epsilon a LayerNorm fn (float32 (1, 8) in, NumPy out) adds to the variance."""
    out = float(np.asarray(fn(np.tile(np.float32([A, -A]), 4)[None])).reshape(-1)[0])
    return {"epsilon": A * A / (out * out) - A * A}


def biases_of(named) -> dict:
    """The bias tensors among (name, NumPy array) pairs, and their largest initial value."""
    found = [np.asarray(v) for n, v in named if "bias" in n]
    return {"biases": len(found), "largest": max((float(np.abs(v).max()) for v in found), default=0.0)}


def attention_shapes():
    """Queries of the default ViT's attention: (batch, tokens, heads, head width)."""
    s = vit.shape("vit")
    return BATCH, s.tokens, s.heads, s.head_width


def aten_attention(run) -> list[str]:
    """The ATen ops with "attention" in their name that torch's profiler sees in run()."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as p:
        run()
    return sorted({e.key for e in p.key_averages()
                   if e.key.startswith("aten::") and "attention" in e.key})


def hlo_custom_calls(fn, *args) -> list[str]:
    """The custom calls (fused kernels outside XLA's own ops) in fn's compiled program."""
    import jax
    text = jax.jit(fn).lower(*args).compile().as_text()
    return sorted(set(re.findall(r'custom_call_target="([^"]+)"', text)))


@contextlib.contextmanager
def debug_log(name: str):
    """The messages the logger `name` logs at DEBUG level within the block."""
    lines, log, handler = [], logging.getLogger(name), logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160]}"


# --- each framework's defaults, and what its attention runs on this CPU ---

def pytorch_defaults() -> tuple[list[Default], dict]:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    from frameworks.pytorch import models as own
    t = torch.from_numpy
    s = vit.shape("vit")

    def biased(model, params, state):
        """The ViT's own layers with nn.MultiheadAttention as its defaults build it."""
        module, size = own.ViTModule(params, state, model), vit.shape(model)
        for b in module.blocks:
            b.attention = nn.MultiheadAttention(size.width, size.heads, batch_first=True)
        module.load(params, state)                # the weights again, into the new layers
        return module
    with torch.no_grad():
        defaults = [
            Default("GELU", "torch.nn.functional.gelu(x)", gelu_of(lambda x: F.gelu(t(x)))),
            Default("GELU", "torch.nn.GELU()", gelu_of(lambda x: nn.GELU()(t(x)))),
            Default("LayerNorm", "torch.nn.LayerNorm(width)",
                    epsilon_of(lambda x: nn.LayerNorm(x.shape[-1])(t(x)))),
            Default("attention", "torch.nn.MultiheadAttention(width, heads)",
                    biases_of((n, p.detach()) for n, p in nn.MultiheadAttention(8, 2).named_parameters()),
                    mock.patch.dict(own.LAYERED, vit=biased))]
    q = torch.randn(*attention_shapes()).transpose(1, 2).requires_grad_()
    x = torch.randn(BATCH, s.tokens, s.width)
    mha = nn.MultiheadAttention(s.width, s.heads, batch_first=True)
    with torch.no_grad():
        inference = aten_attention(lambda: mha.eval()(x, x, x, need_weights=False))
    return defaults, {
        "F.scaled_dot_product_attention, training":
            aten_attention(lambda: F.scaled_dot_product_attention(q, q, q).sum().backward()),
        "nn.MultiheadAttention, training": aten_attention(
            lambda: mha.train()(x, x, x, need_weights=False)[0].sum().backward()),
        "nn.MultiheadAttention, inference (eval, no_grad)": inference}


def paddle_defaults() -> tuple[list[Default], dict]:
    import paddle
    import paddle.nn as nn
    import paddle.nn.functional as F
    from paddle.nn.functional import sdpa

    from frameworks.paddle import native
    from frameworks.paddle.models import ViTLayer
    t = paddle.to_tensor

    def biased(model, params, state):
        """The ViT's own layers with nn.MultiHeadAttention as its defaults build it."""
        layer, size = ViTLayer(params, state, model), vit.shape(model)
        for b in layer.blocks:
            b.attention = nn.MultiHeadAttention(size.width, size.heads)
        layer.load(params, state)
        return layer
    defaults = [
        Default("GELU", "paddle.nn.functional.gelu(x)", gelu_of(lambda x: F.gelu(t(x)).numpy())),
        Default("GELU", "paddle.nn.GELU()", gelu_of(lambda x: nn.GELU()(t(x)).numpy())),
        Default("LayerNorm", "paddle.nn.LayerNorm(width)",
                epsilon_of(lambda x: nn.LayerNorm(x.shape[-1])(t(x)).numpy())),
        Default("attention", "paddle.nn.MultiHeadAttention(width, heads)",
                biases_of((n, p.numpy()) for n, p in nn.MultiHeadAttention(8, 2).named_parameters()),
                mock.patch.dict(native.LAYERED, vit=biased))]
    q = t(np.random.default_rng(0).standard_normal(attention_shapes()).astype(np.float32),
          stop_gradient=False)
    with debug_log(sdpa.__name__) as picked:      # it logs the backend it picks
        F.scaled_dot_product_attention(q, q, q).sum().backward()
    return defaults, {"paddle.nn.functional.scaled_dot_product_attention, training": picked}


def tensorflow_defaults() -> tuple[list[Default], dict]:
    import tensorflow as tf
    return [Default("GELU", "tf.nn.gelu(x)", gelu_of(lambda x: tf.nn.gelu(x).numpy()))], {
        "ops named *attention* in tf.nn and tf.raw_ops":
            [n for n in dir(tf.nn) + dir(tf.raw_ops) if "attention" in n.lower()]}


def mxnet_defaults() -> tuple[list[Default], dict]:
    from mxnet import nd
    from mxnet.gluon import nn

    def gluon(layer):
        layer.initialize()
        return lambda x: layer(nd.array(x)).asnumpy()
    x = nd.random.normal(shape=(attention_shapes()[1], BATCH, 3 * vit.shape("vit").width))
    try:            # its fused self-attention products, (tokens, batch, 3 x width) interleaved
        nd.contrib.interleaved_matmul_selfatt_qk(x, heads=attention_shapes()[2]).wait_to_read()
        fused = ["runs"]
    except Exception as e:  # noqa: BLE001 - what this CPU does with it is the finding
        fused = [first_line(e)]
    return [Default("GELU", "mxnet.gluon.nn.GELU()", gelu_of(gluon(nn.GELU()))),
            Default("GELU", 'mxnet.nd.LeakyReLU(x, act_type="gelu")',
                    gelu_of(lambda x: nd.LeakyReLU(nd.array(x), act_type="gelu").asnumpy())),
            Default("LayerNorm", "mxnet.gluon.nn.LayerNorm()", epsilon_of(gluon(nn.LayerNorm())))], {
        "nd.contrib.interleaved_matmul_selfatt_qk": fused}


def jax_defaults() -> tuple[list[Default], dict]:
    import jax
    import jax.numpy as jnp

    from frameworks.jax import models as own

    class DefaultGELU(own.ViT):
        def gelu(self, x):
            return jax.nn.gelu(x)                  # its default: approximate=True
    q = jnp.ones(attention_shapes(), jnp.float32)
    try:
        cudnn = hlo_custom_calls(functools.partial(jax.nn.dot_product_attention,
                                                   implementation="cudnn"), q, q, q)
    except Exception as e:  # noqa: BLE001 - what this CPU does with it is the finding
        cudnn = [first_line(e)]
    return [Default("GELU", "jax.nn.gelu(x)", gelu_of(jax.nn.gelu),
                    mock.patch.dict(own.Models.models, vit=DefaultGELU("vit")))], {
        "jax.nn.dot_product_attention (implementation=None), custom calls":
            hlo_custom_calls(jax.nn.dot_product_attention, q, q, q),
        'implementation="cudnn"': cudnn}


def keras_defaults() -> tuple[list[Default], dict]:
    import keras

    from frameworks.keras import models as own
    numpy = keras.ops.convert_to_numpy

    def left_to_keras(choice):
        """The suite's ViT in Keras's layers, with one choice left to Keras's default."""
        build = functools.partial(own.keras_vit, keras_defaults=(choice,))
        return mock.patch.dict(own.KERAS_MODELS, vit=(build, own.vit_slots, own.vit_layout))
    mha = keras.layers.MultiHeadAttention(2, 4)
    mha.build((1, 3, 8), (1, 3, 8))
    defaults = [
        Default("GELU", "keras.ops.gelu(x)", gelu_of(lambda x: numpy(keras.ops.gelu(x))),
                left_to_keras("gelu")),
        Default("GELU", 'keras.activations.gelu(x), Dense(activation="gelu")',
                gelu_of(lambda x: numpy(keras.activations.gelu(x)))),
        Default("LayerNorm", "keras.layers.LayerNormalization()",
                epsilon_of(lambda x: numpy(keras.layers.LayerNormalization()(x))),
                left_to_keras("epsilon")),
        Default("attention", "keras.layers.MultiHeadAttention(heads, key_dim)",
                biases_of((v.path, numpy(v)) for v in mha.weights), left_to_keras("bias"))]
    q = np.random.default_rng(0).standard_normal(attention_shapes()).astype(np.float32)
    try:
        keras.ops.dot_product_attention(q, q, q, flash_attention=True)
        flash = ["runs"]
    except Exception as e:  # noqa: BLE001 - what this CPU does with it is the finding
        flash = [first_line(e)]
    found = {"keras.ops.dot_product_attention(flash_attention=True)": flash}
    default = "keras.ops.dot_product_attention (flash_attention=None)"
    if keras.config.backend() == "torch":
        found[default + ", ATen ops"] = aten_attention(lambda: keras.ops.dot_product_attention(q, q, q))
    elif keras.config.backend() == "jax":
        found[default + ", custom calls"] = hlo_custom_calls(keras.ops.dot_product_attention, q, q, q)
    return defaults, found


FRAMEWORKS = {"pytorch": pytorch_defaults, "paddle": paddle_defaults,
              "tensorflow": tensorflow_defaults, "mxnet": mxnet_defaults, "jax": jax_defaults,
              "keras-tensorflow": keras_defaults, "keras-jax": keras_defaults,
              "keras-torch": keras_defaults}


def losses(cfg: dict, swap=None) -> list[float]:
    """The mean loss of each SGD step in the framework's native mode, its ViT as `swap`
    leaves it, from the suite's initial weights and batches."""
    framework, ds = cfg["framework"], data.synthetic(0)
    order = data.batch_order(len(ds.y_train), cfg["batch"], 0, 0)[:cfg["steps"]]
    with swap or contextlib.nullcontext():
        backend = type(registry.get(framework))()     # fresh: nothing compiled for another ViT
        trainer = backend.native_trainer("vit", vit.init_params(0, "glorot"), ["cpu:0"], cfg["lr"],
                                         registry.default_execution(framework, "native"))
        return [float(v) for v in trainer.losses(trainer.train_epoch(
            ds.X_train, ds.y_train, order, lambda: None))]


def measure(cfg: dict) -> dict:
    framework = cfg["framework"]
    backend = registry.get(framework)       # its facts' environment, then the import
    # the thread count the command put in the environment (worker_env), read at import too
    backend.setup(cpu_devices=1, threads=int(os.environ.get("OMP_NUM_THREADS", 1)))
    defaults, attention = FRAMEWORKS[framework]()
    runs = {CHOICE: losses(cfg)}
    for d in defaults:
        if d.swap is not None:
            runs[d.call] = losses(cfg, d.swap)
    return {**cfg, "version": backend.version(), "numpy": np.__version__,
            "execution": registry.default_execution(framework, "native"),
            "defaults": [{"row": d.row, "call": d.call, "measured": d.measured,
                          "trained": d.swap is not None} for d in defaults],
            "attention_cpu": attention, "losses": runs}


def main(argv: list[str]) -> int:
    write_atomic(argv[1], measure(json.loads(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
