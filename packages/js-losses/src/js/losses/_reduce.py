"""The one place where per-element losses become a reduced loss, and the checks they share.

Every loss in ``js.losses`` is a pure per-element function followed by :func:`reduce`. Masked
elements are excluded with ``jnp.where`` (never multiplied by zero), so a masked element whose
loss is infinite or NaN cannot poison the value or the gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

REDUCTIONS = ("none", "sum", "mean")


def check_reduction(name: str, reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"{name}: reduction must be one of {list(REDUCTIONS)}, got {reduction!r}"
        )


def check_same_shape(name: str, input: jax.Array, target: jax.Array) -> None:
    """Prediction and target must have the same shape (PyTorch would broadcast with a warning)."""
    if jnp.shape(input) != jnp.shape(target):
        raise ValueError(
            f"{name}: input shape {list(jnp.shape(input))} and target shape "
            f"{list(jnp.shape(target))} differ; they must match exactly. Fix: reshape one of "
            "them (js.losses does not broadcast targets)."
        )


def check_mask(name: str, mask, shape: tuple[int, ...]) -> jax.Array | None:
    """``mask`` as a boolean array of the per-element loss shape (or None)."""
    if mask is None:
        return None
    mask = jnp.asarray(mask)
    if mask.dtype != jnp.bool_:
        raise TypeError(
            f"{name}: mask must be a boolean array (True = keep the element), got dtype "
            f"{mask.dtype}. Fix: pass e.g. `labels != pad_id`."
        )
    if mask.shape != tuple(shape):
        raise ValueError(
            f"{name}: mask shape {list(mask.shape)} must equal the per-element loss shape "
            f"{list(shape)}"
        )
    return mask


def reduce(loss: jax.Array, reduction: str, mask=None, denominator=None) -> jax.Array:
    """Reduce per-element ``loss`` [...] with ``reduction`` in ``none``/``sum``/``mean``.

    Args:
        loss: per-element losses.
        reduction: ``'none'`` returns ``loss`` (masked elements set to 0), ``'sum'`` sums the
            kept elements, ``'mean'`` divides that sum by the kept count, or by the kept sum of
            ``denominator`` when given (PyTorch's class-weighted mean).
        mask: optional boolean array of ``loss``'s shape; False elements are excluded.
        denominator: optional per-element weights of the mean's divisor, same shape as ``loss``.

    An empty selection (every element masked) gives 0 for ``sum`` and ``mean``, and a zero
    gradient, instead of PyTorch's NaN.
    """
    if mask is not None:
        loss = jnp.where(mask, loss, jnp.zeros_like(loss))
    if reduction == "none":
        return loss
    total = jnp.sum(loss)
    if reduction == "sum":
        return total
    if denominator is None:
        denominator = jnp.ones_like(loss)
    if mask is not None:
        denominator = jnp.where(mask, denominator, jnp.zeros_like(denominator))
    count = jnp.sum(denominator)
    # Empty selection: total is 0, so dividing by 1 gives 0 and a zero gradient, not 0/0.
    return total / jnp.where(count == 0, jnp.ones_like(count), count)
