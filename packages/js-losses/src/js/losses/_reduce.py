"""The one place where per-element losses become a reduced loss, and the checks they share.

Every loss in ``js.losses`` is a pure per-element function followed by :func:`reduce`. Masking
is a "double where": each loss first replaces its masked inputs with safe values
(:func:`masked_inputs`, before any arithmetic), then :func:`reduce` excludes the masked
elements with ``jnp.where`` (never by multiplying with zero). A single ``where`` on the loss is
not enough: its gradient is 0 times the local derivative, which is NaN when that derivative
is (e.g. ``2 * (nan - y)``). With both, a masked element whose input, target or label is
infinite, NaN or out of range cannot poison the value or the gradient, and the gradient at
masked positions is exactly zero.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

REDUCTIONS = ("none", "sum", "mean")


def check_reduction(name: str, reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{name}: reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")


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


def prepare_pair(name: str, input, target, reduction: str, mask):
    """The checks and the masking every (prediction, target) loss starts with.

    Returns ``(input, target, mask)``: both as arrays of one shape (``target`` cast to
    ``input``'s dtype), ``mask`` checked against that shape, masked elements replaced by 0.
    """
    check_reduction(name, reduction)
    input, target = jnp.asarray(input), jnp.asarray(target)
    check_same_shape(name, input, target)
    mask = check_mask(name, mask, input.shape)
    input, target = masked_inputs(mask, input, target.astype(input.dtype))
    return input, target, mask


def masked_inputs(mask, *arrays: jax.Array) -> tuple[jax.Array, ...]:
    """``arrays`` with their masked elements replaced by 0, the first half of the double where.

    ``mask`` has the per-element loss shape ``[...]``; each array is ``[...]`` or has extra
    trailing axes (cross-entropy's logits ``[..., C]``), which the mask covers whole. With no
    mask the arrays are returned unchanged. The gradient with respect to a replaced element is
    exactly 0, whatever its value was.
    """
    if mask is None:
        return arrays
    return tuple(
        jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - mask.ndim)), a, jnp.zeros_like(a))
        for a in arrays
    )


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
    if denominator is not None:
        if mask is not None:
            denominator = jnp.where(mask, denominator, jnp.zeros_like(denominator))
        count = jnp.sum(denominator)
    elif mask is not None:
        count = jnp.sum(mask.astype(loss.dtype))  # the kept count
    else:  # every element counts: the count is the static size (no array of ones to sum)
        return total / max(loss.size, 1)
    # Empty selection: total is 0, so dividing by 1 gives 0 and a zero gradient, not 0/0.
    return total / jnp.where(count == 0, jnp.ones_like(count), count)
