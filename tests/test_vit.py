"""The Vision Transformer's NumPy oracle (common/models/vit.py): it answers the model
interface at every size, its backward is its forward's gradient (central finite
differences at the tiny size, every parameter tensor, float64), and the plants it
exists for fail it: LayerNorm's backward without its mean term, GELU's derivative the
tanh approximation's, attention weights whose rows do not sum to one (the softmax
backward assumes they do)."""
from __future__ import annotations

import numpy as np
import pytest

from common import models
from common.facts import registry
from common.models import spec, vit


@pytest.mark.parametrize("size", sorted(vit.SIZES))
def test_every_size_answers_the_interface(size):
    m = vit.variant(size)
    assert spec.problems(m, values=size != "d2l") == [], size
    assert m.TOKENS == (m.SIZE["image"] // m.SIZE["patch"]) ** 2 + 1


@pytest.mark.parametrize("size, said", [
    ({"image": 28, "patch": 5, "width": 8, "heads": 2, "blocks": 1, "mlp": 16}, "does not divide into"),
    ({"image": 28, "patch": 7, "width": 10, "heads": 4, "blocks": 1, "mlp": 16}, "do not divide the width"),
], ids=["patch", "heads"])
def test_a_size_that_does_not_fit_is_one_line(size, said):
    with pytest.raises(vit.SizeError, match=said) as e:
        vit.check_size(size)
    assert "\n" not in str(e.value)


def test_gelu_is_the_exact_one():
    assert vit.gelu(np.array(1.0)) == pytest.approx(0.8413447460685429, rel=1e-15)


def _problem(seed=0):
    """The tiny ViT with every parameter moved off its initial value (LayerNorm's scale
    and every bias too), three images and their labels."""
    m = vit.variant("tiny")
    rng = np.random.default_rng(seed)
    params = [p.astype(np.float64) + 0.3 * rng.standard_normal(p.shape)
              for p in m.init_params(seed, "glorot")]
    X = rng.standard_normal((3, *m.IMAGE_SHAPE))
    return m, params, X, rng.integers(0, m.NUM_CLASSES, 3)


def worst_gradient_error(coords: int = 6) -> float:
    """The largest relative error of loss_and_grads' gradient against central
    differences, over `coords` random coordinates of every parameter tensor."""
    m, params, X, y = _problem()
    _, _, grads = m.loss_and_grads(params, X, y)
    rng, worst, h = np.random.default_rng(1), 0.0, 1e-6
    for i, p in enumerate(params):
        for flat in rng.choice(p.size, min(coords, p.size), replace=False):
            idx = np.unravel_index(flat, p.shape)
            plus, minus = [q.copy() for q in params], [q.copy() for q in params]
            plus[i][idx] += h
            minus[i][idx] -= h
            numeric = (m.loss_and_grads(plus, X, y)[0] - m.loss_and_grads(minus, X, y)[0]) / (2 * h)
            worst = max(worst, abs(grads[i][idx] - numeric) / max(1e-2, abs(numeric)))
    return worst


def test_the_backward_is_the_forwards_gradient():
    assert worst_gradient_error() < 1e-6


def test_the_forward_and_the_loss_agree():
    m, params, X, y = _problem()
    loss, logits, _ = m.loss_and_grads(params, X, y)
    np.testing.assert_allclose(logits, m.forward(params, X), rtol=1e-12)
    assert loss == pytest.approx(m.cross_entropy(logits, y).sum(), rel=1e-12)


def _tanh_gelu_grad(x):
    t = np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x * x)


def _layernorm_backward_without_mean(dy, g, cache):
    xhat, inv = cache
    axes = tuple(range(dy.ndim - 1))
    dxhat = dy * g
    return inv * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdims=True)), \
        (dy * xhat).sum(axes), dy.sum(axes)


def _softmax_rows_off_one(s):
    """The attention's weights (batch, heads, tokens, tokens) 1 % off summing to one; the
    loss's softmax (2-D) as it is, so that the plant is the attention's alone."""
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) * (1.01 if s.ndim == 4 else 1.0)


@pytest.mark.parametrize("name, plant", [
    ("_layernorm_backward", _layernorm_backward_without_mean),
    ("_gelu_grad", _tanh_gelu_grad),
    ("_softmax", _softmax_rows_off_one),
], ids=["layernorm-mean", "gelu-tanh", "softmax"])
def test_a_planted_backward_fails_the_check(monkeypatch, name, plant):
    monkeypatch.setattr(vit, name, plant)
    assert worst_gradient_error() > 1e-4, name


