"""Regression losses: mean squared error, L1, smooth L1 (PyTorch's definitions)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ._reduce import prepare_pair, reduce


def _abs(x: jax.Array) -> jax.Array:
    # sign(x) * x instead of abs(x): its gradient at 0 is 0, as in PyTorch (JAX's abs gives 1).
    return jnp.sign(x) * x


def mse_loss(
    input: ArrayLike, target: ArrayLike, *, reduction: str = "mean", mask: ArrayLike | None = None
) -> jax.Array:
    """Mean squared error, ``(input - target)**2`` per element, then ``reduction``.

    Args:
        input: predictions, any shape.
        target: same shape as ``input``.
        reduction: ``'none'`` | ``'sum'`` | ``'mean'`` (default).
        mask: optional boolean array of ``input``'s shape; False elements are excluded and a
            masked ``mean`` divides by the number of kept elements.

    Shape: ``input`` and ``target`` ``[*]``; the output is ``[]``, or ``[*]`` for ``'none'``.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.losses import mse_loss
        >>> float(mse_loss(jnp.array([1.0, 2.0]), jnp.array([1.0, 4.0])))
        2.0
    """
    input, target, mask = prepare_pair("mse_loss", input, target, reduction, mask)
    return reduce(jnp.square(input - target), reduction, mask)


def l1_loss(
    input: ArrayLike, target: ArrayLike, *, reduction: str = "mean", mask: ArrayLike | None = None
) -> jax.Array:
    """Mean absolute error, ``|input - target|`` per element, then ``reduction``.

    Args and shapes as :func:`mse_loss`. The gradient at ``input == target`` is 0, as in PyTorch.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.losses import l1_loss
        >>> float(l1_loss(jnp.array([1.0, 2.0]), jnp.array([1.0, 4.0]), reduction="sum"))
        2.0
    """
    input, target, mask = prepare_pair("l1_loss", input, target, reduction, mask)
    return reduce(_abs(input - target), reduction, mask)


def smooth_l1_loss(
    input: ArrayLike,
    target: ArrayLike,
    *,
    reduction: str = "mean",
    mask: ArrayLike | None = None,
    beta: float = 1.0,
) -> jax.Array:
    """Smooth L1 (Huber divided by ``beta``), as ``torch.nn.functional.smooth_l1_loss``.

    Per element, with ``d = |input - target|``: ``0.5 * d**2 / beta`` if ``d < beta``, else
    ``d - 0.5 * beta``. ``beta = 0`` is the L1 loss.

    Args:
        beta: the threshold between the quadratic and linear parts; must be >= 0.
        Others as :func:`mse_loss`.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.losses import smooth_l1_loss
        >>> smooth_l1_loss(jnp.array([0.5, 3.0]), jnp.zeros(2), reduction="none").tolist()
        [0.125, 2.5]
    """
    if not beta >= 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta!r}")
    input, target, mask = prepare_pair("smooth_l1_loss", input, target, reduction, mask)
    d = _abs(input - target)
    if beta == 0:
        return reduce(d, reduction, mask)
    # The quadratic branch is evaluated everywhere; both branches are finite, so where() is safe.
    loss = jnp.where(d < beta, 0.5 * jnp.square(d) / beta, d - 0.5 * beta)
    return reduce(loss, reduction, mask)
