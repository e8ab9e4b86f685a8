"""``scaled_dot_product_attention`` with PyTorch's signature and semantics (``F.``'s door).

One explicit formulation for every case, in PyTorch's ``[..., heads, L, E]`` layout: scores
in float32 (half inputs too, as PyTorch's CPU kernel and ``jax.nn.dot_product_attention``
accumulate), the mask, a softmax, the weighted sum. A query row with no allowed key outputs 0
with zero gradients (PyTorch 2.13's "safe softmax"). Grouped-query attention groups the query
heads over their shared key/value head instead of repeating keys and values.

``jax.nn.dot_product_attention`` is not used underneath: on XLA:CPU, its implementation for
every device but cuDNN's, it transposes to ``[B, T, N, H]`` and vmaps over the groups, and
took 1.2-2.5x the time of this formulation, forward and backward, at GPT-2-small shapes
(B 1-8, H 12, L 128-1024, D 64, under jax.jit); it also gives NaN, not 0, for a row of
``-inf``, and uniform weights for a fully masked row. Compiled, this formulation is the
textbook one (``softmax(where(mask, q k^T / sqrt(E), min)) v``): the same fusions.
"""

from __future__ import annotations

import functools
import math
import numbers

import jax
import jax.numpy as jnp

from ._checks import check_probability
from ._masks import allowed

_NAME = "scaled_dot_product_attention"


@jax.custom_jvp
def _safe_softmax(scores: jax.Array) -> jax.Array:
    """Softmax over the last axis where ``-inf`` marks an excluded entry; a row with every
    entry excluded gets all-zero weights (``jax.nn.softmax`` would give NaN)."""
    top = jnp.max(scores, axis=-1, keepdims=True)
    top = jnp.where(top == -jnp.inf, 0.0, top)  # an all-excluded row: exp(-inf) = 0 below
    exps = jnp.exp(scores - top)
    total = jnp.sum(exps, axis=-1, keepdims=True)
    return exps / jnp.where(total == 0.0, 1.0, total)


@_safe_softmax.defjvp
def _safe_softmax_jvp(primals, tangents):
    # softmax's own rule, dy = y * (dx - sum(y * dx)), written so that an excluded entry
    # (y = 0, dx possibly NaN from -inf arithmetic upstream) contributes exactly 0.
    (scores,), (dscores,) = primals, tangents
    weights = _safe_softmax(scores)
    dscores = jnp.where(weights == 0.0, 0.0, dscores)
    return weights, weights * (dscores - jnp.sum(weights * dscores, axis=-1, keepdims=True))


def _shape_text(x) -> str:
    return str(list(jnp.shape(x)))


