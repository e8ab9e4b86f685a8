"""Transformer encoder: ``TransformerEncoderLayer`` and ``TransformerEncoder``, PyTorch's design.

The submodules carry PyTorch's names (``self_attn``, ``linear1``, ``dropout``, ``linear2``,
``norm1``, ``norm2``, ``dropout1``, ``dropout2``; ``layers.{i}`` and ``norm`` in the encoder),
so a PyTorch state dict loads key for key. Masks keep js's polarity (True = allowed) under the
one name ``mask``; PyTorch's ``src_mask``/``src_key_padding_mask`` (True = blocked) are refused
by name with the conversion in the message, so that a ported call fails loudly instead of
attending to exactly the wrong keys.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import jax
from jax.typing import DTypeLike

from js import Module, ModuleList, Rngs

from . import functional as F
from ._checks import check_bool, check_int, check_probability
from ._dropout import Dropout
from ._factory import float_dtype
from ._linear import Linear
from ._normalization import LayerNorm
from .attention import MultiheadAttention, refuse_torch_masks

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}  # gelu: exact (erf), as PyTorch's F.gelu


def _activation(activation) -> Callable:
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(
                "TransformerEncoderLayer: activation must be 'relu', 'gelu' or a callable, "
                f"got {activation!r}"
            )
        return _ACTIVATIONS[activation]
    if not callable(activation):
        raise TypeError(
            "TransformerEncoderLayer: activation must be 'relu', 'gelu' or a callable, "
            f"got {type(activation).__name__}"
        )
    return activation


def _layer_norm(features: int, eps: float, bias: bool, dtype) -> LayerNorm:
    return LayerNorm(features, eps=eps, bias=bias, dtype=dtype)


class TransformerEncoderLayer(Module):
    r"""Self-attention and feed-forward block, PyTorch's ``nn.TransformerEncoderLayer``::

        post-norm (norm_first=False):  x = norm1(x + sa(x));  x = norm2(x + ff(x))
        pre-norm  (norm_first=True):   x = x + sa(norm1(x));  x = x + ff(norm2(x))
        sa(x) = dropout1(self_attn(x, x, x, mask))
        ff(x) = dropout2(linear2(dropout(activation(linear1(x)))))

    The attention weights are dropped out too (``self_attn``'s ``dropout``). ``batch_first``
    defaults to True here (PyTorch: False).

    Args:
        d_model: ``D``, features of input and output.
        nhead: attention heads; must divide ``D``.
        dim_feedforward: ``F``, hidden features of the feed-forward block.
        dropout: probability for every dropout of the block, in training only; the default
            0.1 means a training-mode call needs ``rngs``.
        activation: ``'relu'``, ``'gelu'`` (exact) or a callable (a function or a Module).
        layer_norm_eps: ``eps`` of ``norm1`` and ``norm2``.
        batch_first: input and output ``[B, T, D]`` (True) or ``[T, B, D]`` (False).
        norm_first: pre-norm (True) or post-norm (False, PyTorch's default).
        bias: whether the linear layers, the attention and the layer norms have biases.
        dtype: parameter dtype (default float32, whatever ``jax_enable_x64`` says).
        rngs: ``js.Rngs`` with a ``params`` stream.

    Call ``layer(src, mask=None, *, rngs=None)``. **``mask`` is True = allowed**, boolean,
    broadcasting to ``[B, heads, T, T]``. PyTorch's ``layer(x, src_mask=causal,
    src_key_padding_mask=pad)`` (True = blocked) is ``layer(x, mask=~causal &
    padding_mask(~pad))`` here; PyTorch's keywords raise a TypeError that says so.
    ``rngs`` (with a ``dropout`` stream) is needed in training with ``dropout > 0``.

    Shape:
        - ``src``: ``[B, T, D]`` (``[T, B, D]`` with ``batch_first=False``); output the same.

    Weights (PyTorch's names and layouts):
        ``self_attn.in_proj_weight`` ``[3D, D]``, ``self_attn.in_proj_bias`` ``[3D]``,
        ``self_attn.out_proj.{weight, bias}`` (as :class:`MultiheadAttention`);
        ``linear1.weight`` ``[F, D]``, ``linear1.bias`` ``[F]``, ``linear2.weight`` ``[D, F]``,
        ``linear2.bias`` ``[D]`` (as :class:`Linear`: ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``,
        zero biases; PyTorch draws the biases uniformly); ``norm1``, ``norm2``: ``weight``
        ones, ``bias`` zeros ``[D]``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> from js.nn.attention import causal_mask
        >>> layer = js.nn.TransformerEncoderLayer(8, 2, 16, rngs=js.Rngs(params=0))
        >>> layer.eval()(jnp.ones((3, 5, 8)), mask=causal_mask(5)).shape
        (3, 5, 8)
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = True,
        norm_first: bool = False,
        bias: bool = True,
        *,
        dtype: DTypeLike | None = None,
        rngs: Rngs,
    ):
        super().__init__()
        name = "TransformerEncoderLayer"
        d_model = check_int(name, "d_model", d_model)
        dim_feedforward = check_int(name, "dim_feedforward", dim_feedforward)
        p = check_probability(name, "dropout", dropout)
        act = _activation(activation)
        batch_first, norm_first, bias = (
            check_bool(name, flag, value)
            for flag, value in (
                ("batch_first", batch_first),
                ("norm_first", norm_first),
                ("bias", bias),
            )
        )
        dtype = float_dtype(name, dtype)
        self.self_attn = MultiheadAttention(
            d_model, nhead, p, bias, batch_first=batch_first, dtype=dtype, rngs=rngs
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias, rngs=rngs, dtype=dtype)
        self.dropout = Dropout(p)
        self.linear2 = Linear(dim_feedforward, d_model, bias, rngs=rngs, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = _layer_norm(d_model, layer_norm_eps, bias, dtype)
        self.norm2 = _layer_norm(d_model, layer_norm_eps, bias, dtype)
        self.dropout1, self.dropout2 = Dropout(p), Dropout(p)
        self.activation = act
        self.batch_first = batch_first

    def extra_repr(self) -> str:
        act = getattr(self.activation, "__name__", type(self.activation).__name__)
        text = f"activation={act}, norm_first={self.norm_first}"
        return text + ("" if self.batch_first else ", batch_first=False")

    def _sa_block(self, x, mask, rngs):
        return self.dropout1(self.self_attn(x, x, x, mask, rngs=rngs), rngs=rngs)

    def _ff_block(self, x, rngs):
        hidden = self.dropout(self.activation(self.linear1(x)), rngs=rngs)  # [..., F]
        return self.dropout2(self.linear2(hidden), rngs=rngs)

    def forward(
        self,
        src: jax.Array,
        mask: jax.Array | None = None,
        *,
        rngs: Rngs | None = None,
        src_mask: jax.Array | None = None,
        src_key_padding_mask: jax.Array | None = None,
    ) -> jax.Array:
        refuse_torch_masks(
            "TransformerEncoderLayer", src_mask=src_mask, src_key_padding_mask=src_key_padding_mask
        )
        if self.training and self.dropout.p and rngs is None:
            raise ValueError(
                f"TransformerEncoderLayer: dropout={self.dropout.p} in training mode needs "
                "random keys. Fix: pass rngs=rngs with js.Rngs(dropout=seed), call "
                "model.eval(), or build the layer with dropout=0.0"
            )
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), mask, rngs)
            return x + self._ff_block(self.norm2(x), rngs)
        x = self.norm1(x + self._sa_block(x, mask, rngs))
        return self.norm2(x + self._ff_block(x, rngs))


