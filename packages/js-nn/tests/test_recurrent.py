"""RNN and LSTM: shapes, PyTorch layout and numbers, lengths, streaming, scan structure, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js._variables import flat_arrays
from js.nn._recurrent import LSTM, RNN

B, T, I, H = 3, 6, 4, 5


def _x(seed=0, shape=(B, T, I)):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _state(cls, layers, seed=1):
    h = _x(seed, (layers, B, H))
    return (h, _x(seed + 1, (layers, B, H))) if cls is LSTM else h


def _final(cls, state):
    return state if cls is LSTM else (state,)


def _make(cls, layers=1, **kwargs):
    return cls(I, H, layers, rngs=js.Rngs(params=0), **kwargs)


# -- construction, layout, init -------------------------------------------------------------


@pytest.mark.parametrize("cls, gates", [(RNN, 1), (LSTM, 4)])
def test_state_dict_keys_and_shapes_follow_pytorch(cls, gates):
    sd = _make(cls, 2).state_dict()
    assert list(sd) == [f"{p}_l{k}" for k in (0, 1) for p in
                        ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    assert sd["weight_ih_l0"].shape == (gates * H, I)
    assert sd["weight_ih_l1"].shape == (gates * H, H)
    assert sd["weight_hh_l1"].shape == (gates * H, H)
    assert sd["bias_hh_l0"].shape == (gates * H,)
    assert all(v.dtype == np.float32 for v in sd.values())


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_bias_false_has_no_biases(cls):
    assert list(_make(cls, bias=False).state_dict()) == ["weight_ih_l0", "weight_hh_l0"]


def test_weight_init_is_pytorch_uniform():
    sd = LSTM(8, 64, rngs=js.Rngs(params=0)).state_dict()
    bound = 1 / np.sqrt(64)
    w = sd["weight_hh_l0"]
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.mean()) < 0.02 * bound * 10 and abs(w.std() - bound / np.sqrt(3)) < 0.05 * bound


def test_lstm_forget_bias_is_one_and_rnn_biases_zero():
    sd = _make(LSTM).state_dict()
    total = sd["bias_ih_l0"] + sd["bias_hh_l0"]
    np.testing.assert_array_equal(total[H : 2 * H], 1.0)  # forget gate (i, f, g, o)
    np.testing.assert_array_equal(np.delete(total, np.s_[H : 2 * H]), 0.0)
    np.testing.assert_array_equal(sd["bias_hh_l0"], 0.0)
    rnn = _make(RNN, 2).state_dict()
    assert all(not v.any() for k, v in rnn.items() if k.startswith("bias"))


def test_repr():
    lstm = LSTM(4, 8, 2, bias=False, rngs=js.Rngs(params=0))
    assert repr(lstm).splitlines()[0] == "LSTM(4, 8, num_layers=2, bias=False"
    assert repr(_make(RNN, nonlinearity="relu")).splitlines()[0] == "RNN(4, 5, nonlinearity='relu'"


# -- forward ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [RNN, LSTM])
@pytest.mark.parametrize("layers", [1, 2])
def test_shapes_and_zero_default_state(cls, layers):
    model, x = _make(cls, layers), _x()
    seq, state = model(x)
    assert seq.shape == (B, T, H) and seq.dtype == jnp.float32
    for part in _final(cls, state):
        assert part.shape == (layers, B, H)
    zeros = jnp.zeros((layers, B, H))
    _, explicit = model(x, (zeros, zeros) if cls is LSTM else zeros)
    for a, b in zip(_final(cls, state), _final(cls, explicit)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(seq[:, -1], _final(cls, state)[0][-1])


def test_state_dtype_is_cast_to_the_computation_dtype():
    model = _make(LSTM)
    h = jnp.zeros((1, B, H), jnp.bfloat16)
    seq, (h, c) = model(_x(), (h, h))
    assert seq.dtype == h.dtype == c.dtype == jnp.float32


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_unroll_gives_the_same_result(cls):
    x, state = _x(), _state(cls, 2)
    a = _make(cls, 2)(x, state)
    b = _make(cls, 2, unroll=4)(x, state)
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, atol=1e-6), a, b)


def test_jit_matches_eager():
    model, x = _make(LSTM, 2), _x()
    step = js.jit(lambda m, x, n: m(x, lengths=n))
    lengths = jnp.array([6, 3, 0])
    eager = model(x, lengths=lengths)
    compiled = step(model, x, lengths)
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, atol=1e-6), eager, compiled)