def _check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, dropout_key):
    """Every argument checked before any computation; returns the query heads' group size."""
    arrays = {"query": query, "key": key, "value": value}
    for name, x in arrays.items():
        if not hasattr(x, "dtype") or not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(
                f"{_NAME}: {name} must be a floating-point array, got "
                f"{getattr(x, 'dtype', type(x).__name__)}"
            )
        if x.ndim < 2:
            raise ValueError(
                f"{_NAME}: {name} must be at least 2-D [..., L or S, E], got {_shape_text(x)}"
            )
    if not query.dtype == key.dtype == value.dtype:
        raise TypeError(
            f"{_NAME}: query, key and value must have one dtype, got {query.dtype}, "
            f"{key.dtype} and {value.dtype}. Fix: cast them to one dtype"
        )
    shapes = f"query {_shape_text(query)}, key {_shape_text(key)}, value {_shape_text(value)}"
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"{_NAME}: query and key must have the same last dimension E, got {shapes}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"{_NAME}: key and value must have the same length S, got {shapes}")
    groups = 1
    heads_q = query.shape[-3] if query.ndim >= 3 else 1
    heads_kv = key.shape[-3] if key.ndim >= 3 else 1
    if enable_gqa and heads_q != heads_kv:
        if key.ndim < 3 or value.ndim < 3 or query.ndim < 3 or value.shape[-3] != heads_kv:
            raise ValueError(
                f"{_NAME}: enable_gqa needs query [..., Hq, L, E], key [..., Hkv, S, E] and "
                f"value [..., Hkv, S, Ev] with one Hkv, got {shapes}"
            )
        if heads_q % heads_kv:
            raise ValueError(
                f"{_NAME}: with enable_gqa, the query heads Hq={heads_q} must be a multiple of "
                f"the key/value heads Hkv={heads_kv}, got {shapes}"
            )
        groups = heads_q // heads_kv
    leading = [x.shape[:-2] for x in (query, key, value)]
    if groups > 1:
        leading = [x.shape[:-3] for x in (query, key, value)]
    try:
        batch = jnp.broadcast_shapes(*leading)
    except ValueError:
        hint = (
            " (query and key/value head counts differ: pass enable_gqa=True for grouped-query "
            "attention)"
            if heads_q != heads_kv and not enable_gqa
            else ""
        )
        raise ValueError(
            f"{_NAME}: the leading dimensions of query, key and value do not broadcast, got "
            f"{shapes}{hint}"
        ) from None
    scores_shape = (*batch, *((heads_q,) if groups > 1 else ()), query.shape[-2], key.shape[-2])
    if attn_mask is not None:
        if not hasattr(attn_mask, "dtype"):
            raise TypeError(f"{_NAME}: attn_mask must be an array, got {type(attn_mask).__name__}")
        if attn_mask.dtype != jnp.bool_ and not jnp.issubdtype(attn_mask.dtype, jnp.floating):
            raise TypeError(
                f"{_NAME}: attn_mask must be bool (True = take part) or floating (added to the "
                f"scores), got {attn_mask.dtype}"
            )
        try:
            fits = jnp.broadcast_shapes(attn_mask.shape, scores_shape) == scores_shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"{_NAME}: attn_mask of shape {_shape_text(attn_mask)} does not broadcast to "
                f"the attention scores {list(scores_shape)} [..., L, S] ({shapes})"
            )
        if is_causal:
            raise ValueError(
                f"{_NAME}: attn_mask and is_causal=True were both given (PyTorch refuses this "
                "too). Fix: pass one of them, e.g. attn_mask & causal, with causal = "
                "jnp.tril(jnp.ones((L, S), bool))"
            )
    if not isinstance(is_causal, bool):
        raise TypeError(f"{_NAME}: is_causal must be True or False, got {is_causal!r}")
    check_probability(_NAME, "dropout_p", dropout_p)
    if dropout_p > 0 and dropout_key is None:
        raise ValueError(
            f"{_NAME}: dropout_p={dropout_p} needs a random key. Fix: pass "
            "dropout_key=rngs.next('dropout'), or dropout_p=0.0 (e.g. "
            "dropout_p=p if self.training else 0.0)"
        )
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise TypeError(f"{_NAME}: scale must be a float or None, got {scale!r}")
    return groups