def test_the_oracle_trains_it():
    m = vit.variant("tiny")
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((16, *m.IMAGE_SHAPE)), rng.integers(0, 10, 16)
    losses, _ = models.sgd_steps(m, m.init_params(0, "glorot"), [(X, y)] * 15, lr=0.5)
    assert losses[-1] < 0.5 * losses[0]


def test_the_matmul_flops_counted_from_its_layers_are_its_train_flops():
    """Its layers' matrix products (patch embedding, projections, attention's two, MLP,
    head), forward and backward, are TRAIN_FLOPS_PER_IMAGE less the patch embedding's
    input gradient (the image's, which no framework computes)."""
    from common.models import costs
    for size in vit.SIZES:
        m = vit.variant(size)
        first = m.LAYERS[0]
        skipped = 2 * first["cout"] * first["hout"] ** 2 * first["cin"] * first["k"] ** 2
        assert costs.matmul_flops(m, 4) == 4 * (m.TRAIN_FLOPS_PER_IMAGE - skipped), size


@pytest.mark.skipif("pytorch" not in registry.installed(), reason="pytorch is not installed")
@pytest.mark.parametrize("size", ["tiny", "default"])
def test_pytorchs_scratch_vit_is_the_oracle(size):
    """frameworks/pytorch/models.py's ViT, in float64, against the oracle: the logits, the
    loss and every parameter's gradient (F.scaled_dot_product_attention, F.layer_norm,
    F.gelu at the oracle's choices); each unit in turn (model mode's cut) the same."""
    import torch
    import torch.nn.functional as F

    from frameworks.pytorch.models import ViT
    m = vit.variant(size)
    rng = np.random.default_rng(3)
    params = [p.astype(np.float64) + 0.1 * rng.standard_normal(p.shape)
              for p in m.init_params(0, "glorot")]
    X = rng.standard_normal((4, *m.IMAGE_SHAPE))
    y = rng.integers(0, m.NUM_CLASSES, 4)
    loss, logits, grads = m.loss_and_grads(params, X, y)
    ops = ViT(m.NAME)
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    out = ops.apply(tp, [], torch.tensor(X), True)
    total = F.cross_entropy(out, torch.tensor(y), reduction="sum")
    total.backward()
    np.testing.assert_allclose(out.detach().numpy(), logits, rtol=1e-10, atol=1e-12)
    assert float(total.detach()) == pytest.approx(loss, rel=1e-12)
    for name, g, t in zip(m.PARAM_NAMES, grads, tp):
        np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-8, atol=1e-10, err_msg=name)
    h = torch.tensor(X)
    with torch.no_grad():
        for u in range(len(m.UNITS)):
            h = ops.apply_units(tp, [], h, (u, u + 1), False)
    np.testing.assert_allclose(h.numpy(), logits, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif("pytorch" not in registry.installed(), reason="pytorch is not installed")
def test_pytorchs_own_layers_compute_the_oracles_vit():
    """The native ViT (nn.MultiheadAttention with its fused QKV, nn.LayerNorm, nn.GELU),
    loaded from the common weights and read back unchanged, in float64: the oracle's
    logits and every gradient (read in the common layout). Planted: Q and K swapped in
    the fused in_proj_weight."""
    import torch
    import torch.nn.functional as F

    from frameworks.pytorch.models import ViTModule
    m = vit.variant("tiny")
    rng = np.random.default_rng(4)
    params = [p.astype(np.float64) + 0.1 * rng.standard_normal(p.shape)
              for p in m.init_params(0, "glorot")]
    X, y = rng.standard_normal((4, *m.IMAGE_SHAPE)), rng.integers(0, m.NUM_CLASSES, 4)
    loss, logits, grads = m.loss_and_grads(params, X, y)

    module = ViTModule([p.astype(np.float32) for p in params], [], m.NAME).double()
    module.load(params, [])
    out = module(torch.tensor(X))
    F.cross_entropy(out, torch.tensor(y), reduction="sum").backward()
    out = out.detach().numpy()
    for a, b in zip(module.read()[0], params):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(out, logits, rtol=1e-10, atol=1e-12)
    for (t, rows, transposed), g, name in zip(module.slots(), grads, m.PARAM_NAMES):
        got = t.grad.numpy()
        got = got[rows] if rows is not None else got
        np.testing.assert_allclose(got.T if transposed else got, g, rtol=1e-8, atol=1e-10,
                                   err_msg=name)
    swapped = list(params)
    swapped[6], swapped[7] = params[7], params[6]          # block 1's Wq and Wk
    module.load(swapped, [])
    assert not np.allclose(module(torch.tensor(X)).detach().numpy(), logits)
