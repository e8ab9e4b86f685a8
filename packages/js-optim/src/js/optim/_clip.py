"""Gradient clipping, with torch.nn.utils.clip_grad_norm_'s and clip_grad_value_'s arithmetic."""

from __future__ import annotations

from typing import TypeVar

import jax
import jax.numpy as jnp
import optax

from js._checks import check_number

_Grads = TypeVar("_Grads")  # any pytree of arrays; the clipped one has its structure


def clip_grad_norm(grads: _Grads, max_norm: float) -> tuple[_Grads, jax.Array]:
    """Scale ``grads`` so that their global L2 norm is at most ``max_norm``.

    Returns ``(clipped_grads, original_norm)``. As PyTorch's ``clip_grad_norm_``, every
    gradient is multiplied by ``min(1, max_norm / (norm + 1e-6))``; unlike it, nothing is
    modified in place (gradients are values) and only the 2-norm is offered.
    ``optax.clip_by_global_norm`` differs slightly (no 1e-6 and no scaling below the limit).

    Args:
        grads: any pytree of arrays, e.g. the state ``js.value_and_grad`` returns.
        max_norm: the largest allowed global norm, >= 0.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.optim import clip_grad_norm
        >>> clipped, norm = clip_grad_norm({"w": jnp.array([3.0, 4.0])}, max_norm=1.0)
        >>> float(norm), [round(x, 4) for x in clipped["w"].tolist()]
        (5.0, [0.6, 0.8])
    """
    check_number("clip_grad_norm", "max_norm", max_norm, 0)
    norm = optax.tree.norm(grads)
    scale = jnp.minimum(max_norm / (norm + 1e-6), 1.0)
    clipped = jax.tree.map(lambda g: (g * scale).astype(g.dtype), grads)
    return clipped, norm


def clip_grad_value(grads: _Grads, clip_value: float) -> _Grads:
    """Clamp every gradient element to ``[-clip_value, clip_value]``.

    As PyTorch's ``torch.nn.utils.clip_grad_value_``, but returning the clipped tree instead of
    modifying gradients in place (gradients are values). It is ``optax.clip(clip_value)``.

    Args:
        grads: any pytree of arrays, e.g. the state ``js.value_and_grad`` returns.
        clip_value: the largest allowed magnitude, >= 0.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.optim import clip_grad_value
        >>> clipped = clip_grad_value({"w": jnp.array([-3.0, 0.5, 4.0])}, clip_value=1.0)
        >>> clipped["w"].tolist()
        [-1.0, 0.5, 1.0]
    """
    check_number("clip_grad_value", "clip_value", clip_value, 0)
    limit = float(clip_value)
    return jax.tree.map(lambda g: jnp.clip(g, -limit, limit).astype(g.dtype), grads)
