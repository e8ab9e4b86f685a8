"""A key-value cache for decoding: preallocated, static-shape, threaded by ``js.jit``.

A decoder that generates token by token recomputes nothing for the tokens it has seen if each
attention layer keeps their keys and values. ``KVCache`` holds them in fixed-size arrays
(``max_length`` slots), so the program of a decode step has one shape whatever the step, and
``js.jit`` compiles it once. Its arrays are non-persistent ``Buffer``s: ``js.jit`` passes them
in and, when a step writes them, donates them (XLA updates them in place); ``state_dict`` never
holds them.

The protocol, for a model that takes a cache (js.models' decoders, or your own):

1. once per forward, before the layers: ``positions = cache.begin(T, attention_mask)``. It
   claims slots ``start .. start + T - 1`` for the ``T`` new tokens (``start`` = the slots
   already written), records which of them are real tokens, and returns each token's position
   (``[B, T]``; padded tokens get 0, as transformers gives them).
2. in attention layer ``i``: ``keys, values = cache.update(i, k, v)`` with the new tokens'
   ``k, v`` ``[B, kv_heads, T, head_dim]``; it returns every slot, ``[B, kv_heads, max_length,
   head_dim]``, in the query's dtype.
3. the mask to attend with: ``cache.mask(T, window=None)``, boolean ``[B, 1, T, max_length]``,
   True where the slot holds a real token at or before the query (and, with a sliding
   ``window``, fewer than ``window`` slots back).

Rows are left-padded: every row writes the same slots, and a row's position counts its own
real tokens. A forward with a cache never writes past ``max_length``; ``begin`` checks it when
the cache's length is known on the host (eagerly), and inside a compiled program the caller
keeps the count (``js.models.generate`` sizes the cache for the prompt and the new tokens).
"""

from __future__ import annotations

from typing import cast

import jax
import jax.core  # jax.core.Tracer: a submodule the checker knows only once imported
import jax.numpy as jnp
from jax.typing import DTypeLike

from js import Buffer, Module, ModuleList

from ._checks import check_int
from ._masks import allowed


class LayerKV(Module):
    """One attention layer's cached keys ``k`` and values ``v``, ``[B, kv_heads, max_length,
    head_dim]`` each (non-persistent buffers)."""

    def __init__(self, batch_size: int, num_kv_heads: int, max_length: int, head_dim: int, dtype):
        super().__init__()
        shape = (batch_size, num_kv_heads, max_length, head_dim)
        self.k = Buffer(jnp.zeros(shape, dtype), persistent=False)
        self.v = Buffer(jnp.zeros(shape, dtype), persistent=False)


