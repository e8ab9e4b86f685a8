"""LayerNorm's hand-written backward (``_norm_kernel.layer_norm_affine``): the same values as
the autodiff formula, gradients equal to PyTorch's ``nn.LayerNorm`` to float32 rounding, and
the autodiff path kept for forward mode, mixed dtypes and no weight."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import js
import js.nn as nn
import js.nn.functional as F
from js.nn import _norm_kernel


def _autodiff(x, shape, w, b, eps=1e-5):
    """The two-pass formula differentiated by autodiff (the path before the kernel)."""
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps) * w
    return y if b is None else y + b


@pytest.mark.parametrize(
    ("xshape", "shape", "bias"),
    [((4, 6, 8), (8,), True), ((3, 5, 4, 6), (4, 6), True), ((5, 8), (8,), False)],
)
def test_values_and_gradients_match_torch(xshape, shape, bias):
    rng = np.random.default_rng(0)
    x = rng.normal(1.5, 2.0, size=xshape).astype(np.float32)
    g = rng.normal(size=xshape).astype(np.float32)
    layer = nn.LayerNorm(shape, eps=1e-5, bias=bias)
    ref = torch.nn.LayerNorm(shape, eps=1e-5, bias=bias)
    w = rng.normal(size=shape).astype(np.float32)
    b = rng.normal(size=shape).astype(np.float32)
    layer.weight.value = jnp.asarray(w)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(w))
    if bias:
        layer.bias.value = jnp.asarray(b)
        with torch.no_grad():
            ref.bias.copy_(torch.from_numpy(b))

    loss, grads = js.value_and_grad(lambda m, x: jnp.sum(m(x) * g))(layer, jnp.asarray(x))
    xs = jax.jit(jax.grad(lambda x: jnp.sum(layer(x) * g)))(jnp.asarray(x))
    tx = torch.from_numpy(x).requires_grad_()
    out = ref(tx)
    (out * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(layer(jnp.asarray(x)), out.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xs, tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads["weight"], ref.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
    if bias:
        np.testing.assert_allclose(grads["bias"], ref.bias.grad.numpy(), rtol=1e-4, atol=1e-4)
    # and the same values as the autodiff formula, bit for bit
    want = _autodiff(jnp.asarray(x), shape, jnp.asarray(w), jnp.asarray(b) if bias else None)
    np.testing.assert_array_equal(
        F.layer_norm(jnp.asarray(x), shape, jnp.asarray(w), jnp.asarray(b) if bias else None), want
    )


def test_gradients_match_autodiff():
    rng = np.random.default_rng(1)
    x, w, b, g = (
        jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((6, 7, 16), (16,), (16,), (6, 7, 16))
    )
    got = jax.jit(jax.grad(lambda *a: jnp.sum(F.layer_norm(a[0], 16, a[1], a[2]) * g), (0, 1, 2)))(
        x, w, b
    )
    want = jax.jit(jax.grad(lambda *a: jnp.sum(_autodiff(a[0], (16,), a[1], a[2]) * g), (0, 1, 2)))(
        x, w, b
    )
    for a, e in zip(got, want, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=2e-6)


def test_kernel_is_used_and_other_cases_take_autodiff(monkeypatch):
    calls = []
    original = _norm_kernel.layer_norm_affine
    monkeypatch.setattr(F, "layer_norm_affine", lambda *a: calls.append(1) or original(*a))
    x, w = jnp.ones((2, 4)) * jnp.arange(4.0), jnp.full(4, 2.0)
    F.layer_norm(x, 4, w, None)
    assert calls == [1]
    F.layer_norm(x, 4)  # no weight
    F.layer_norm(x.astype(jnp.bfloat16), 4, w)  # mixed dtypes
    tangent = jax.jit(lambda x: jax.jvp(lambda x: F.layer_norm(x, 4, w), (x,), (x,))[1])(x)
    want = jax.jvp(lambda x: _autodiff(x, (4,), w, None), (x,), (x,))[1]
    assert calls == [1]
    np.testing.assert_allclose(tangent, want, atol=1e-6)
    hessian = jax.jit(jax.hessian(lambda w: jnp.sum(F.layer_norm(x, 4, w) ** 3)))(w)
    assert hessian.shape == (4, 4) and bool(jnp.all(jnp.isfinite(hessian)))