def _grouped(x: jax.Array, groups: int, heads_axis_size: int) -> jax.Array:
    """``[..., Hq, L, X]`` as ``[..., Hkv, G, L, X]`` (a heads axis of 1 as ``[..., 1, 1, ...]``);
    an array of fewer than 3 dimensions is left to broadcast."""
    if x.ndim < 3:
        return x
    if x.shape[-3] == heads_axis_size and groups > 1:
        return x.reshape(*x.shape[:-3], heads_axis_size // groups, groups, *x.shape[-2:])
    return jnp.expand_dims(x, -3)


def scaled_dot_product_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    attn_mask: jax.Array | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    dropout_key: jax.Array | None = None,
    softcap: float | None = None,
) -> jax.Array:
    """``softmax(query key^T * scale + mask) value``: PyTorch's ``F.scaled_dot_product_attention``.

    Layout as PyTorch's: ``[..., L, E]``, typically ``[B, H, L, E]`` (heads before the
    sequence, unlike ``jax.nn.dot_product_attention``'s ``[B, L, H, E]``). Returns the output
    only; :func:`js.nn.attention.scaled_dot_product_attention` returns the weights too.

    Args:
        query: ``[..., Hq, L, E]``.
        key: ``[..., Hkv, S, E]``.
        value: ``[..., Hkv, S, Ev]``.
        attn_mask: None; bool, **True = take part** (PyTorch's polarity for this function,
            the opposite of ``nn.MultiheadAttention``'s); or floating, added to the scores
            (``-inf`` excludes). Broadcasts to the scores ``[..., Hq, L, S]``.
        dropout_p: probability of dropping an attention weight (the rest scaled by
            ``1 / (1 - p)``), applied whenever it is above 0, as in PyTorch: pass
            ``p if self.training else 0.0``.
        is_causal: query ``i`` attends to keys ``0..i`` (``tril(ones(L, S))``, aligned at the
            top left when ``L != S``, as PyTorch). Not together with ``attn_mask`` (an error, as
            in PyTorch's reference): combine them into one mask instead.
        scale: the factor of the scores; None for ``1 / sqrt(E)``.
        enable_gqa: grouped-query attention: ``Hq`` a multiple of ``Hkv``, query head ``h``
            attending to key/value head ``h // (Hq / Hkv)`` (PyTorch's ``repeat_interleave``).
        dropout_key: a JAX random key (``rngs.next("dropout")``), needed when
            ``dropout_p > 0``.
        softcap: js's addition (not in PyTorch): soft-capping of the scaled scores,
            ``softcap * tanh(scores / softcap)`` before the mask, as Gemma 2 caps its
            attention logits (``attn_logit_softcapping``); None (default) for none.

    Returns:
        ``[..., Hq, L, Ev]`` in the query's dtype. A query row that may attend to no key
        (all False, or all ``-inf``) gives zeros, with zero gradients, as PyTorch 2.13 does.
        Half-precision inputs are multiplied with float32 accumulation and their softmax is
        taken in float32.

    Example:
        >>> import jax.numpy as jnp
        >>> import js.nn.functional as F
        >>> q = k = jnp.zeros((1, 2, 3, 4))  # [B, H, L, E]: equal scores
        >>> v = jnp.arange(3.0).reshape(1, 1, 3, 1) * jnp.ones((1, 2, 3, 4))
        >>> F.scaled_dot_product_attention(q, k, v, is_causal=True)[0, 0, :, 0].tolist()
        [0.0, 0.5, 1.0]
    """
    groups = _check(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, dropout_key
    )
    if softcap is not None and (
        isinstance(softcap, bool) or not isinstance(softcap, numbers.Real) or not softcap > 0
    ):
        raise ValueError(f"{_NAME}: softcap must be a positive number or None, got {softcap!r}")
    output, _ = attend(
        query,
        key,
        value,
        attn_mask,
        causal=is_causal,
        groups=groups,
        scale=scale,
        softcap=softcap,
        dropout_p=dropout_p,
        dropout_key=dropout_key,
    )
    return output


# On XLA:CPU, attention whose scores outgrow the caches runs its forward in blocks of query
# rows, one lax.map step each (a differentiated call runs every row at once, see _blocked):
# the scores of a block stay in cache between the two matmuls and the softmax, where the whole
# [..., L, S] array would be written to memory and read back three times. Whisper's encoder
# attention (6 heads, 1500 x 1500) took 36 ms against 79 ms at once, on 2 cores, equal to
# float32 rounding (each row is computed as before; XLA may pick another summation order for
# the smaller matmuls).
BLOCK_ROWS = 256
BLOCKED_SCORES_BYTES = 8 << 20  # scores of at least this size (float32) run in blocks


