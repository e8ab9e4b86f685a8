"""Composition: Flatten and Sequential."""

from __future__ import annotations

import math
from typing import Any

import jax

from js import Module, ModuleList

from ._checks import check_int, fail_shape, shape_of


class Flatten(Module):
    """Merge dimensions ``start_dim`` to ``end_dim`` (inclusive) into one.

    Args:
        start_dim: first dimension to merge (1: keep the batch). end_dim: last one (-1).

    Shape:
        input ``[B, d1, ..., dn]``, output ``[B, d1 * ... * dn]`` with the defaults.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.Flatten()(jnp.ones((2, 3, 4, 5))).shape
        (2, 60)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        start_dim = check_int("Flatten", "start_dim", start_dim, minimum=None)
        self.start_dim, self.end_dim = start_dim, check_int("Flatten", "end_dim", end_dim, None)

    def forward(self, x: jax.Array) -> jax.Array:
        shape = shape_of(x)
        ndim = len(shape)
        start = self.start_dim + ndim if self.start_dim < 0 else self.start_dim
        end = self.end_dim + ndim if self.end_dim < 0 else self.end_dim
        if not 0 <= start <= end < ndim:
            expected = f"with dimensions {self.start_dim}..{self.end_dim}"
            fail_shape(
                "Flatten",
                expected,
                x,
                f"start_dim={self.start_dim}, end_dim={self.end_dim} do not fit a {ndim}-D input",
            )
        return x.reshape(shape[:start] + (math.prod(shape[start : end + 1]),) + shape[end + 1 :])

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Sequential(ModuleList):
    """Layers applied in order, each to the previous one's output: ``layer_n(...layer_1(x))``.

    It forwards one value and passes no keyword arguments (no ``rngs``): write a custom
    ``forward`` for dropout in training or for several inputs. Children are named ``0``,
    ``1``, ... as in PyTorch, so ``state_dict`` keys match (``'0.weight'``).

    Args:
        *layers: the modules, in order.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> rngs = js.Rngs(params=0)
        >>> mlp = js.nn.Sequential(js.nn.Linear(4, 8, rngs=rngs), js.nn.ReLU(),
        ...                        js.nn.Linear(8, 2, rngs=rngs))
        >>> mlp(jnp.ones((3, 4))).shape
        (3, 2)
        >>> list(mlp.state_dict())
        ['0.weight', '0.bias', '2.weight', '2.bias']
    """

    def __init__(self, *layers: Module):
        for index, layer in enumerate(layers):
            if not isinstance(layer, Module):
                raise TypeError(
                    f"Sequential: layer {index} must be a js Module, got {type(layer).__name__}"
                )
        super().__init__(list(layers))

    def forward(self, x: Any) -> Any:
        for layer in self:
            x = layer(x)
        return x
