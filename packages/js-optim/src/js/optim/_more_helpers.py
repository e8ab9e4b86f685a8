"""RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Adafactor and Lion on the optimizer shell.

Each class gives the shell four pieces (see ``Optimizer``): ``check(group)`` validates a
group's options, ``scalars(group)`` turns them into the float scalars the update reads
(computed on the host in double precision), ``init(param, group)`` makes a parameter's state
fields and ``update(param, grad, state, h, step, group)`` is the pure per-parameter step.

The arithmetic follows torch 2.13's single-tensor code paths (``_single_tensor_rmsprop`` and
its kin in ``torch/optim/*.py``) operation by operation, in the same order, so results agree
with PyTorch's to float32 rounding. Where torch computes a scalar from the step count in double
on the host (bias corrections, NAdam's momentum schedule, RAdam's rectification), the update
computes it in float32 from host-computed logarithms, in forms that lose only float32 rounding
(``-expm1(t * log(b))`` for ``1 - b**t``; RAdam's ``rho_t`` without its cancellation).
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp

from ._optimizers import _bias_correction as _bias_correction
from ._optimizers import _log as _log

Scalars = dict[str, jax.Array]
State = dict[str, jax.Array]


# ----------------------------------------------------------------------------------------------
# Checks (host side, before anything is built or written)


def _number(name: str, value, low: float, high: float | None = None, *, closed: bool = True):
    """``value`` as a float when it is a real number in ``[low, high]`` (``[low, high)`` when
    ``closed`` is False); TypeError for a bool or non-number, ValueError outside the range."""
    span = f">= {low}" if high is None else f"in [{low}, {high}{']' if closed else ')'}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number {span}, got {value!r} (a {type(value).__name__})")
    x = float(value)
    ok = x >= low and (high is None or (x <= high if closed else x < high))
    if not ok:
        raise ValueError(f"{name} must be a number {span}, got {value!r}")
    return x


def _betas(betas) -> tuple[float, float]:
    if not isinstance(betas, tuple | list) or len(betas) != 2:
        raise TypeError(f"betas must be a pair (b1, b2), got {betas!r}. Fix: betas=(0.9, 0.999)")
    b1 = _number("betas[0]", betas[0], 0.0, 1.0, closed=False)
    return b1, _number("betas[1]", betas[1], 0.0, 1.0, closed=False)


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be True or False, got {value!r} (a {type(value).__name__}). Fix: "
            f"{name}=True or {name}=False"
        )
    return value


def _auto(eps1) -> bool:
    """Adafactor's ``eps1=None`` (the dtype's epsilon); NaN is how a state dict stores None."""
    return eps1 is None or (isinstance(eps1, float) and math.isnan(eps1))


# ----------------------------------------------------------------------------------------------
# Shared pieces of the per-parameter math (pure jnp)


def _float(step: jax.Array) -> jax.Array:
    return jnp.asarray(step, jnp.result_type(float))


def _lerp(start: jax.Array, end: jax.Array, weight: jax.Array) -> jax.Array:
    """``torch.lerp``'s two formulas (ATen ``lerp``): exact at both ends of the weight."""
    diff = end - start
    return jnp.where(weight < 0.5, start + weight * diff, end - diff * (1 - weight))


def _l2(grad: jax.Array, param: jax.Array, h: Scalars) -> jax.Array:
    """``grad + weight_decay * param`` (torch adds it only when weight_decay != 0: the same)."""
    return grad + h["weight_decay"] * param


def _rho_minus_k(t: jax.Array, neg_log_b2: jax.Array) -> jax.Array:
    """``rho_t - K`` of RAdam (see ``RAdam.scalars``), as ``t * (2/u - 2/expm1(u))`` with
    ``u = -t log(b2)``: a series below u = 1, where the difference cancels in float32."""
    u = t * neg_log_b2
    s = jnp.minimum(u, 1.0)  # the series part: 2/u - 2/expm1(u) = 1 - sum_k 2 B_2k s^(2k-1)/(2k)!
    s2 = s * s
    series = 1 - s * (1 / 6 - s2 * (1 / 360 - s2 * (1 / 15120 - s2 * (1 / 604800 - s2 / 23950080))))
    direct = 2 / u - 2 / jnp.expm1(u)
    return t * jnp.where(u < 1, series, direct)
