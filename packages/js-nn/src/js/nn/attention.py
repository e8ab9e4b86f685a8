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

from js import Module, Parameter

from ._checks import check_int
from ._linear import Linear


def causal_mask(T: int) -> jax.Array:
    """Allow each query position ``t`` to attend to keys ``0..t``: ``[1, 1, T, T]`` bool.

    Example:
        >>> from js.nn.attention import causal_mask
        >>> causal_mask(3)[0, 0].astype(int).tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    T = check_int("causal_mask", "T", T)
    return jnp.tril(jnp.ones((T, T), bool))[None, None]  # [1, 1, T, T]


def padding_mask(valid) -> jax.Array:
    """Allow only valid key positions: ``valid [B, T]`` bool -> ``[B, 1, 1, T]`` bool.

    Only keys are masked: padded *query* positions still produce outputs, which the loss must
    mask out itself.

    Example:
        >>> import jax.numpy as jnp
        >>> from js.nn.attention import padding_mask
        >>> padding_mask(jnp.array([[True, True, False]])).shape
        (1, 1, 1, 3)
    """
    valid = valid if isinstance(valid, jax.Array) else np.asarray(valid)
    if valid.dtype != bool:
        raise TypeError(f"padding_mask: valid must be boolean [B, T], got dtype {valid.dtype}")
    if valid.ndim != 2:
        raise ValueError(f"padding_mask: expected valid [B, T], got shape {list(valid.shape)}")
    return jnp.asarray(valid)[:, None, None, :]  # [B, 1, 1, T]


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
            np.broadcast_shapes(mask.shape, scores_shape) == tuple(scores_shape)
        )
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"{owner}: mask of shape {list(mask.shape)} does not broadcast to the scores "
            f"[B, heads, Tq, Tk] = {list(scores_shape)}"
        )
    return mask


def scaled_dot_product_attention(q, k, v, mask=None):
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


def _attend(q, k, v, mask):
    """``scaled_dot_product_attention`` for a mask already checked (or None)."""
    scores = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])  # [..., Tq, Tk]
    if mask is None:
        weights = jax.nn.softmax(scores, axis=-1)
    else:
        # The smallest finite value, not -inf: an all-masked row stays finite (uniform), then
        # its weights are zeroed, and no NaN enters the forward or backward pass. Masked keys
        # of a row with an allowed key already get exactly 0 (exp underflows), so only the
        # all-masked rows are zeroed, [..., Tq, 1]: a full-size select over the weights cost
        # 15-45 % of attention's forward and backward on XLA:CPU (docs/benchmarks.md).
        scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
        alive = jnp.any(mask, axis=-1, keepdims=True)  # [..., Tq or 1, 1]
        weights = jax.nn.softmax(scores, axis=-1)
        return jnp.where(alive, weights @ v, 0), jnp.where(alive, weights, 0)
    return weights @ v, weights


class _Projection(Linear):
    """MultiheadAttention's ``out_proj``: a square ``Linear`` (PyTorch's layout and init)."""

    def __init__(self, features: int, *, bias: bool, rngs):
        super().__init__(features, features, bias, rngs=rngs)


class MultiheadAttention(Module):
    r"""Multi-head attention with PyTorch's parameters (``batch_first=True``)::

        q, k, v = query W_q^T + b_q, key W_k^T + b_k, value W_v^T + b_v   (W = in_proj_weight)
        head_i  = softmax(q_i k_i^T / sqrt(D / heads), masked) v_i
        output  = concat(head_1, ..., head_heads) out_proj.weight^T + out_proj.bias

    A query row whose mask allows no key, in any head, outputs exactly zero (``out_proj.bias``
    included) with zero weights and finite gradients. Padded *query* positions are not zeroed
    by a padding mask (it masks keys): mask them out of the loss. Dropout on the weights,
    ``kdim``/``vdim`` and bias_k/zero_attn are not implemented.

    Args:
        embed_dim: ``D``, features of query, key, value and output.
        num_heads: ``heads``; must divide ``D``, each head has ``D / heads`` features.
        bias: whether to add ``in_proj_bias`` and ``out_proj.bias``.
        rngs: ``js.Rngs`` with a ``params`` stream.

    Call ``mha(query, key, value, mask=None, need_weights=False)``. ``mask`` is boolean,
    True = allowed, broadcasting to ``[B, heads, Tq, Tk]`` (see :func:`causal_mask`,
    :func:`padding_mask`). ``need_weights`` is a Python bool, static under compilation
    (``js.jit(..., static_argnames="need_weights")``).

    Shape:
        - query: ``[B, Tq, D]``; key and value: ``[B, Tk, D]``.
        - output: ``[B, Tq, D]``, or ``(output, weights [B, heads, Tq, Tk])`` with
          ``need_weights=True`` (per head; PyTorch's default averages them over heads).

    Weights (PyTorch's names and layout; init as PyTorch):
        ``in_proj_weight``: ``[3D, D]``, rows ``q, k, v``, Xavier uniform
        ``U(-sqrt(6 / 4D), sqrt(6 / 4D))``. ``in_proj_bias``: ``[3D]``, zeros.
        ``out_proj.weight``: ``[D, D]``, ``U(-1/sqrt(D), 1/sqrt(D))``. ``out_proj.bias``:
        ``[D]``, zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> from js.nn.attention import causal_mask
        >>> mha = js.nn.MultiheadAttention(8, 2, rngs=js.Rngs(params=0))
        >>> x = jnp.ones((3, 5, 8))  # [B, T, D]
        >>> out, weights = mha(x, x, x, mask=causal_mask(5), need_weights=True)
        >>> out.shape, weights.shape
        ((3, 5, 8), (3, 2, 5, 5))
    """

    def __init__(self, embed_dim: int, num_heads: int, *, bias: bool = True, rngs):
        super().__init__()
        embed_dim = check_int("MultiheadAttention", "embed_dim", embed_dim)
        num_heads = check_int("MultiheadAttention", "num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiheadAttention: embed_dim {embed_dim} is not divisible by num_heads "
                f"{num_heads}. Fix: choose num_heads among the divisors of embed_dim"
            )
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        bound = math.sqrt(6.0 / (embed_dim + 3 * embed_dim))  # xavier_uniform_ on [3D, D]
        self.in_proj_weight = Parameter(jax.random.uniform(
            rngs.next("params"), (3 * embed_dim, embed_dim), jnp.float32, -bound, bound))
        if bias:
            self.in_proj_bias = Parameter(jnp.zeros(3 * embed_dim, jnp.float32))
        self.out_proj = _Projection(embed_dim, bias=bias, rngs=rngs)

    def extra_repr(self) -> str:
        bias = "" if hasattr(self, "in_proj_bias") else ", bias=False"
        return f"{self.embed_dim}, {self.num_heads}{bias}"

    def _check_inputs(self, query, key, value) -> tuple[int, int, int]:
        D = self.embed_dim
        shapes = {name: list(jnp.shape(x)) for name, x in
                  (("query", query), ("key", key), ("value", value))}
        for name, shape in shapes.items():
            if len(shape) != 3 or shape[2] != D:
                dims = "[B, Tq, D]" if name == "query" else "[B, Tk, D]"
                raise ValueError(
                    f"MultiheadAttention: expected {name} {dims} with D = embed_dim = {D}, "
                    f"got shape {shape}"
                )
        if shapes["key"] != shapes["value"] or shapes["query"][0] != shapes["key"][0]:
            raise ValueError(
                "MultiheadAttention: expected key and value of one shape [B, Tk, D] and query "
                f"of the same B, got query {shapes['query']}, key {shapes['key']}, "
                f"value {shapes['value']}"
            )
        return shapes["query"][0], shapes["query"][1], shapes["key"][1]

    def _split_heads(self, x, index: int):
        """``x [B, T, D]`` projected by in_proj slice ``index`` (q, k, v): ``[B, heads, T, d]``."""
        D = self.embed_dim
        y = x @ self.in_proj_weight.value[index * D : (index + 1) * D].T
        if hasattr(self, "in_proj_bias"):
            y = y + self.in_proj_bias.value[index * D : (index + 1) * D]
        B, T, _ = y.shape
        return y.reshape(B, T, self.num_heads, self.head_dim).transpose(0, 2, 1, 3)

    def forward(self, query, key, value, mask=None, need_weights=False):
        B, Tq, Tk = self._check_inputs(query, key, value)
        if not isinstance(need_weights, bool):
            raise TypeError(
                "MultiheadAttention: need_weights must be a Python bool (it selects the return "
                f"structure), got {type(need_weights).__name__}. Fix: under js.jit, pass "
                "static_argnames='need_weights'"
            )
        scores_shape = (B, self.num_heads, Tq, Tk)
        if mask is not None:
            mask = _check_mask(mask, scores_shape, "MultiheadAttention")
        q, k, v = (self._split_heads(x, i) for i, x in enumerate((query, key, value)))
        heads, weights = _attend(q, k, v, mask)  # [B, heads, Tq, d]
        output = self.out_proj(heads.transpose(0, 2, 1, 3).reshape(B, Tq, self.embed_dim))
        if mask is not None:  # a query row with no allowed key in any head outputs zero
            alive = jnp.any(jnp.broadcast_to(mask, scores_shape), axis=(1, 3))  # [B, Tq]
            output = jnp.where(alive[..., None], output, 0)
        return (output, weights) if need_weights else output
