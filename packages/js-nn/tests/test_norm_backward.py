"""BatchNorm's hand-written backward in training (``_norm_kernel.batch_norm_train``): the same
values and, to float32 rounding, the same gradients as autodiff of the two-pass formula; the
autodiff path still serves forward mode (jvp, hessian) and non-affine calls."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.nn as nn
import js.nn.functional as F
from js.nn import _norm_kernel


def _arrays(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(2.0, 3.0, size=shape), jnp.float32)  # mean far from 0
    c = shape[1]
    w, b = (jnp.asarray(rng.normal(size=c), jnp.float32) for _ in range(2))
    return x, w, b, jnp.asarray(rng.normal(size=shape), jnp.float32)


def _autodiff(x, w, b):
    """The two-pass formula, differentiated by autodiff (the path before the kernel)."""
    y, _, _ = F.batch_norm(x, None, None, None, None, training=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return y * w.reshape(shape) + b.reshape(shape)


# [N, C, L] reduces over N and one position axis, as [N, C, H, W] over two: the full tier's.
@pytest.mark.parametrize(
    "shape", [(8, 3), pytest.param((4, 3, 5), marks=pytest.mark.slow), (4, 3, 5, 5)]
)
def test_values_and_gradients_match_autodiff(shape):
    x, w, b, g = _arrays(shape)
    running = (jnp.zeros(shape[1]), jnp.ones(shape[1]))

    def fused(x, w, b):
        y, mean, var = F.batch_norm(x, *running, w, b, training=True, momentum=0.3)
        return jnp.sum(y * g) + jnp.sum(mean) + jnp.sum(var)  # running stats: no gradient

    def reference(x, w, b):
        return jnp.sum(_autodiff(x, w, b) * g)

    np.testing.assert_array_equal(
        F.batch_norm(x, *running, w, b, training=True)[0], _autodiff(x, w, b)
    )
    got = jax.grad(fused, argnums=(0, 1, 2))(x, w, b)
    want = jax.grad(reference, argnums=(0, 1, 2))(x, w, b)
    for a, e in zip(got, want, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=2e-6)


def test_running_statistics_are_unchanged_by_the_kernel():
    x, w, b, _ = _arrays((6, 3, 4, 4))
    _, mean, var = F.batch_norm(x, jnp.zeros(3), jnp.ones(3), w, b, training=True, momentum=0.5)
    axes = (0, 2, 3)
    np.testing.assert_allclose(mean, 0.5 * jnp.mean(x, axes), rtol=1e-6)
    np.testing.assert_allclose(var, 0.5 + 0.5 * jnp.var(x, axes), rtol=1e-6)


@pytest.mark.slow  # ~5 s idle, 8.7 s beside another suite; the fused backward: tests above
def test_forward_mode_takes_the_autodiff_path():
    x, w, b, g = _arrays((4, 3, 5))
    fn = lambda x: F.batch_norm(x, None, None, w, b, training=True)[0]  # noqa: E731
    _, tangent = jax.jvp(fn, (x,), (g,))
    _, want = jax.jvp(lambda x: _autodiff(x, w, b), (x,), (g,))
    np.testing.assert_allclose(tangent, want, rtol=1e-5, atol=1e-6)
    hessian = jax.hessian(lambda w: jnp.sum(F.batch_norm(x, None, None, w, b, True)[0] ** 2))(w)
    assert hessian.shape == (3, 3) and bool(jnp.all(jnp.isfinite(hessian)))


def test_layer_in_training_uses_the_kernel_under_jit():
    bn = nn.BatchNorm2d(3)
    x, _, _, g = _arrays((4, 3, 5, 5))
    calls = []
    original = _norm_kernel.batch_norm_train

    def counting(*args):
        calls.append(1)
        return original(*args)

    @js.jit
    def grads(bn, x, g):
        return js.grad(lambda m: jnp.sum(m(x) * g))(bn)

    F.batch_norm_train, saved = counting, F.batch_norm_train
    try:
        got = grads(bn, x, g)
    finally:
        F.batch_norm_train = saved
    assert calls and got["weight"].shape == (3,)
    assert float(bn.running_mean.value[0]) != 0.0  # the running statistics moved
