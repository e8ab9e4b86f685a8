"""Batch and layer normalization with hand-written backward passes (``batch_norm_train``,
``layer_norm_affine``).

``functional.batch_norm`` calls it in training when both ``weight`` and ``bias`` are given and
no forward-mode derivative is being taken (a ``jax.custom_vjp`` has a reverse rule only;
``jax.jvp``/``jacfwd``/``hessian`` get the autodiff formula). The forward pass is the same
two-pass formula as the autodiff path, so the values are identical; the backward pass is the
closed form PyTorch and cuDNN use,

    dx = weight * rstd / N * (N dy - sum(dy) - xhat * sum(dy * xhat)),
    dweight = sum(dy * xhat),  dbias = sum(dy),

three reductions and one elementwise pass, where autodiff of the two-pass forward emits about
twice as many passes over ``x`` (2-3x slower on XLA:CPU; measured in docs/benchmarks.md).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax


def _stats_axes(x) -> tuple[int, ...]:
    return (0,) + tuple(range(2, x.ndim))  # every axis but the channels (1)


def _forward(x, weight, bias, eps):
    axes, shape = _stats_axes(x), (1, -1) + (1,) * (x.ndim - 2)
    mean = jnp.mean(x, axis=axes)  # [C]
    centred = x - mean.reshape(shape)
    var = jnp.mean(jnp.square(centred), axis=axes)  # [C], population variance
    rstd = lax.rsqrt(var + eps)
    xhat = centred * rstd.reshape(shape)
    return xhat * weight.reshape(shape) + bias.reshape(shape), mean, var, xhat, rstd


def _batch_norm_train(
    x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(y, batch mean [C], batch population variance [C])`` of ``x`` ``[B, C, ...]``.

    ``mean`` and ``var`` are for the running statistics only: the backward pass treats them as
    constants (``functional.batch_norm`` stops their gradient too). ``eps`` is a Python float.
    """
    return _forward(x, weight, bias, eps)[:3]


def _fwd(x, weight, bias, eps):
    y, mean, var, xhat, rstd = _forward(x, weight, bias, eps)
    return (y, mean, var), (xhat, rstd, weight)


def _bwd(eps, residuals, cotangents):
    xhat, rstd, weight = residuals
    dy = cotangents[0]  # the mean's and var's cotangents: constants, see the docstring
    axes, shape = _stats_axes(dy), (1, -1) + (1,) * (dy.ndim - 2)
    n = math.prod(dy.shape[a] for a in axes)
    dbias = jnp.sum(dy, axis=axes)
    dweight = jnp.sum(dy * xhat, axis=axes)
    scale = (weight * rstd / n).reshape(shape)
    dx = scale * (n * dy - dbias.reshape(shape) - xhat * dweight.reshape(shape))
    return dx, dweight, dbias


# Built by a call rather than ``@functools.partial(jax.custom_vjp, ...)``: pyright reads the
# call's result type (the partial decorator hides it).
batch_norm_train = jax.custom_vjp(_batch_norm_train, nondiff_argnums=(3,))
batch_norm_train.defvjp(_fwd, _bwd)


# -- layer normalization ----------------------------------------------------------------------
#
# Autodiff of the two-pass layer norm (mean, then the mean of the squared centred input) gives
# XLA:CPU a backward pass it compiles slowly: a stack of 12 small transformer blocks took 7-27 s
# to compile against 3-4 s with the closed form below (and 1.4 s with RMSNorm), the forward
# pass unchanged. The closed form is PyTorch's:
#
#     g = dy * weight,  dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
#     dweight = sum(dy * xhat),  dbias = sum(dy)   (sums over the leading axes).


def _layer_norm_forward(x, weight, bias, n, eps):
    axes = tuple(range(x.ndim - n, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    xhat = (x - mean) * rstd  # the autodiff path's formula, so the values are identical
    return xhat * weight + bias, xhat, rstd


def _layer_norm_affine(
    x: jax.Array, weight: jax.Array, bias: jax.Array, n: int, eps: float
) -> jax.Array:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing ``n`` axes of ``x``
    (population variance); ``weight`` and ``bias`` have the shape of those axes. ``n`` and
    ``eps`` are Python numbers."""
    return _layer_norm_forward(x, weight, bias, n, eps)[0]


def _layer_norm_fwd(x, weight, bias, n, eps):
    y, xhat, rstd = _layer_norm_forward(x, weight, bias, n, eps)
    return y, (xhat, rstd, weight)


def _layer_norm_bwd(n, eps, residuals, dy):
    xhat, rstd, weight = residuals
    axes = tuple(range(dy.ndim - n, dy.ndim))
    leading = tuple(range(dy.ndim - n))
    g = dy * weight
    mean_g = jnp.mean(g, axis=axes, keepdims=True)
    mean_gx = jnp.mean(g * xhat, axis=axes, keepdims=True)
    dx = rstd * (g - mean_g - xhat * mean_gx)
    return dx, jnp.sum(dy * xhat, axis=leading), jnp.sum(dy, axis=leading)


layer_norm_affine = jax.custom_vjp(_layer_norm_affine, nondiff_argnums=(3, 4))
layer_norm_affine.defvjp(_layer_norm_fwd, _layer_norm_bwd)
