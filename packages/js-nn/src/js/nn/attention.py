"""Attention: boolean masks, scaled dot-product attention and ``MultiheadAttention``.

Masks are boolean and **True means allowed** (as in flax and in PyTorch's
``F.scaled_dot_product_attention``; PyTorch's ``nn.MultiheadAttention`` uses the opposite,
True = blocked, for ``attn_mask`` and ``key_padding_mask``: invert such masks with ``~``). A mask
broadcasts against the scores ``[B, heads, Tq, Tk]``. A query row with no allowed key gets zero
weights and a zero output (PyTorch gives NaN there), and its gradients are finite.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from js import Module, Parameter, Rngs

from . import _random
from ._checks import check_bool, check_int, check_probability, dropout_key
from ._factory import float_dtype
from ._kv_cache import KVCache
from ._linear import Linear
from ._masks import causal_mask as causal_mask
from ._masks import decoder_mask as decoder_mask
from ._masks import padding_mask as padding_mask
from ._sdpa import attend


def _check_mask(mask, scores_shape: tuple[int, ...], owner: str):
    """The mask as an array, after checking it is boolean and broadcasts to the scores."""
    mask = mask if isinstance(mask, jax.Array) else np.asarray(mask)
    if mask.dtype != bool:
        raise TypeError(
            f"{owner}: mask must be boolean (True = allowed), got dtype {mask.dtype}. "
            "Fix: build it with causal_mask/padding_mask or a comparison"
        )
    try:
        fits = mask.ndim <= len(scores_shape) and (
            jnp.broadcast_shapes(mask.shape, scores_shape) == tuple(scores_shape)  # symbolic B too
        )
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"{owner}: mask of shape {list(mask.shape)} does not broadcast to the scores "
            f"[B, heads, Tq, Tk] = {list(scores_shape)}"
        )
    return mask


def scaled_dot_product_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.typing.ArrayLike | None = None
) -> tuple[jax.Array, jax.Array]:
    """``softmax(q k^T / sqrt(d), masked) v`` -> ``(output, weights)``.

    Masked scores are excluded from the softmax and their weights are exactly zero; a row with
    no allowed key has all-zero weights and output, with finite gradients.

    Args:
        q: queries ``[..., Tq, d]``.
        k: keys ``[..., Tk, d]``.
        v: values ``[..., Tk, dv]``.
        mask: None or boolean, True = allowed, broadcasting to the scores ``[..., Tq, Tk]``.

    Shape:
        - output: ``[..., Tq, dv]``; weights: ``[..., Tq, Tk]``.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.nn.attention import scaled_dot_product_attention
        >>> q = k = v = jnp.ones((1, 2, 3, 4))  # [B, heads, T, d]
        >>> out, weights = scaled_dot_product_attention(q, k, v, jnp.array([True, True, False]))
        >>> out.shape, weights[0, 0, 0].tolist()
        ((1, 2, 3, 4), [0.5, 0.5, 0.0])
    """
    scores_shape = (*jnp.shape(q)[:-1], jnp.shape(k)[-2])
    if mask is not None:
        mask = _check_mask(mask, scores_shape, "scaled_dot_product_attention")
    return _attend(q, k, v, mask)


def _attend(q, k, v, mask, *, dropout: float = 0.0, key=None):
    """``scaled_dot_product_attention`` for a mask already checked (or None), through js's one
    kernel (``F.scaled_dot_product_attention``'s); with a ``key``, the weights are dropped out
    (``dropout``) before they weigh ``v`` and are returned so, as PyTorch returns them."""
    p = dropout if key is not None else 0.0
    output, weights = attend(q, k, v, mask, dropout_p=p, dropout_key=key, with_weights=True)
    assert weights is not None  # with_weights=True
    return output, weights


def _alive_rows(mask, B: int, Tq: int) -> jax.Array:
    """``[B, Tq]``: whether query row ``(b, t)`` may attend to some key in some head; reduced
    on the mask's own shape before broadcasting (a causal mask is ``[1, 1, T, T]``)."""
    mask = jnp.asarray(mask)
    mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)  # [B|1, heads|1, Tq|1, Tk|1]
    return jnp.broadcast_to(jnp.any(mask, axis=(1, 3)), (B, Tq))


def refuse_torch_masks(owner: str, **masks: object) -> None:
    """Refuse PyTorch's mask keywords, whose polarity (True = blocked) is the opposite of ours."""
    for name, value in masks.items():
        if value is not None:
            raise TypeError(
                f"{owner}: {name} is PyTorch's mask (True = blocked, or additive floats); js "
                "masks are boolean with True = allowed, passed as mask=. Fix: mask = "
                "padding_mask(~key_padding_mask) for a key padding mask [B, Tk], "
                "~attn_mask for a boolean attn_mask [Tq, Tk] (attn_mask == 0 for a float one), "
                "combined with & (see docs/porting.md)"
            )


