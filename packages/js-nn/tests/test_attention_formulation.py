"""Attention zeroes only the all-masked query rows (not every masked weight): the same values
and gradients as selecting over every weight, which is what it did before."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from js.nn.attention import causal_mask, scaled_dot_product_attention


def _every_weight_selected(q, k, v, mask):
    scores = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    weights = jnp.where(mask, jax.nn.softmax(scores, axis=-1), 0)
    return weights @ v, weights


def _masks(T):
    padding = jnp.array([[True] * (T - 2) + [False] * 2, [False] * T])[:, None, None, :]
    rows = jnp.ones((T, T), bool).at[1].set(False)  # query 1 sees no key
    return {
        "causal": causal_mask(T),
        "padding, one sequence all padded": padding,
        "a dead query row": rows,
        "1-D": jnp.arange(T) % 2 == 0,
    }


@pytest.mark.parametrize("name", list(_masks(5)))
def test_values_and_gradients_equal_the_full_select(name):
    mask = _masks(5)[name]
    rng = np.random.default_rng(0)
    q, k, v, g = (jnp.asarray(rng.normal(size=(2, 3, 5, 4)), jnp.float32) for _ in range(4))
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    want_out, want_weights = _every_weight_selected(q, k, v, mask)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(weights, want_weights)

    def loss(attend):
        return lambda q, k, v: jnp.sum(attend(q, k, v, mask)[0] * g)

    got = jax.grad(loss(scaled_dot_product_attention), argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(loss(_every_weight_selected), argnums=(0, 1, 2))(q, k, v)
    for a, e in zip(got, want, strict=True):
        assert bool(jnp.all(jnp.isfinite(a)))
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)