class TransformerEncoder(Module):
    r"""A stack of ``num_layers`` copies of ``encoder_layer``, then ``norm`` (PyTorch's design).

    As in PyTorch, each layer is a deep copy of ``encoder_layer``: all start from the *same*
    weights (re-initialise them, e.g. with ``apply``, if that is not wanted).

    Args:
        encoder_layer: a :class:`TransformerEncoderLayer` (or any Module with its call).
        num_layers: copies, ``>= 1``.
        norm: a Module applied to the output (PyTorch: ``LayerNorm(d_model)`` with
            ``norm_first=True``), or None.
        enable_nested_tensor: accepted and ignored (PyTorch's sparse fast path for padded
            batches; the values are the same except at padded positions, which PyTorch zeros).
        mask_check: accepted and ignored (it guards that fast path).

    Call ``encoder(src, mask=None, *, rngs=None)``. **``mask`` is True = allowed** (PyTorch's
    ``mask`` and ``src_key_padding_mask`` are True = blocked): PyTorch's ``encoder(x,
    mask=causal, src_key_padding_mask=pad)`` is ``encoder(x, mask=~causal &
    padding_mask(~pad))`` here; ``src_key_padding_mask`` raises a TypeError that says so,
    and a float mask (PyTorch's additive ``-inf`` masks) a TypeError from the mask check.

    Shape:
        - ``src``: as the layer's, ``[B, T, D]`` (``[T, B, D]`` with ``batch_first=False``).

    Weights:
        ``layers.{i}.*`` as the layer's, and ``norm.*``, PyTorch's keys.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> layer = js.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, rngs=js.Rngs(params=0))
        >>> encoder = js.nn.TransformerEncoder(layer, 2, norm=js.nn.LayerNorm(8))
        >>> encoder(jnp.ones((3, 5, 8))).shape, sorted(encoder.state_dict())[0]
        ((3, 5, 8), 'layers.0.linear1.bias')
    """

    def __init__(
        self,
        encoder_layer: Module,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ):
        super().__init__()
        name = "TransformerEncoder"
        if not isinstance(encoder_layer, Module):
            raise TypeError(
                f"{name}: encoder_layer must be a Module (a TransformerEncoderLayer), "
                f"got {type(encoder_layer).__name__}"
            )
        if norm is not None and not isinstance(norm, Module):
            raise TypeError(f"{name}: norm must be a Module or None, got {type(norm).__name__}")
        for flag, value in (
            ("enable_nested_tensor", enable_nested_tensor),
            ("mask_check", mask_check),
        ):
            check_bool(name, flag, value)
        self.num_layers = check_int(name, "num_layers", num_layers)
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.norm = norm

    def forward(
        self,
        src: jax.Array,
        mask: jax.Array | None = None,
        *,
        rngs: Rngs | None = None,
        src_key_padding_mask: jax.Array | None = None,
    ) -> jax.Array:
        refuse_torch_masks("TransformerEncoder", src_key_padding_mask=src_key_padding_mask)
        x = src
        for layer in self.layers:
            x = layer(x, mask, rngs=rngs)
        return x if self.norm is None else self.norm(x)
