"""Batch normalization in training with a hand-written backward pass (``batch_norm_train``).

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