def _blocks(query: jax.Array, key: jax.Array, dropout_p: float, with_weights: bool) -> int:
    """How many blocks of query rows ``attend`` runs (1: at once): on the CPU, without
    dropout or returned weights, for scores of at least ``BLOCKED_SCORES_BYTES``."""
    length, source = query.shape[-2], key.shape[-2]
    if with_weights or dropout_p > 0 or length < 2 * BLOCK_ROWS:
        return 1
    if math.prod(query.shape[:-1]) * source * 4 < BLOCKED_SCORES_BYTES:
        return 1
    return -(-length // BLOCK_ROWS) if jax.default_backend() == "cpu" else 1


def _in_blocks(x: jax.Array, blocks: int, rows: int, fill: object) -> jax.Array:
    """``x [..., L, X]`` as ``[blocks, ..., rows, X]`` (``L`` padded with ``fill`` to
    ``blocks * rows``)."""
    pad = blocks * rows - x.shape[-2]
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, pad), (0, 0)], constant_values=fill)
    return jnp.moveaxis(x.reshape(*x.shape[:-2], blocks, rows, x.shape[-1]), -3, 0)


def attend(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    mask: jax.Array | None,
    *,
    causal: bool = False,
    groups: int = 1,
    scale: float | None = None,
    softcap: float | None = None,
    dropout_p: float = 0.0,
    dropout_key: jax.Array | None = None,
    with_weights: bool = False,
) -> tuple[jax.Array, jax.Array | None]:
    """js's one attention kernel, for arguments already checked: ``(output, weights)``, the
    weights only ``with_weights`` (else None).

    ``F.scaled_dot_product_attention`` (the output) and ``js.nn.attention``'s
    ``scaled_dot_product_attention`` and ``MultiheadAttention`` (the weights too) call it.
    ``mask``: None, bool (True = take part) or floating (added); ``causal``: instead of a
    mask, ``tril(ones(L, S))`` (no row is empty); ``groups``: query heads per key/value head.
    A query row with no allowed key gives a zero output (and zero weights). Large scores on
    the CPU are computed in blocks of query rows (``_blocks``), with the same result to float32
    rounding.
    """
    blocks = _blocks(query, key, dropout_p, with_weights)
    if blocks == 1:
        return _attend(query, key, value, mask, causal=causal, groups=groups, scale=scale,
                       softcap=softcap, dropout_p=dropout_p, dropout_key=dropout_key,
                       with_weights=with_weights)  # fmt: skip
    options = dict(causal=causal, groups=groups, scale=scale, softcap=softcap)
    whole = functools.partial(_output, **options)
    in_blocks = functools.partial(_output_in_blocks, blocks=blocks, **options)
    return _blocked(in_blocks, whole, query, key, value, mask), None


def _output(query, key, value, mask, **options):
    """``_attend``'s output, every row at once (no dropout)."""
    return _attend(query, key, value, mask, dropout_p=0.0, dropout_key=None, with_weights=False,
                   **options)[0]  # fmt: skip


