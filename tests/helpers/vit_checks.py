"""The ViT of one framework against the NumPy oracle (common/models/vit.py), in float64,
run in a process of its own as every framework's checks are:

    python -m tests.helpers.vit_checks FRAMEWORK OUT_JSON

Writes, for the scratch ViT (its models.py ModelOps) at the tiny and default sizes, and
for its own-layers module where it has one (native mode), the largest relative errors
of the logits, the loss, every gradient and the unit-by-unit forward (model mode's cut);
tests/test_vit.py judges them against its tolerances."""
from __future__ import annotations

import json
import sys

import numpy as np

from common.facts import registry
from common.models import vit


def _problem(size: str, seed: int = 3):
    m = vit.variant(size)
    rng = np.random.default_rng(seed)
    params = [p.astype(np.float64) + 0.1 * rng.standard_normal(p.shape)
              for p in m.init_params(0, "glorot")]
    X, y = rng.standard_normal((4, *m.IMAGE_SHAPE)), rng.integers(0, m.NUM_CLASSES, 4)
    return m, params, X, y, m.loss_and_grads(params, X, y)


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def _errors(m, out, total, grads_got, units_out, oracle) -> dict:
    loss, logits, grads = oracle
    return {"logits": _rel(out, logits), "loss": _rel(total, loss),
            "grads": {n: _rel(g, r) for n, g, r in zip(m.PARAM_NAMES, grads_got, grads)},
            "units": _rel(units_out, logits)}


SIZES = ("tiny", "default")


def _by_units(apply_units, m, X):
    """The logits through every unit in turn, as model mode cuts the model."""
    for u in range(len(m.UNITS)):
        X = apply_units(X, (u, u + 1))
    return X


def _scratch(ViT, run) -> dict:
    """Each size's errors of a framework's scratch ViT: run(ops, m, params, X, y) gives
    its logits, summed loss, gradients (common layout) and logits unit by unit, NumPy."""
    out = {}
    for size in SIZES:
        m, params, X, y, oracle = _problem(size)
        out[f"scratch[{size}]"] = _errors(m, *run(ViT(m.NAME), m, params, X, y), oracle)
    return out


def torch_checks() -> dict:
    import torch
    import torch.nn.functional as F

    from frameworks.pytorch.models import ViT, ViTModule

    def run(ops, m, params, X, y):
        tp = [torch.tensor(p, requires_grad=True) for p in params]
        logits = ops.apply(tp, [], torch.tensor(X), True)
        total = F.cross_entropy(logits, torch.tensor(y), reduction="sum")
        total.backward()
        with torch.no_grad():
            h = _by_units(lambda h, u: ops.apply_units(tp, [], h, u, False), m, torch.tensor(X))
        return (logits.detach().numpy(), float(total.detach()), [t.grad.numpy() for t in tp],
                h.numpy())
    out = _scratch(ViT, run)
    m, params, X, y, oracle = _problem("tiny", seed=4)
    module = ViTModule([p.astype(np.float32) for p in params], [], m.NAME).double()
    module.load(params, [])
    logits = module(torch.tensor(X))
    total = F.cross_entropy(logits, torch.tensor(y), reduction="sum")
    total.backward()
    got = []
    for t, rows, transposed in module.slots():
        g = t.grad.numpy()
        g = g[rows] if rows is not None else g
        got.append(g.T if transposed else g)
    out["native[tiny]"] = {**_errors(m, logits.detach().numpy(), float(total.detach()), got,
                                     logits.detach().numpy(), oracle),
                           "read_back": max(_rel(a, b) for a, b in zip(module.read()[0], params))}
    swapped = list(params)
    swapped[6], swapped[7] = params[7], params[6]          # block 1's Wq and Wk
    module.load(swapped, [])
    out["native[tiny]"]["qk_swapped"] = _rel(module(torch.tensor(X)).detach().numpy(), oracle[1])
    return out


def paddle_checks() -> dict:
    import paddle
    import paddle.nn.functional as F

    from frameworks.paddle.models import ViT, ViTLayer

    def run(ops, m, params, X, y):
        tp = [paddle.to_tensor(p, stop_gradient=False) for p in params]
        logits = ops.apply(tp, [], paddle.to_tensor(X), True)
        total = F.cross_entropy(logits, paddle.to_tensor(y), reduction="sum")
        total.backward()
        with paddle.no_grad():
            h = _by_units(lambda h, u: ops.apply_units(tp, [], h, u, False), m, paddle.to_tensor(X))
        return logits.numpy(), float(total), [t.grad.numpy() for t in tp], h.numpy()
    out = _scratch(ViT, run)
    m, params, X, y, oracle = _problem("tiny", seed=4)
    paddle.set_default_dtype("float64")            # the layer's parameters, as the oracle's
    layer = ViTLayer(params, [], m.NAME)
    logits = layer(paddle.to_tensor(X))
    total = F.cross_entropy(logits, paddle.to_tensor(y), reduction="sum")
    total.backward()
    got = [t.grad.numpy() for t in layer.slots()]
    out["native[tiny]"] = {**_errors(m, logits.numpy(), float(total), got, logits.numpy(), oracle),
                           "read_back": max(_rel(a, b) for a, b in zip(layer.read()[0], params))}
    swapped = list(params)
    swapped[6], swapped[7] = params[7], params[6]          # block 1's Wq and Wk
    layer.load(swapped, [])
    out["native[tiny]"]["qk_swapped"] = _rel(layer(paddle.to_tensor(X)).numpy(), oracle[1])
    return out