def _xavier_uniform(key, rows: int, cols: int, dtype) -> jax.Array:
    bound = math.sqrt(6.0 / (rows + cols))  # torch.nn.init.xavier_uniform_ on [rows, cols]
    return _random.uniform(key, (rows, cols), -bound, bound, dtype)


class _Projection(Linear):
    """MultiheadAttention's ``out_proj``: a square ``Linear`` (PyTorch's layout and init)."""

    def __init__(self, features: int, *, bias: bool, dtype: DTypeLike | None, rngs: Rngs):
        super().__init__(features, features, bias, rngs=rngs, dtype=dtype)


class MultiheadAttention(Module):
    r"""Multi-head attention with PyTorch's parameters and argument order::

        q, k, v = query W_q^T + b_q, key W_k^T + b_k, value W_v^T + b_v
        head_i  = dropout(softmax(q_i k_i^T / sqrt(D / heads), masked)) v_i
        output  = concat(head_1, ..., head_heads) out_proj.weight^T + out_proj.bias

    A query row whose mask allows no key, in any head, outputs exactly zero (``out_proj.bias``
    included) with zero weights and finite gradients. Padded *query* positions are not zeroed
    by a padding mask (it masks keys): mask them out of the loss. ``add_bias_kv`` and
    ``add_zero_attn`` are not implemented.

    **Masks are True = allowed** (PyTorch's ``attn_mask``/``key_padding_mask`` are True =
    blocked): PyTorch's ``mha(q, k, v, key_padding_mask=pad, attn_mask=causal)`` is
    ``mha(q, k, v, mask=padding_mask(~pad) & ~causal)`` here; passing PyTorch's keywords
    raises a TypeError that says so. PyTorch always returns a pair and by default averages
    the weights over heads; here ``need_weights=False`` (the default) returns the output
    alone and ``need_weights=True`` the pair with per-head weights (``weights.mean(1)`` is
    PyTorch's default).

    Args:
        embed_dim: ``D``, features of query and output.
        num_heads: ``heads``; must divide ``D``, each head has ``D / heads`` features.
        dropout: probability of zeroing each attention weight, in training only (the call
            then needs ``rngs``); the returned weights are the dropped ones, as in PyTorch.
        bias: whether to add ``in_proj_bias`` and ``out_proj.bias``.
        add_bias_kv: only False (True raises NotImplementedError).
        add_zero_attn: only False (True raises NotImplementedError).
        kdim: features of key (default ``D``).
        vdim: features of value (default ``D``).
        batch_first: inputs and output ``[B, T, ...]`` (True, the default here; PyTorch's is
            False) or ``[T, B, ...]`` (False). Masks and weights are batch first either way.
        dtype: parameter dtype (default float32, whatever ``jax_enable_x64`` says).
        rngs: ``js.Rngs`` with a ``params`` stream.

    Call ``mha(query, key, value, mask=None, need_weights=False, *, rngs=None)``. ``mask``
    is boolean, True = allowed, broadcasting to ``[B, heads, Tq, Tk]`` (see
    :func:`causal_mask`, :func:`padding_mask`). ``need_weights`` is a Python bool, static
    under compilation (``js.jit(..., static_argnames="need_weights")``). ``rngs`` (with a
    ``dropout`` stream, one key per call) is needed only in training with ``dropout > 0``.
    ``cache`` (a :class:`js.nn.KVCache`, after the model's ``cache.begin(Tq, ...)``) decodes
    self-attention incrementally: this call's keys and values are stored as cache layer
    ``layer`` and the queries attend to every cached token (``mask``, if given, must then
    broadcast to ``[B, heads, Tq, max_length]``).

    Shape:
        - query: ``[B, Tq, D]``; key: ``[B, Tk, kdim]``; value: ``[B, Tk, vdim]``
          (time first, ``[Tq, B, D]`` etc., with ``batch_first=False``).
        - output: ``[B, Tq, D]`` (``[Tq, B, D]``), or ``(output, weights [B, heads, Tq, Tk])``
          with ``need_weights=True``.

    Weights (PyTorch's names and layout; init as PyTorch):
        With ``kdim = vdim = D``: ``in_proj_weight`` ``[3D, D]``, rows ``q, k, v``, Xavier
        uniform ``U(-sqrt(6 / 4D), sqrt(6 / 4D))``. Otherwise ``q_proj_weight`` ``[D, D]``,
        ``k_proj_weight`` ``[D, kdim]``, ``v_proj_weight`` ``[D, vdim]``, each Xavier uniform
        over its own shape. ``in_proj_bias``: ``[3D]``, zeros. ``out_proj.weight``: ``[D, D]``,
        ``U(-1/sqrt(D), 1/sqrt(D))``. ``out_proj.bias``: ``[D]``, zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> from js.nn.attention import causal_mask
        >>> mha = js.nn.MultiheadAttention(8, 2, kdim=6, rngs=js.Rngs(params=0))
        >>> x, memory = jnp.ones((3, 5, 8)), jnp.ones((3, 4, 6))  # [B, Tq, D], [B, Tk, kdim]
        >>> out, weights = mha(x, memory, x[:, :4], need_weights=True)
        >>> out.shape, weights.shape
        ((3, 5, 8), (3, 2, 5, 4))
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = True,
        *,
        dtype: DTypeLike | None = None,
        rngs: Rngs,
    ):
        super().__init__()
        name = "MultiheadAttention"
        embed_dim = check_int(name, "embed_dim", embed_dim)
        num_heads = check_int(name, "num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiheadAttention: embed_dim {embed_dim} is not divisible by num_heads "
                f"{num_heads}. Fix: choose num_heads among the divisors of embed_dim"
            )
        for flag, value in (("add_bias_kv", add_bias_kv), ("add_zero_attn", add_zero_attn)):
            if check_bool(name, flag, value):
                raise NotImplementedError(
                    f"MultiheadAttention: {flag}=True is not implemented. Fix: pass {flag}=False"
                )
        self.dropout = check_probability(name, "dropout", dropout)
        self.batch_first = check_bool(name, "batch_first", batch_first)
        bias = check_bool(name, "bias", bias)
        self.kdim = embed_dim if kdim is None else check_int(name, "kdim", kdim)
        self.vdim = embed_dim if vdim is None else check_int(name, "vdim", vdim)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        dtype = float_dtype(name, dtype)
        self._init_projections(rngs, bias, dtype)
        self.out_proj = _Projection(embed_dim, bias=bias, dtype=dtype, rngs=rngs)

    def _init_projections(self, rngs, bias: bool, dtype) -> None:
        D = self.embed_dim
        if self._same_dims:  # PyTorch's one packed [3D, D] matrix
            self.in_proj_weight = Parameter(_xavier_uniform(rngs.next("params"), 3 * D, D, dtype))
        else:  # PyTorch's q_proj_weight, k_proj_weight, v_proj_weight (in this order)
            for part, cols in (("q", D), ("k", self.kdim), ("v", self.vdim)):
                w = _xavier_uniform(rngs.next("params"), D, cols, dtype)
                setattr(self, f"{part}_proj_weight", Parameter(w))
        if bias:
            self.in_proj_bias = Parameter(_random.zeros((3 * D,), dtype))

    @property
    def _same_dims(self) -> bool:
        return self.kdim == self.embed_dim and self.vdim == self.embed_dim

    def extra_repr(self) -> str:
        text = f"{self.embed_dim}, {self.num_heads}"
        text += f", dropout={self.dropout}" if self.dropout else ""
        text += "" if hasattr(self, "in_proj_bias") else ", bias=False"
        text += "" if self.kdim == self.embed_dim else f", kdim={self.kdim}"
        text += "" if self.vdim == self.embed_dim else f", vdim={self.vdim}"
        return text + ("" if self.batch_first else ", batch_first=False")

    def _check_inputs(self, query, key, value) -> tuple[int, int, int]:
        """``(B, Tq, Tk)`` after checking the three inputs' shapes (in the caller's layout)."""
        sizes = {
            "query": ("Tq", self.embed_dim),
            "key": ("Tk", self.kdim),
            "value": ("Tk", self.vdim),
        }
        labels = {"query": ("D", "embed_dim"), "key": ("Dk", "kdim"), "value": ("Dv", "vdim")}
        shapes = {
            name: list(jnp.shape(x))
            for name, x in (("query", query), ("key", key), ("value", value))
        }
        for name, shape in shapes.items():
            steps, size = sizes[name]
            label, arg = ("D", "embed_dim") if size == self.embed_dim else labels[name]
            if len(shape) != 3 or shape[2] != size:
                dims = f"[B, {steps}, {label}]" if self.batch_first else f"[{steps}, B, {label}]"
                raise ValueError(
                    f"MultiheadAttention: expected {name} {dims} with {label} = {arg} = "
                    f"{size}, got shape {shape}"
                )
        b, t = (0, 1) if self.batch_first else (1, 0)
        q, k, v = shapes["query"], shapes["key"], shapes["value"]
        if k[:2] != v[:2] or q[b] != k[b]:
            dims = "[B, Tk, ...]" if self.batch_first else "[Tk, B, ...]"
            raise ValueError(
                f"MultiheadAttention: expected key and value of one shape {dims} (up to their "
                f"feature sizes) and query of the same B, got query {q}, key {k}, value {v}"
            )
        return q[b], q[t], k[t]

    def _project(self, query, key, value):
        """q, k, v ``[B, heads, T, d]``. Self-attention (one input for all three) projects with
        one ``[D, 3D]`` matmul, as PyTorch's fast path does: the same numbers as three slices,
        and a smaller program (no slice of the weight, no pad of its gradient)."""
        if not (query is key is value and self._same_dims):
            return tuple(self._split_heads(x, i) for i, x in enumerate((query, key, value)))
        y = query @ self.in_proj_weight.value.T  # [B, T, 3D]
        if hasattr(self, "in_proj_bias"):
            y = y + self.in_proj_bias.value
        B, T, _ = y.shape
        return tuple(
            part.reshape(B, T, self.num_heads, self.head_dim).transpose(0, 2, 1, 3)
            for part in jnp.split(y, 3, axis=-1)  # one split: its gradient is one concatenate
        )

    def _split_heads(self, x, index: int):
        """``x [B, T, ·]`` projected for part ``index`` (q, k, v): ``[B, heads, T, d]``."""
        D = self.embed_dim
        if self._same_dims:
            w = self.in_proj_weight.value[index * D : (index + 1) * D]  # [D, D]
        else:
            w = getattr(self, "qkv"[index] + "_proj_weight").value  # [D, D], [D, kdim], [D, vdim]
        y = x @ w.T
        if hasattr(self, "in_proj_bias"):
            y = y + self.in_proj_bias.value[index * D : (index + 1) * D]
        B, T, _ = y.shape
        return y.reshape(B, T, self.num_heads, self.head_dim).transpose(0, 2, 1, 3)

    def forward(
        self,
        query: jax.Array,
        key: jax.Array,
        value: jax.Array,
        mask: jax.typing.ArrayLike | None = None,
        need_weights: bool = False,
        *,
        rngs: Rngs | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        key_padding_mask: jax.Array | None = None,
        attn_mask: jax.Array | None = None,
    ) -> jax.Array | tuple[jax.Array, jax.Array]:
        refuse_torch_masks(
            "MultiheadAttention", key_padding_mask=key_padding_mask, attn_mask=attn_mask
        )
        B, Tq, Tk = self._check_inputs(query, key, value)
        if cache is not None:  # keys are every cached slot (this call's tokens written first)
            if not (self.batch_first and Tk == Tq):
                raise ValueError(
                    "MultiheadAttention: cache= decodes self-attention: key and value must be "
                    f"the new tokens (Tk = Tq, got Tq={Tq}, Tk={Tk}) with batch_first=True"
                )
            Tk = cache.max_length
        if not isinstance(need_weights, bool):
            raise TypeError(
                "MultiheadAttention: need_weights must be a Python bool (it selects the return "
                f"structure), got {type(need_weights).__name__}. Fix: under js.jit, pass "
                "static_argnames='need_weights'"
            )
        scores_shape = (B, self.num_heads, Tq, Tk)
        if mask is not None:
            mask = _check_mask(mask, scores_shape, "MultiheadAttention")
        drop = None
        if self.training and self.dropout:
            drop = dropout_key(
                "MultiheadAttention",
                rngs,
                why=f": dropout={self.dropout}",
                fix="pass rngs=rngs in the call",
            )
        if not self.batch_first:  # [T, B, ·] -> [B, T, ·]
            query, key, value = (jnp.swapaxes(x, 0, 1) for x in (query, key, value))
        q, k, v = self._project(query, key, value)  # [B, heads, T, d] each
        if cache is not None:
            k, v = cache.update(layer, k, v)  # [B, heads, max_length, d]
            allowed = cache.mask(Tq)  # [B, 1, Tq, max_length]
            mask = allowed if mask is None else mask & allowed
        heads, weights = _attend(q, k, v, mask, dropout=self.dropout, key=drop)  # [B, h, Tq, d]
        output = self.out_proj(heads.transpose(0, 2, 1, 3).reshape(B, Tq, self.embed_dim))
        if mask is not None:  # a query row with no allowed key in any head outputs zero
            output = jnp.where(_alive_rows(mask, B, Tq)[..., None], output, 0)
        if not self.batch_first:
            output = jnp.swapaxes(output, 0, 1)  # [Tq, B, D]
        return (output, weights) if need_weights else output