class KVCache(Module):
    """Keys and values of every attention layer for ``max_length`` token slots per row.

    Args:
        batch_size: ``B``, rows decoded together.
        max_length: slots per row: prompt (with its left padding) plus new tokens.
        num_layers: attention layers.
        num_kv_heads: key/value heads per layer (grouped-query attention stores only these).
        head_dim: features per head.
        dtype: the stored dtype (float32 default; ``jnp.bfloat16`` halves the memory; the
            layers read the cache back in their query's dtype).

    Buffers (non-persistent: in no ``state_dict``): ``layer(i).k``/``.v`` (held in
    ``layers``); ``valid`` ``[B, max_length]`` bool, which slots hold a real token; ``start``
    (the first slot of the last ``begin``) and ``length`` (slots written), int32 scalars;
    ``next_position`` ``[B]`` int32, each row's position for its next token.

    Example:
        >>> import jax.numpy as jnp, js.nn as nn
        >>> cache = nn.KVCache(batch_size=2, max_length=8, num_layers=1, num_kv_heads=2,
        ...                    head_dim=4)
        >>> positions = cache.begin(3, jnp.array([[0, 1, 1], [1, 1, 1]]))  # a left-padded prompt
        >>> positions.tolist(), int(cache.length.value)
        ([[0, 0, 1], [0, 1, 2]], 3)
        >>> keys, values = cache.update(0, jnp.ones((2, 2, 3, 4)), jnp.ones((2, 2, 3, 4)))
        >>> keys.shape, cache.mask(3).shape
        ((2, 2, 8, 4), (2, 1, 3, 8))
        >>> cache.mask(3)[0, 0, 2].astype(int).tolist()  # row 0's last token sees slots 1, 2
        [0, 1, 1, 0, 0, 0, 0, 0]
    """

    def __init__(
        self,
        batch_size: int,
        max_length: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        dtype: DTypeLike = jnp.float32,
    ):
        super().__init__()
        name = "KVCache"
        B = check_int(name, "batch_size", batch_size)
        M = check_int(name, "max_length", max_length)
        layers = check_int(name, "num_layers", num_layers)
        heads = check_int(name, "num_kv_heads", num_kv_heads)
        dim = check_int(name, "head_dim", head_dim)
        if not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
            raise TypeError(
                f"KVCache: dtype must be floating (float32, bfloat16, ...), got {dtype!r}"
            )
        self.batch_size, self.max_length = B, M
        self.layers = ModuleList([LayerKV(B, heads, M, dim, dtype) for _ in range(layers)])
        self.valid = Buffer(jnp.zeros((B, M), bool), persistent=False)
        self.start = Buffer(jnp.zeros((), jnp.int32), persistent=False)
        self.length = Buffer(jnp.zeros((), jnp.int32), persistent=False)
        self.next_position = Buffer(jnp.zeros((B,), jnp.int32), persistent=False)

    def layer(self, index: int) -> LayerKV:
        """Attention layer ``index``'s keys and values (``.k``, ``.v``)."""
        return cast(LayerKV, self.layers[index])

    def extra_repr(self) -> str:
        k = self.layer(0).k.value  # num_layers >= 1
        heads, dim, dtype = k.shape[1], k.shape[3], k.dtype
        return (
            f"batch_size={self.batch_size}, max_length={self.max_length}, "
            f"num_layers={len(self.layers)}, num_kv_heads={heads}, head_dim={dim}, dtype={dtype}"
        )

    @property
    def nbytes(self) -> int:
        """Bytes of the cached keys and values (every layer)."""
        layers = (self.layer(i) for i in range(len(self.layers)))
        return sum(layer.k.value.nbytes + layer.v.value.nbytes for layer in layers)

    def reset(self) -> None:
        """Forget every token: the next ``begin`` writes from slot 0 (the stored keys stay, and
        are masked out until overwritten)."""
        self.valid.value = jnp.zeros_like(self.valid.value)
        self.start.value = jnp.zeros((), jnp.int32)
        self.length.value = jnp.zeros((), jnp.int32)
        self.next_position.value = jnp.zeros_like(self.next_position.value)

    def reorder(self, rows: jax.typing.ArrayLike) -> None:
        """Make row ``i`` a copy of row ``rows[i]`` (``[B]`` int): every layer's keys and values,
        which slots are real, and the next position (beam search keeps the rows of the beams it
        continues, as transformers' ``Cache.reorder_cache``)."""
        rows = jnp.asarray(rows)
        for layer in (self.layer(i) for i in range(len(self.layers))):
            layer.k.value = jnp.take(layer.k.value, rows, axis=0)
            layer.v.value = jnp.take(layer.v.value, rows, axis=0)
        self.valid.value = jnp.take(self.valid.value, rows, axis=0)
        self.next_position.value = jnp.take(self.next_position.value, rows, axis=0)

    def begin(
        self,
        T: int,
        attention_mask: jax.typing.ArrayLike | None = None,
        position_ids: jax.typing.ArrayLike | None = None,
    ) -> jax.Array:
        """Claim the next ``T`` slots for a forward over ``T`` new tokens per row; returns their
        positions ``[B, T]`` int32.

        Args:
            T: new tokens per row (a Python int: it is the program's shape).
            attention_mask: ``[B, T]``, nonzero for real tokens and 0 for (left) padding; None:
                every token is real.
            position_ids: ``[B, T]`` (or broadcastable) to use instead of the counted ones.

        Positions follow transformers' ``generate``: in the first forward, each real token's
        position counts the row's real tokens before it (``cumsum(mask) - 1``) and padding gets
        0; later tokens continue from the row's last position plus one.
        """
        B, M = self.batch_size, self.max_length
        T = check_int("KVCache.begin", "T", T)
        start = self.length.value
        if not isinstance(start, jax.core.Tracer) and int(start) + T > M:
            raise ValueError(
                f"KVCache: {T} new tokens do not fit: {int(start)} of {M} slots are written "
                f"(max_length={M}). Fix: make the cache with a larger max_length, or "
                "cache.reset() to start again"
            )
        if attention_mask is None:
            real = jnp.ones((B, T), bool)
        else:
            if tuple(jnp.shape(attention_mask)) != (B, T):
                raise ValueError(
                    f"KVCache.begin: attention_mask must be [B, T] = {[B, T]} (1 for real "
                    f"tokens, 0 for padding), got shape {list(jnp.shape(attention_mask))}"
                )
            real = jnp.asarray(attention_mask) != 0
        if position_ids is None:
            counted = self.next_position.value[:, None] + jnp.cumsum(real, axis=1, dtype=jnp.int32)
            positions = jnp.where(real, counted - 1, 0)
        else:
            positions = jnp.broadcast_to(jnp.asarray(position_ids, jnp.int32), (B, T))
        self.valid.value = jax.lax.dynamic_update_slice(self.valid.value, real, (0, start))
        self.start.value = start
        self.length.value = start + T
        self.next_position.value = positions[:, -1] + 1
        return positions

    def update(self, layer: int, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Store the new tokens' keys and values ``[B, kv_heads, T, head_dim]`` of attention
        layer ``layer`` at the slots ``begin`` claimed; returns all slots' keys and values
        ``[B, kv_heads, max_length, head_dim]`` in ``k``'s dtype."""
        cache = self.layer(layer)
        stored = cache.k.value
        if k.shape[:2] != stored.shape[:2] or k.shape[3] != stored.shape[3] or k.shape != v.shape:
            raise ValueError(
                f"KVCache.update: layer {layer} stores keys and values [B, kv_heads, T, "
                f"head_dim] with [B, kv_heads, ., head_dim] = {list(stored.shape)}, got k "
                f"{list(k.shape)} and v {list(v.shape)}"
            )
        at = (0, 0, self.start.value, 0)
        cache.k.value = jax.lax.dynamic_update_slice(stored, k.astype(stored.dtype), at)
        cache.v.value = jax.lax.dynamic_update_slice(cache.v.value, v.astype(stored.dtype), at)
        return cache.k.value.astype(k.dtype), cache.v.value.astype(v.dtype)

    def mask(self, T: int, window: int | None = None) -> jax.Array:
        """Boolean ``[B, 1, T, max_length]``, True = query ``t`` (slot ``start + t``) may attend
        to the slot: it holds a real token at or before the query's slot (and fewer than
        ``window`` slots back, for a sliding window)."""
        query = self.start.value + jnp.arange(T)[:, None]  # [T, 1]
        slot = jnp.arange(self.max_length)[None, :]  # [1, M]
        visible = allowed(query, slot, window)  # [T, M]
        return (visible[None] & self.valid.value[:, None, :])[:, None]  # [B, 1, T, M]