def tensorflow_checks() -> dict:
    import tensorflow as tf

    from frameworks.tensorflow.models import ViT, loss_sum

    def run(ops, m, params, X, y):
        tp = [tf.Variable(p) for p in ops.to_framework(params)]
        with tf.GradientTape() as tape:
            logits = ops.apply(tp, [], tf.constant(X), True)
            total = loss_sum(logits, tf.constant(y))
        grads = ops.from_framework([g.numpy() for g in tape.gradient(total, tp)])
        h = _by_units(lambda h, u: ops.apply_units(tp, [], h, u, False), m, tf.constant(X))
        return logits.numpy(), float(total), grads, h.numpy()
    return _scratch(ViT, run)


def jax_checks() -> dict:
    import jax
    jax.config.update("jax_enable_x64", True)         # this process's checks are float64
    import jax.numpy as jnp

    from frameworks.jax.models import ViT, loss_sum

    def run(ops, m, params, X, y):
        jp = [jnp.asarray(p) for p in params]

        def loss(ps):
            logits = ops.apply(ps, [], jnp.asarray(X), True)
            return loss_sum(logits, jnp.asarray(y)), logits
        # compiled: op by op, every primitive of every shape dispatches on its own (38 s
        # for both sizes here, against a few in jax.jit)
        (total, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(jp)
        unit = jax.jit(ops.apply_units, static_argnums=(3, 4))
        h = _by_units(lambda h, u: unit(jp, [], h, u, False), m, jnp.asarray(X))
        return np.asarray(logits), float(total), [np.asarray(g) for g in grads], np.asarray(h)
    return _scratch(ViT, run)


def mxnet_checks() -> dict:
    from mxnet import autograd, nd

    from frameworks.mxnet.models import GLUON_MODELS, ViT, loss

    def run(ops, m, params, X, y):
        mp = [nd.array(p, dtype="float64") for p in params]
        for p in mp:
            p.attach_grad()
        with autograd.record():
            logits = ops.apply(mp, [], nd.array(X, dtype="float64"), True)
            total = loss(logits, nd.array(y, dtype="float64")).sum()
        total.backward()
        h = _by_units(lambda h, u: ops.apply_units(mp, [], h, u, False), m,
                      nd.array(X, dtype="float64"))
        return logits.asnumpy(), float(total.asscalar()), [p.grad.asnumpy() for p in mp], h.asnumpy()
    out = _scratch(ViT, run)
    m, params, X, y, oracle = _problem("tiny", seed=4)
    build, slots, layout = GLUON_MODELS["vit"]
    to_gluon, to_common = layout(m.NAME)
    net = build(m.NAME)
    net.initialize()
    net.cast("float64")
    gp = slots(net, m.NAME)[0]

    def load(values):
        for p, v in zip(gp, to_gluon(values)):
            p.set_data(nd.array(v, dtype="float64"))
    load(params)
    X = nd.array(X, dtype="float64")
    with autograd.record():
        logits = net(X)
        total = loss(logits, nd.array(y, dtype="float64")).sum()
    total.backward()
    got = to_common([p.grad().asnumpy() for p in gp])
    out["native[tiny]"] = {**_errors(m, logits.asnumpy(), float(total.asscalar()), got,
                                     logits.asnumpy(), oracle),
                           "read_back": max(_rel(a, b) for a, b in zip(
                               to_common([p.data().asnumpy() for p in gp]), params))}
    net.hybridize(static_alloc=True, static_shape=True)      # execution "compiled"
    out["native[tiny]"]["compiled"] = _rel(net(X).asnumpy(), oracle[1])
    swapped = list(params)
    swapped[6], swapped[7] = params[7], params[6]          # block 1's Wq and Wk
    load(swapped)
    out["native[tiny]"]["qk_swapped"] = _rel(net(X).asnumpy(), oracle[1])
    return out


def keras_checks() -> dict:
    """Keras's own layers (native mode: Keras has no scratch), float64, on the backend its
    facts' environment names."""
    import keras
    if keras.config.backend() == "jax":       # JAX's arrays are float32 without x64
        import jax
        jax.config.update("jax_enable_x64", True)
    keras.config.set_floatx("float64")
    from frameworks.keras.backends import current
    from frameworks.keras.models import _loss_sum, keras_vit, vit_layout, vit_slots
    out = {}
    for size in SIZES:
        m, params, X, y, oracle = _problem(size)
        model = keras_vit(m.NAME)
        variables, _ = vit_slots(model)
        to_keras, to_common = vit_layout(m.NAME)
        for v, p in zip(variables, to_keras(params)):
            v.assign(p)
        logits, total, grads = current.grads_of_loss_sum(
            model, variables, [], X.transpose(0, 2, 3, 1), y, _loss_sum)
        grads = to_common([keras.ops.convert_to_numpy(g) for g in grads])
        logits = keras.ops.convert_to_numpy(logits)
        out[f"native[{size}]"] = {**_errors(m, logits, float(keras.ops.convert_to_numpy(total)),
                                            grads, logits, oracle),
                                  "read_back": max(_rel(a, b) for a, b in zip(
                                      to_common([keras.ops.convert_to_numpy(v) for v in variables]),
                                      params))}
    return out


CHECKS = {"pytorch": torch_checks, "mxnet": mxnet_checks, "paddle": paddle_checks, "tensorflow": tensorflow_checks,
          "jax": jax_checks,
          "keras-tensorflow": keras_checks, "keras-jax": keras_checks, "keras-torch": keras_checks}

if __name__ == "__main__":
    framework, path = sys.argv[1:]
    registry.get(framework)          # its facts' environment, as every framework process
    with open(path, "w") as f:
        json.dump(CHECKS[framework](), f)
