"""The per-parameter arithmetic several optimizers share (pure ``jnp``), in torch's forms.

Every optimizer follows torch 2.13's single-tensor code paths (``_single_tensor_rmsprop`` and
its kin in ``torch/optim/*.py``) operation by operation, in the same order, so results agree
with PyTorch's to float32 rounding. Where torch computes a scalar from the step count in double
on the host (bias corrections, NAdam's momentum schedule, RAdam's rectification), the update
computes it in float32 from host-computed logarithms, in forms that lose only float32 rounding
(``-expm1(t * log(b))`` for ``1 - b**t``; RAdam's ``rho_t`` without its cancellation).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

Scalars = dict[str, jax.Array]
State = dict[str, jax.Array]


def log_or_inf(decay: float) -> float:
    """``log(decay)`` in double (``-inf`` for 0: the correction ``-expm1(t log b)`` is then 1)."""
    return math.log(decay) if decay > 0 else -math.inf


def bias_correction(log_decay: jax.Array, step: jax.Array) -> jax.Array:
    """``1 - decay**step`` to float32 rounding: ``-expm1(step * log(decay))``, ``log(decay)``
    taken in double on the host (optax rounds ``decay`` to float32 first: for b2 = 0.999 a
    1.3e-5 relative error at step 1 that stays for thousands of steps, so every Adam step came
    out ~6e-6 smaller than PyTorch's, which computes the correction in double)."""
    return -jnp.expm1(step.astype(log_decay.dtype) * log_decay)


def as_float(step: jax.Array) -> jax.Array:
    return jnp.asarray(step, jnp.result_type(float))


def lerp(start: jax.Array, end: jax.Array, weight: jax.Array) -> jax.Array:
    """``torch.lerp``'s two formulas (ATen ``lerp``): exact at both ends of the weight."""
    diff = end - start
    return jnp.where(weight < 0.5, start + weight * diff, end - diff * (1 - weight))


def l2(grad: jax.Array, param: jax.Array, h: Scalars) -> jax.Array:
    """``grad + weight_decay * param`` (torch adds it only when weight_decay != 0: the same)."""
    return grad + h["weight_decay"] * param


def decayed(param: jax.Array, grad: jax.Array, h: Scalars, decoupled: bool) -> tuple:
    """``(param, grad)`` after weight decay: AdamW's ``param * (1 - lr * weight_decay)``
    (``decoupled_weight_decay=True``), or else the L2 penalty added to the gradient."""
    if decoupled:
        return param * (1 - h["lr"] * h["weight_decay"]), grad
    return param, l2(grad, param, h)


def adam_moments(state: State, grad: jax.Array, h: Scalars) -> tuple[jax.Array, jax.Array]:
    """``(exp_avg, exp_avg_sq)`` of torch's single-tensor NAdam and RAdam: the first moment by
    ``lerp``, the second ``exp_avg_sq * b2 + (1 - b2) * g * g`` (Adam's own order differs)."""
    exp_avg = lerp(state["exp_avg"], grad, h["one_minus_b1"])
    return exp_avg, state["exp_avg_sq"] * h["b2"] + h["one_minus_b2"] * grad * grad


def rho_minus_k(t: jax.Array, neg_log_b2: jax.Array) -> jax.Array:
    """``rho_t - K`` of RAdam (see ``RAdam.scalars``), as ``t * (2/u - 2/expm1(u))`` with
    ``u = -t log(b2)``: a series below u = 1, where the difference cancels in float32."""
    u = t * neg_log_b2
    s = jnp.minimum(u, 1.0)  # the series part: 2/u - 2/expm1(u) = 1 - sum_k 2 B_2k s^(2k-1)/(2k)!
    s2 = s * s
    series = 1 - s * (1 / 6 - s2 * (1 / 360 - s2 * (1 / 15120 - s2 * (1 / 604800 - s2 / 23950080))))
    direct = 2 / u - 2 / jnp.expm1(u)
    return t * jnp.where(u < 1, series, direct)
