"""The one mask module (causal with a window, a decoder's mask with padding and packed
sequences, the cache's mask) and the one attention kernel behind both public sdpa functions
(soft-capping included)."""

import jax.numpy as jnp
import numpy as np
import pytest

import js.nn.functional as F
from js.nn import KVCache
from js.nn.attention import causal_mask, decoder_mask, scaled_dot_product_attention


def _rand(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _reference_mask(T, valid=None, window=None):
    """A loop over (query, key) pairs: the rule, written out."""
    out = np.zeros((1 if valid is None else len(valid), T, T), bool)
    for b in range(out.shape[0]):
        for i in range(T):
            for j in range(T):
                ok = j <= i and (window is None or i - j < window)
                out[b, i, j] = ok and (valid is None or bool(valid[b][j]))
    return out[:, None]


@pytest.mark.parametrize("window", [None, 1, 3])
def test_causal_and_decoder_masks_follow_the_rule(window):
    valid = np.array([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(causal_mask(6, window=window), _reference_mask(6, None, window))
    got = decoder_mask(6, jnp.asarray(valid), window=window)
    np.testing.assert_array_equal(got, _reference_mask(6, valid, window))


def test_decoder_mask_keeps_packed_sequences_apart():
    positions = jnp.array([[0, 1, 2, 0, 1, 0]])
    got = np.asarray(decoder_mask(6, packed_positions=positions))[0, 0]
    blocks = np.zeros((6, 6), bool)
    for start, stop in [(0, 3), (3, 5), (5, 6)]:
        blocks[start:stop, start:stop] = np.tril(np.ones((stop - start,) * 2, bool))
    np.testing.assert_array_equal(got, blocks)


def test_the_cache_mask_is_the_decoder_mask_of_the_slots():
    valid = np.array([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    cache = KVCache(batch_size=2, max_length=5, num_layers=1, num_kv_heads=1, head_dim=2)
    cache.begin(5, jnp.asarray(valid))
    np.testing.assert_array_equal(cache.mask(5, 2), decoder_mask(5, jnp.asarray(valid), window=2))


def test_bad_masks_are_refused():
    with pytest.raises(ValueError, match=r"attention_mask must be \[B, T\] with T=4"):
        decoder_mask(4, jnp.ones((2, 3)))
    with pytest.raises((TypeError, ValueError), match="window"):
        causal_mask(4, window=0)


def test_softcap_caps_the_scaled_scores():
    q, k, v = _rand(0, (2, 4, 5, 8)), _rand(1, (2, 2, 5, 8)), _rand(2, (2, 2, 5, 8))
    mask = causal_mask(5)
    got = F.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True, scale=0.5, softcap=0.7)
    kk, vv = jnp.repeat(k, 2, axis=1), jnp.repeat(v, 2, axis=1)  # the query heads' kv heads
    scores = 0.7 * jnp.tanh(q @ kk.swapaxes(-1, -2) * 0.5 / 0.7)
    scores = jnp.where(mask, scores, -jnp.inf)
    expected = jnp.exp(scores - scores.max(-1, keepdims=True))
    expected = (expected / expected.sum(-1, keepdims=True)) @ vv
    np.testing.assert_allclose(got, expected, atol=2e-6)
    plain = F.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True, scale=0.5)
    assert float(jnp.abs(plain - got).max()) > 1e-2  # the cap changes the output
    with pytest.raises(ValueError, match="softcap must be a positive number"):
        F.scaled_dot_product_attention(q, k, v, softcap=0.0, enable_gqa=True)


def test_both_sdpa_functions_are_one_kernel():
    q, k, v = _rand(0, (2, 3, 4, 8)), _rand(1, (2, 3, 6, 8)), _rand(2, (2, 3, 6, 8))
    mask = jnp.asarray(np.random.default_rng(3).random((2, 1, 4, 6)) > 0.4).at[0, 0, 1].set(False)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    np.testing.assert_array_equal(out, F.scaled_dot_product_attention(q, k, v, mask))
    assert float(jnp.abs(weights[0, :, 1]).max()) == 0.0  # the row with no key: zero weights
    np.testing.assert_allclose(weights @ v, out, atol=1e-6)
