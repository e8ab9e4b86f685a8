"""Elementwise activations as layers: ReLU, GELU, Tanh, Sigmoid."""

from __future__ import annotations

from js import Module

from . import functional as F


class ReLU(Module):
    """``max(x, 0)`` elementwise; any shape.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.ReLU()(jnp.array([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """

    def forward(self, x):
        return F.relu(x)


class GELU(Module):
    """``x * Phi(x)`` elementwise (Phi the standard normal CDF); any shape.

    Args:
        approximate: ``'none'`` (exact, erf-based, the default) or ``'tanh'``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.GELU()(jnp.zeros(2)).tolist()
        [0.0, 0.0]
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    """``tanh(x)`` elementwise; any shape.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.Tanh()(jnp.zeros(1)).tolist()
        [0.0]
    """

    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` elementwise; any shape.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.Sigmoid()(jnp.zeros(1)).tolist()
        [0.5]
    """

    def forward(self, x):
        return F.sigmoid(x)
