"""Elementwise activations as layers, with PyTorch's constructor arguments.

``inplace`` is accepted wherever PyTorch has it (``ReLU(True)`` too) and does nothing: JAX
arrays are immutable, so every activation returns a new array, which is what an in-place
PyTorch op is observably equivalent to in a forward pass.
"""

from __future__ import annotations

import numbers

import jax

from js import Module

from . import functional as F
from ._checks import check_bool, check_int


def _real(layer: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{layer}: {name} must be a number, got {value!r}")
    return float(value)


class _Inplace(Module):
    """An activation with PyTorch's ``inplace`` flag (a no-op here)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = check_bool(type(self).__name__, "inplace", inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Inplace):
    """``max(x, 0)`` elementwise; any shape.

    Args:
        inplace: accepted for PyTorch code and ignored (JAX arrays are immutable).

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.ReLU(True)(jnp.array([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """

    def forward(self, x: jax.Array) -> jax.Array:
        return F.relu(x)


class ReLU6(_Inplace):
    """``min(max(x, 0), 6)`` elementwise; any shape.

    Args:
        inplace: accepted and ignored.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.ReLU6()(jnp.array([-1.0, 7.0])).tolist()
        [0.0, 6.0]
    """

    def forward(self, x: jax.Array) -> jax.Array:
        return F.relu6(x)


class SiLU(_Inplace):
    """``x * sigmoid(x)`` (swish) elementwise; any shape.

    Args:
        inplace: accepted and ignored.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.SiLU()(jnp.zeros(2)).tolist()
        [0.0, 0.0]
    """

    def forward(self, x: jax.Array) -> jax.Array:
        return F.silu(x)


class LeakyReLU(Module):
    """``x`` where ``x >= 0``, else ``negative_slope * x``; any shape.

    Args:
        negative_slope: the slope below zero (0.01). inplace: accepted and ignored.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.LeakyReLU(0.25, True)(jnp.array([-1.0, 2.0])).tolist()
        [-0.25, 2.0]
    """

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = _real("LeakyReLU", "negative_slope", negative_slope)
        self.inplace = check_bool("LeakyReLU", "inplace", inplace)

    def forward(self, x: jax.Array) -> jax.Array:
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" * self.inplace)


class ELU(Module):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``; any shape.

    Args:
        alpha: the negative saturation value (1.0). inplace: accepted and ignored.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.ELU()(jnp.array([0.0, 2.0])).tolist()
        [0.0, 2.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = _real("ELU", "alpha", alpha)
        self.inplace = check_bool("ELU", "inplace", inplace)

    def forward(self, x: jax.Array) -> jax.Array:
        return F.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" * self.inplace)


class Hardtanh(Module):
    """``clip(x, min_val, max_val)`` elementwise; any shape.

    Args:
        min_val, max_val: the bounds (-1, 1), ``min_val < max_val``. inplace: ignored.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.Hardtanh()(jnp.array([-3.0, 0.5])).tolist()
        [-1.0, 0.5]
    """

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        self.min_val = _real("Hardtanh", "min_val", min_val)
        self.max_val = _real("Hardtanh", "max_val", max_val)
        if self.max_val <= self.min_val:
            raise ValueError(
                f"Hardtanh: max_val must be greater than min_val, got min_val={min_val}, "
                f"max_val={max_val}"
            )
        self.inplace = check_bool("Hardtanh", "inplace", inplace)

    def forward(self, x: jax.Array) -> jax.Array:
        return F.hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"


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

    def forward(self, x: jax.Array) -> jax.Array:
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

    def forward(self, x: jax.Array) -> jax.Array:
        return F.tanh(x)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` elementwise; any shape.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.Sigmoid()(jnp.zeros(1)).tolist()
        [0.5]
    """

    def forward(self, x: jax.Array) -> jax.Array:
        return F.sigmoid(x)


class _SoftmaxBase(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        name = type(self).__name__
        if dim is None:
            # PyTorch's implicit dimension is deprecated there (a warning) and depends on the
            # input's rank; asking for it keeps a port from silently normalising the batch.
            raise ValueError(
                f"{name}: dim=None (PyTorch's deprecated implicit dimension) is not supported. "
                f"Fix: pass the dimension, e.g. {name}(dim=-1) or {name}(dim=1)"
            )
        self.dim = check_int(name, "dim", dim, minimum=None)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_SoftmaxBase):
    """``exp(x) / sum(exp(x))`` along ``dim``; any shape.

    Args:
        dim: the dimension that sums to one (required; PyTorch's implicit ``None`` raises).

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.Softmax(dim=-1)(jnp.zeros((1, 2))).tolist()
        [[0.5, 0.5]]
    """

    def forward(self, x: jax.Array) -> jax.Array:
        return F.softmax(x, self.dim)


class LogSoftmax(_SoftmaxBase):
    """``x - logsumexp(x)`` along ``dim``; any shape.

    Args:
        dim: the dimension normalised (required; PyTorch's implicit ``None`` raises).

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.LogSoftmax(dim=1)(jnp.zeros((1, 1))).tolist()
        [[0.0]]
    """

    def forward(self, x: jax.Array) -> jax.Array:
        return F.log_softmax(x, self.dim)
