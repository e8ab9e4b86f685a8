"""js.nn.KVCache: slots, positions and masks of left-padded rows, and MultiheadAttention
decoding with a cache equal to the uncached forward, step by step, under js.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.nn as nn
from js.nn.attention import causal_mask


def test_begin_counts_positions_per_row_and_claims_slots():
    cache = nn.KVCache(2, 8, num_layers=1, num_kv_heads=1, head_dim=2)
    positions = cache.begin(3, jnp.array([[0, 0, 1], [1, 1, 1]]))
    assert positions.tolist() == [[0, 0, 0], [0, 1, 2]]
    assert cache.valid.value[:, :4].tolist() == [[False, False, True, False], [True] * 3 + [False]]
    assert int(cache.start.value) == 0 and int(cache.length.value) == 3
    assert cache.begin(2).tolist() == [[1, 2], [3, 4]]  # each row continues its own count
    assert int(cache.start.value) == 3 and int(cache.length.value) == 5
    # query slot 3 (row 0) sees its real tokens up to itself: slots 2, 3
    assert cache.mask(2)[0, 0, 0].tolist() == [False, False, True, True] + [False] * 4
    assert cache.mask(2, window=2)[1, 0, 1].tolist() == [False] * 3 + [True, True] + [False] * 3


def test_update_writes_the_claimed_slots_and_returns_every_slot():
    cache = nn.KVCache(1, 4, num_layers=2, num_kv_heads=2, head_dim=3, dtype=jnp.bfloat16)
    cache.begin(2)
    k = jnp.arange(12.0).reshape(1, 2, 2, 3)
    keys, values = cache.update(1, k, -k)
    assert keys.shape == (1, 2, 4, 3) and keys.dtype == jnp.float32
    assert cache.layer(1).k.value.dtype == jnp.bfloat16
    np.testing.assert_array_equal(keys[:, :, :2], k)
    np.testing.assert_array_equal(values[:, :, 2:], 0)
    assert cache.nbytes == 2 * 2 * (1 * 2 * 4 * 3) * 2
    assert cache.state_dict() == {}  # never saved with a model


def test_reorder_copies_the_rows_beam_search_keeps():
    cache = nn.KVCache(3, 4, num_layers=2, num_kv_heads=1, head_dim=2)
    cache.begin(2, jnp.array([[0, 1], [1, 1], [1, 1]]))
    for layer in (0, 1):
        k = jnp.arange(12.0).reshape(3, 1, 2, 2) + layer
        cache.update(layer, k, -k)
    before = [np.asarray(cache.layer(i).k.value) for i in (0, 1)]
    reorder = js.jit(lambda cache, rows: cache.reorder(rows))
    reorder(cache, jnp.array([2, 0, 0]))  # row 0 <- row 2, rows 1 and 2 <- row 0
    for i in (0, 1):
        np.testing.assert_array_equal(cache.layer(i).k.value, before[i][[2, 0, 0]])
        np.testing.assert_array_equal(cache.layer(i).v.value, -before[i][[2, 0, 0]])
    assert cache.valid.value[:, :2].tolist() == [[True, True], [False, True], [False, True]]
    assert cache.begin(1).tolist() == [[2], [1], [1]]  # each row continues its new source's count


def test_errors_name_the_problem():
    with pytest.raises(TypeError, match="dtype must be floating"):
        nn.KVCache(1, 4, 1, 1, 2, dtype=jnp.int32)
    cache = nn.KVCache(1, 4, 1, 1, 2)
    cache.begin(3)
    with pytest.raises(ValueError, match="do not fit: 3 of 4 slots"):
        cache.begin(2)
    cache.reset()
    with pytest.raises(ValueError, match=r"attention_mask must be \[B, T\]"):
        cache.begin(2, jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="layer 0 stores"):
        cache.update(0, jnp.ones((1, 2, 1, 2)), jnp.ones((1, 2, 1, 2)))


class TinyLM(js.Module):
    """Embedding + learned positions, one causal self-attention block, a head; decodes with a
    KVCache through MultiheadAttention(cache=)."""

    def __init__(self, vocab: int = 11, dim: int = 8, context: int = 16, *, rngs):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, rngs=rngs)
        self.position = nn.Embedding(context, dim, rngs=rngs)
        self.attn = nn.MultiheadAttention(dim, 2, rngs=rngs)
        self.head = nn.Linear(dim, vocab, rngs=rngs)

    def forward(self, tokens, cache=None):
        T = tokens.shape[1]
        positions = jnp.arange(T)[None] if cache is None else cache.begin(T)
        x = self.embed(tokens) + self.position(positions)
        mask = causal_mask(T) if cache is None else None
        return self.head(x + self.attn(x, x, x, mask=mask, cache=cache))


def test_multihead_attention_with_a_cache_equals_the_uncached_forward():
    model = TinyLM(rngs=js.Rngs(params=0)).eval()
    tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, 11)
    full = model(tokens)
    cache = nn.KVCache(2, 12, num_layers=1, num_kv_heads=2, head_dim=4)
    traces = []

    @js.jit
    def step(model, cache, ids):
        traces.append(ids.shape)  # runs only while tracing
        return model(ids, cache=cache)

    np.testing.assert_allclose(step(model, cache, tokens[:, :5]), full[:, :5], atol=1e-6)
    for t in range(5, 9):  # then one token at a time: one program for every step
        logits = step(model, cache, tokens[:, t : t + 1])
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-6)
    assert traces == [(2, 5), (2, 1)]  # the 5-token prefill and the 1-token step


def test_multihead_attention_refuses_a_cache_for_cross_attention():
    mha = nn.MultiheadAttention(4, 2, rngs=js.Rngs(params=0))
    cache = nn.KVCache(1, 8, num_layers=1, num_kv_heads=2, head_dim=2)
    cache.begin(2)
    with pytest.raises(ValueError, match="decodes self-attention"):
        mha(jnp.ones((1, 2, 4)), jnp.ones((1, 3, 4)), jnp.ones((1, 3, 4)), cache=cache)
