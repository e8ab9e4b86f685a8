"""The LSTM's hand-written backward: gradients against autodiff, T = 0."""

import jax
import jax.numpy as jnp
import numpy as np

import js
from js._variables import flat_arrays
from js.nn._recurrent import LSTM

B, T, IN, H = 3, 6, 4, 5


def _x(seed=0, shape=(B, T, IN)):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _make(layers=2, **kwargs):
    return LSTM(IN, H, layers, rngs=js.Rngs(params=0), **kwargs)


def _weighted(tree):
    """A loss weighing every entry differently, so that every gradient entry is checked."""
    leaves = jax.tree.leaves(tree)
    return sum((leaf * jnp.cos(jnp.arange(leaf.size)).reshape(leaf.shape)).sum() for leaf in leaves)


def _grads(model, x, state, lengths=None):
    """Gradients of a weighted loss of the sequence and final state: params, x, state."""
    graphdef, params = js.split(model)

    def loss(params, x, state):
        return _weighted(js.merge(graphdef, params)(x, state, lengths))

    g_params, g_x, g_state = jax.grad(loss, argnums=(0, 1, 2))(params, x, state)
    return {**flat_arrays(g_params), "x": g_x, "h0": g_state[0], "c0": g_state[1]}


def test_fused_backward_matches_autodiff_for_inputs_state_and_every_parameter():
    model, x = _make(), _x()
    state = (_x(1, (2, B, H)), _x(2, (2, B, H)))
    fused = _grads(model, x, state)
    autodiff = _grads(model, x, state, lengths=[T] * B)  # the masked path: plain autodiff
    assert sorted(fused) == sorted(autodiff) and len(fused) == 8 + 3
    for key in fused:
        assert np.abs(fused[key]).max() > 1e-3, key  # every gradient is exercised
        np.testing.assert_allclose(fused[key], autodiff[key], atol=1e-5, err_msg=key)


def test_gradient_at_T_zero():
    """T = 0: the state passes through unchanged, so d(sum h)/dh0 is one and the rest zero."""
    model, x = _make(), jnp.ones((B, 0, IN))
    state = (_x(1, (2, B, H)), _x(2, (2, B, H)))
    graphdef, params = js.split(model)

    def loss(params, x, state):
        _, (h, c) = js.merge(graphdef, params)(x, state)
        return h.sum() + 2 * c.sum()

    g_params, g_x, (g_h, g_c) = jax.grad(loss, argnums=(0, 1, 2))(params, x, state)
    assert g_x.shape == (B, 0, IN)
    np.testing.assert_array_equal(g_h, 1.0)
    np.testing.assert_array_equal(g_c, 2.0)
    assert all(not np.any(g) for g in flat_arrays(g_params).values())
    # The reported call: js.grad of the model at T = 0.
    grads = js.grad(lambda m, x: m(x)[1][0].sum())(LSTM(3, 4, rngs=js.Rngs(params=0)),
                                                   jnp.ones((2, 0, 3)))
    assert all(not np.any(g) for g in jax.tree.leaves(grads))

