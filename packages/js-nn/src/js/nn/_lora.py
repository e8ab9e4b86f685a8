"""LoRALinear: a linear layer plus a trainable low-rank update (Hu et al., 2021), laid out as
Hugging Face PEFT 0.21 lays it out, so that adapters move between js and PEFT unchanged.

The base layer's ``weight`` and ``bias`` stay where they were (``<path>.weight``, not PEFT's
``<path>.base_layer.weight``): a model's ``state_dict()``, its checkpoints and its weight files
keep their names after :func:`js.nn.lora.inject`, and only ``lora_A``/``lora_B`` are new. The
base module itself is kept aside (not a child: its Parameters are this layer's own) and comes
back, merged, from :meth:`LoRALinear.merged`.

A "linear layer" is a ``js.nn.Linear`` (``weight [out, in]``, ``x @ weight.T + bias``) or any
module whose class sets ``fan_in_fan_out = True`` and stores ``weight [in, out]`` applied as
``x @ weight + bias`` (GPT-2's ``Conv1D``; PEFT's ``fan_in_fan_out=True``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from js import Module, Parameter, Rngs

from . import functional as F
from ._checks import check_probability, dropout_key
from ._dropout import Dropout
from ._linear import Linear

__all__ = ["LoRALinear", "is_linear"]


def is_linear(module: Any) -> bool:
    """Whether LoRA can wrap ``module``: a ``js.nn.Linear``, or a module whose class sets
    ``fan_in_fan_out = True`` and holds a 2-D ``weight`` Parameter ``[in, out]``."""
    if isinstance(module, Linear):
        return True
    weight = getattr(module, "weight", None)
    return (
        getattr(type(module), "fan_in_fan_out", False) is True
        and isinstance(weight, Parameter)
        and weight.value.ndim == 2
    )


class _Aside:
    """Holds the wrapped module out of sight of the module traversal (a plain object is static
    data to NNX and no child to ``named_modules``): its Parameters are the wrapper's own."""

    __slots__ = ("module",)

    def __init__(self, module: Module):
        self.module = module


class LoRALinear(Module):
    """``base(x) + lora_B(lora_A(dropout(x))) * scaling``, with ``scaling = alpha / r``
    (``alpha / sqrt(r)`` with ``use_rslora``), as PEFT's ``lora.Linear``.

    Args:
        base: the linear layer to adapt (see :func:`is_linear`); its ``weight`` and ``bias``
            become this layer's, at the same paths.
        r: the adapter's rank.
        alpha: PEFT's ``lora_alpha``.
        dropout: the probability of dropping the adapter's input in training (PEFT's
            ``lora_dropout``); identity in evaluation.
        rngs: ``js.Rngs`` with a ``params`` stream (``lora_A``'s initialisation) and, for
            ``dropout > 0`` in training, a ``dropout`` stream (kept to draw one key per call).
        use_rslora: rank-stabilised scaling ``alpha / sqrt(r)`` (PEFT's ``use_rslora``).

    Shape:
        input ``[..., in]``, output ``[..., out]``.

    Weights:
        ``weight``/``bias``: the base layer's. ``lora_A.weight`` ``[r, in]`` drawn from
        U(-1/sqrt(in), 1/sqrt(in)) (PEFT's default, torch's ``kaiming_uniform_(a=sqrt(5))``);
        ``lora_B.weight`` ``[out, r]`` zeros, so a new adapter changes nothing.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> base = js.nn.Linear(4, 3, rngs=js.Rngs(params=0))
        >>> layer = js.nn.LoRALinear(base, r=2, alpha=4, rngs=js.Rngs(params=1))
        >>> layer.lora_A.weight.value.shape, layer.lora_B.weight.value.shape, layer.scaling
        ((2, 4), (3, 2), 2.0)
        >>> bool(jnp.allclose(layer(jnp.ones((1, 4))), base(jnp.ones((1, 4)))))
        True
    """

    def __init__(
        self,
        base: Module,
        r: int = 8,
        alpha: float = 16,
        dropout: float = 0.0,
        *,
        rngs: Rngs,
        use_rslora: bool = False,
    ):
        super().__init__()
        if not is_linear(base):
            raise TypeError(
                f"LoRALinear: base must be a js.nn.Linear or a layer whose class sets "
                f"fan_in_fan_out = True with a 2-D weight, got {type(base).__name__}. Fix: "
                "adapt the model's linear projections only"
            )
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ValueError(f"LoRALinear: r must be a positive integer, got {r!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
            raise ValueError(f"LoRALinear: alpha must be a positive number, got {alpha!r}")
        self.fan_in_fan_out = not isinstance(base, Linear)
        weight: Parameter = base.weight  # type: ignore[assignment]
        shape = weight.value.shape
        self.in_features, self.out_features = shape if self.fan_in_fan_out else shape[::-1]
        self.r, self.alpha, self.use_rslora = r, alpha, bool(use_rslora)
        self.scaling = alpha / (r**0.5 if use_rslora else r)
        self.weight = weight
        self.bias = getattr(base, "bias", None)
        dtype = weight.value.dtype
        self.lora_A = Linear(self.in_features, r, bias=False, rngs=rngs, dtype=dtype)
        self.lora_B = Linear(r, self.out_features, bias=False, rngs=rngs, dtype=dtype)
        self.lora_B.weight.value = jnp.zeros_like(self.lora_B.weight.value)
        self.lora_dropout = Dropout(check_probability("LoRALinear", "dropout", dropout))
        self.rngs = rngs if dropout > 0 and "dropout" in rngs.streams() else None
        self._base = _Aside(base)

    def forward(self, x: jax.Array) -> jax.Array:
        bias = None if self.bias is None else self.bias.value
        if self.fan_in_fan_out:
            out = x @ self.weight.value
            out = out if bias is None else out + bias
        else:
            out = F.linear(x, self.weight.value, bias)
        if self.training and self.lora_dropout.p > 0:
            key = dropout_key("LoRALinear", self.rngs, fix="pass rngs to lora.inject")
            x = F.dropout(x, self.lora_dropout.p, True, key=key)
        return out + self.lora_B(self.lora_A(x)) * self.scaling

    def delta(self) -> jax.Array:
        """The update ``lora_B.weight @ lora_A.weight * scaling`` in the base weight's layout
        (``[out, in]``, or ``[in, out]`` for a ``fan_in_fan_out`` layer)."""
        delta = (self.lora_B.weight.value @ self.lora_A.weight.value) * self.scaling
        return (delta.T if self.fan_in_fan_out else delta).astype(self.weight.value.dtype)

    def merged(self) -> Module:
        """The base layer, of its original type, with the update folded into its weight (the
        same ``weight`` Parameter, updated in place, so weights tied to it stay tied)."""
        self.weight.value = self.weight.value + self.delta()
        base = self._base.module
        base.weight = self.weight
        if self.bias is not None:
            base.bias = self.bias
        return base

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
            f"alpha={self.alpha}, dropout={self.lora_dropout.p}, "
            f"fan_in_fan_out={self.fan_in_fan_out}"
        )
