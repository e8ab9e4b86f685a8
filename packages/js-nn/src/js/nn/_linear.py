"""Linear and Identity layers."""

from __future__ import annotations

from typing import Any

import jax
from jax.typing import DTypeLike

from js import Module, Parameter, Rngs

from . import functional as F
from ._checks import check_dim, check_int, check_min_rank, layout
from ._factory import float_dtype, uniform_fan_in, zeros

__all__ = ["Identity", "Linear", "uniform_fan_in"]  # uniform_fan_in: kept importable from here


class Linear(Module):
    """Affine map ``y = x W^T + b``.

    Args:
        in_features: size I of each input's last dimension.
        out_features: size O of each output's last dimension.
        bias: whether to add a learnable bias ``b``.
        rngs: ``js.Rngs`` with a ``params`` stream, for the weight.
        dtype: the parameters' dtype (float32 by default, also under ``jax_enable_x64``).

    Shape:
        input ``[..., I]``, output ``[..., O]``.

    Weights:
        ``weight`` ``[O, I]`` drawn from U(-1/sqrt(I), 1/sqrt(I)); ``bias`` ``[O]`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> layer = js.nn.Linear(4, 3, rngs=js.Rngs(params=0))
        >>> layer(jnp.ones((2, 4))).shape
        (2, 3)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        rngs: Rngs,
        dtype: DTypeLike | None = None,
    ):
        super().__init__()
        self.in_features = in_features = check_int("Linear", "in_features", in_features)
        self.out_features = out_features = check_int("Linear", "out_features", out_features)
        dtype = float_dtype("Linear", dtype)
        key = rngs.next("params")
        shape = (out_features, in_features)
        self.weight = Parameter(uniform_fan_in(key, shape, in_features, dtype))
        self.bias = Parameter(zeros((out_features,), dtype)) if bias else None

    def forward(self, x: jax.Array) -> jax.Array:
        expected = layout("...", f"I={self.in_features}")
        check_min_rank("Linear", x, 1, expected)
        check_dim("Linear", x, -1, self.in_features, "the last dimension", expected)
        bias = None if self.bias is None else self.bias.value
        return F.linear(x, self.weight.value, bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Identity(Module):
    """Returns its input unchanged (a placeholder layer, as in PyTorch).

    Args:
        *args, **kwargs: accepted and ignored, as PyTorch's ``Identity`` does.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.Identity()(jnp.ones(2)).tolist()
        [1.0, 1.0]
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()

    def forward(self, x: jax.Array) -> jax.Array:
        return x