def _output_in_blocks(query, key, value, mask, *, blocks, causal, **options):
    """``_output`` over ``blocks`` blocks of query rows, one ``lax.map`` step each."""
    length = query.shape[-2]
    rows = -(-length // blocks)
    if causal:  # a block's rows are not the first ones: the mask says which keys they see
        mask = allowed(jnp.arange(length)[:, None], jnp.arange(key.shape[-2])[None, :])
    queries = _in_blocks(query, blocks, rows, 0)
    if mask is not None and mask.ndim >= 2 and mask.shape[-2] == length:
        masks = _in_blocks(mask, blocks, rows, True if mask.dtype == jnp.bool_ else 0)
        step = lambda qm: _output(qm[0], key, value, qm[1], **options)  # noqa: E731
        out = jax.lax.map(step, (queries, masks))
    else:  # a mask the rows share (or none)
        out = jax.lax.map(lambda q: _output(q, key, value, mask, **options), queries)
    out = jnp.moveaxis(out, 0, -3)  # [..., blocks, rows, Ev]
    return out.reshape(*out.shape[:-3], -1, out.shape[-1])[..., :length, :]


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _blocked(in_blocks, whole, query, key, value, mask):
    """``in_blocks(query, key, value, mask)``; differentiated, ``whole``'s: blocks speed up the
    forward alone (a gradient through ``lax.map`` took 1.2-1.3x the whole rows' at GPT-2-small
    training shapes), so a differentiated call runs the whole rows, as before."""
    return in_blocks(query, key, value, mask)


@_blocked.defjvp
def _blocked_jvp(in_blocks, whole, primals, tangents):
    return jax.jvp(whole, primals, tangents)


def _attend(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    mask: jax.Array | None,
    *,
    causal: bool = False,
    groups: int,
    scale: float | None,
    softcap: float | None,
    dropout_p: float,
    dropout_key: jax.Array | None,
    with_weights: bool,
) -> tuple[jax.Array, jax.Array | None]:
    """``attend`` on all the query rows at once."""
    heads_q = query.shape[-3] if query.ndim >= 3 else 1
    length, source = query.shape[-2], key.shape[-2]
    compute = jnp.promote_types(query.dtype, jnp.float32)
    factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if groups > 1:  # query [..., Hkv, G, L, E]; its G * L rows against key [..., Hkv, S, E]
        query = _grouped(query, groups, heads_q)
        if mask is not None:
            mask = _grouped(mask, groups, heads_q)
    # A group's queries are rows of one matmul against their key/value head: the key and value
    # are never repeated (a broadcast copied them G times, in every step of a decode loop).
    rows = query.reshape(*query.shape[:-3], -1, query.shape[-1]) if groups > 1 else query
    scores = jnp.matmul(rows, jnp.swapaxes(key, -1, -2), preferred_element_type=compute)
    if groups > 1:
        scores = scores.reshape(*query.shape[:-1], source)  # [..., Hkv, G, L, S]
    scores = scores * jnp.asarray(factor, compute)
    if softcap is not None:
        scores = jnp.tanh(scores / softcap) * softcap
    alive = None  # [..., L, 1]: whether a query row may attend to some key (bool masks)
    if mask is not None and mask.dtype != jnp.bool_:
        # An additive mask may hold -inf across a whole row: the softmax that gives such a row
        # zeros (jax.nn.softmax would give NaN).
        weights = _safe_softmax(scores + mask.astype(compute))
    else:
        # Excluded scores get the lowest finite value, not -inf, and jax.nn.softmax: one select
        # fused into the softmax, as the textbook formulation compiles. A row with no allowed
        # key stays finite (uniform weights) until its output [..., L, Ev] is zeroed below,
        # cheaper than a select over the weights [..., L, S] (15-45 % of attention's forward
        # and backward on XLA:CPU, docs/benchmarks.md); a causal mask leaves no row empty.
        if causal:  # tril(ones(L, S)): aligned at the top left, as PyTorch
            mask = allowed(jnp.arange(length)[:, None], jnp.arange(source)[None, :])
        elif mask is not None:
            alive = jnp.any(mask, axis=-1, keepdims=True)
        if mask is not None:
            scores = jnp.where(mask, scores, jnp.finfo(compute).min)
        weights = jax.nn.softmax(scores, axis=-1)
    if dropout_p > 0:
        assert dropout_key is not None  # checked by the callers
        if dropout_p == 1.0:
            weights = jnp.zeros_like(weights)
        else:
            keep = jax.random.bernoulli(dropout_key, 1.0 - dropout_p, weights.shape)
            weights = jnp.where(keep, weights / (1.0 - dropout_p), 0.0)
    weights = weights.astype(value.dtype)
    returned = None
    if with_weights:
        returned = weights if alive is None else jnp.where(alive, weights, 0.0)
        if groups > 1:
            returned = returned.reshape(*returned.shape[:-4], heads_q, *returned.shape[-2:])
    grouped = weights.shape[:-1]  # [..., Hkv, G, L]
    if groups > 1:
        weights = weights.reshape(*weights.shape[:-3], -1, source)  # [..., Hkv, G * L, S]
    out = jnp.matmul(weights, value, preferred_element_type=compute)
    if groups > 1:
        out = out.reshape(*grouped, out.shape[-1])  # [..., Hkv, G, L, Ev]
    if alive is not None:  # rows with no allowed key: zeros, and no gradient, as PyTorch
        out = jnp.where(alive, out, 0.0)
    if groups > 1:
        out = out.reshape(*out.shape[:-4], heads_q, *out.shape[-2:])
    return out.astype(query.dtype), returned
