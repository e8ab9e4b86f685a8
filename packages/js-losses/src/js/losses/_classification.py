"""Classification losses on raw logits: cross-entropy and binary cross-entropy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from js._checks import check_int, check_probability

from ._reduce import check_mask, check_reduction, masked_inputs, prepare_pair, reduce


def _class_logits(logits, target, axis: int) -> tuple[jax.Array, jax.Array]:
    """Logits with the class axis moved last [..., C], after checking ``target`` [...]."""
    logits, target = jnp.asarray(logits), jnp.asarray(target)
    if not jnp.issubdtype(target.dtype, jnp.integer):
        raise TypeError(
            f"cross_entropy: target must hold integer class indices, got dtype {target.dtype}. "
            "Fix: pass labels as integers, e.g. target.astype(jnp.int32)."
        )
    if not -logits.ndim <= axis < logits.ndim:
        raise ValueError(
            f"cross_entropy: axis {axis} is out of range for logits of shape {list(logits.shape)}"
        )
    logits = jnp.moveaxis(logits, axis, -1)
    if target.shape != logits.shape[:-1]:
        raise ValueError(
            f"cross_entropy: target shape {list(target.shape)} must be the logits shape "
            f"{list(jnp.moveaxis(logits, -1, axis).shape)} without its class axis ({axis}), "
            f"i.e. {list(logits.shape[:-1])}"
        )
    return logits, target


def _class_weight(weight, num_classes: int, dtype) -> jax.Array | None:
    if weight is None:
        return None
    weight = jnp.asarray(weight, dtype)
    if weight.shape != (num_classes,):
        raise ValueError(
            f"cross_entropy: weight must have shape [{num_classes}] (one per class), got "
            f"{list(weight.shape)}"
        )
    return weight


def _in_range(target: jax.Array, num_classes: int) -> jax.Array:
    """``0 <= target < num_classes`` in one unsigned compare: a negative label, seen as
    unsigned, is above every class (one op where two compares and an ``and`` were)."""
    if num_classes > jnp.iinfo(target.dtype).max:  # no label is too large: only the sign
        return target >= 0
    unsigned = jnp.dtype(f"uint{jnp.dtype(target.dtype).itemsize * 8}")
    return target.astype(unsigned) < num_classes


def _cross_entropy_elements(log_probs, target, weight, label_smoothing):
    """Per-element loss [...] and the mean's per-element divisor [...] (PyTorch's formulas)."""
    nll = -jnp.take_along_axis(log_probs, target[..., None], axis=-1)[..., 0]  # [...]
    denominator = None if weight is None else weight[target]  # [...]
    if denominator is not None:
        nll = denominator * nll
    if label_smoothing == 0:  # the smoothing term is not built (nor traced, nor compiled)
        return nll, denominator
    if weight is None:
        smooth = -jnp.mean(log_probs, axis=-1)
    else:
        smooth = -jnp.sum(log_probs * weight, axis=-1) / log_probs.shape[-1]
    return (1 - label_smoothing) * nll + label_smoothing * smooth, denominator


def cross_entropy(
    logits: ArrayLike,
    target: ArrayLike,
    *,
    axis: int = -1,
    reduction: str = "mean",
    mask: ArrayLike | None = None,
    weight: ArrayLike | None = None,
    label_smoothing: float = 0.0,
    ignore_index: int | None = -100,
) -> jax.Array:
    """Cross-entropy between raw ``logits`` and integer class labels, as PyTorch computes it.

    Per element, with ``p = log_softmax(logits)`` over the class axis, ``w`` the class weights
    (ones by default), ``C`` the number of classes and ``e = label_smoothing``::

        loss = (1 - e) * w[t] * -p[t]  +  e * sum_c(w[c] * -p[c]) / C

    ``'mean'`` divides the sum by the summed ``w[t]`` of the kept elements (PyTorch's weighted
    mean; the kept count without ``weight``). An element is kept when its label is not
    ``ignore_index`` (PyTorch's keyword and default, -100) and, if given, ``mask`` is True
    there. Differences from PyTorch: the class axis is *last* by default (``axis=1`` gives
    PyTorch's layout); a batch with no element kept gives 0, not NaN; probability targets are
    not accepted. Labels in ``[0, C)`` are a data precondition: where PyTorch
    raises for a label outside it (negative, or ``>= C``), a kept element gets a NaN loss and
    NaN gradients instead (a check cannot raise inside compiled code), so the reduced loss is
    NaN; negative labels never wrap around to a class. A masked label may be anything.

    Args:
        logits: unnormalized scores, ``[..., C, ...]`` with the classes on ``axis``.
        target: integer labels in ``[0, C)`` (outside it: NaN, see above), the shape of
            ``logits`` without ``axis``.
        axis: the class axis of ``logits`` (default -1).
        reduction: ``'none'`` | ``'sum'`` | ``'mean'`` (default).
        mask: optional boolean array of ``target``'s shape; False elements are excluded.
        ignore_index: a label whose elements are excluded, as ``mask=target != ignore_index``
            (default -100, as PyTorch; None: no label is ignored).
        weight: optional per-class weights ``[C]``.
        label_smoothing: in ``[0, 1]``; mixes the target with the uniform distribution.

    Shape: ``logits [N, C]`` and ``target [N]`` (any leading dimensions); the output is ``[]``,
    or ``target``'s shape for ``'none'``.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.losses import cross_entropy
        >>> logits = jnp.array([[2.0, 0.0], [0.0, 2.0]])
        >>> round(float(cross_entropy(logits, jnp.array([0, 1]))), 4)
        0.1269
    """
    check_reduction("cross_entropy", reduction)
    label_smoothing = check_probability("cross_entropy", "label_smoothing", label_smoothing)
    logits, target = _class_logits(logits, target, axis)
    weight = _class_weight(weight, logits.shape[-1], logits.dtype)
    mask = check_mask("cross_entropy", mask, target.shape)
    if ignore_index is not None:
        kept = target != check_int("cross_entropy", "ignore_index", ignore_index, minimum=None)
        mask = kept if mask is None else mask & kept
    (logits,) = masked_inputs(mask, logits)  # a masked NaN/inf row gets a zero gradient
    num_classes = logits.shape[-1]
    # JAX indexing would wrap -C..-1 onto a real class and fill or clamp >= C; PyTorch raises.
    # A kept out-of-range label instead adds NaN to its logits row: NaN value and gradient.
    readable = _in_range(target, num_classes)  # [...]
    fine = readable if mask is None else readable | ~mask  # a masked label may be -100
    logits = logits + jnp.where(fine, 0.0, jnp.nan)[..., None]  # weakly typed: keeps dtype
    target = jnp.where(readable, target, jnp.zeros_like(target))  # read class 0 instead
    log_probs = jax.nn.log_softmax(logits, axis=-1)  # [..., C]
    loss, denominator = _cross_entropy_elements(log_probs, target, weight, label_smoothing)
    return reduce(loss, reduction, mask, denominator)


def binary_cross_entropy_with_logits(
    logits: ArrayLike,
    target: ArrayLike,
    *,
    reduction: str = "mean",
    mask: ArrayLike | None = None,
    pos_weight: ArrayLike | None = None,
) -> jax.Array:
    """Binary cross-entropy on raw logits, stable for any logit magnitude.

    Per element, with ``x`` the logit, ``y`` the target probability and ``q = pos_weight``::

        loss = (1 - y) * x + (1 + (q - 1) * y) * softplus(-x)

    which equals ``-[q * y * log(sigmoid(x)) + (1 - y) * log(1 - sigmoid(x))]`` without
    overflow (``softplus(-x) = log1p(exp(-|x|)) + max(-x, 0)``), as PyTorch computes it.

    Args:
        logits: raw scores, any shape.
        target: probabilities in ``[0, 1]``, same shape as ``logits``.
        reduction: ``'none'`` | ``'sum'`` | ``'mean'`` (default).
        mask: optional boolean array of ``logits``'s shape; False elements are excluded.
        pos_weight: optional weight of positive examples, broadcastable to ``logits`` (usually
            one per class, ``[C]``, matching the last axis).

    Example:
        >>> import jax.numpy as jnp
        >>> from js.losses import binary_cross_entropy_with_logits
        >>> loss = binary_cross_entropy_with_logits(jnp.array([1e4, -1e4]), jnp.array([1.0, 0.0]))
        >>> float(loss)
        0.0
    """
    name = "binary_cross_entropy_with_logits"
    logits, target, mask = prepare_pair(name, logits, target, reduction, mask)
    log_weight = 1.0
    if pos_weight is not None:
        pos_weight = jnp.asarray(pos_weight, logits.dtype)
        try:
            fits = jnp.broadcast_shapes(pos_weight.shape, logits.shape) == logits.shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"{name}: pos_weight shape {list(pos_weight.shape)} does not broadcast to the "
                f"logits shape {list(logits.shape)}"
            )
        log_weight = 1 + (pos_weight - 1) * target
    loss = (1 - target) * logits + log_weight * jax.nn.softplus(-logits)
    return reduce(loss, reduction, mask)
