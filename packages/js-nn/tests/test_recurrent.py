"""RNN and LSTM: shapes, PyTorch layout and numbers, lengths, streaming, scan structure, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js._checks import flatten_state
from js.nn._recurrent import GRU, LSTM, RNN

B, T, IN, H = 3, 6, 4, 5


def _x(seed=0, shape=(B, T, IN)):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _state(cls, layers, seed=1):
    h = _x(seed, (layers, B, H))
    return (h, _x(seed + 1, (layers, B, H))) if cls is LSTM else h


def _final(cls, state):
    return state if cls is LSTM else (state,)


def _make(cls, layers=1, **kwargs):
    return cls(IN, H, layers, rngs=js.Rngs(params=0), **kwargs)


# -- construction, layout, init -------------------------------------------------------------


@pytest.mark.parametrize("cls, gates", [(RNN, 1), (LSTM, 4)])
def test_state_dict_keys_and_shapes_follow_pytorch(cls, gates):
    sd = _make(cls, 2).state_dict()
    assert list(sd) == [
        f"{p}_l{k}" for k in (0, 1) for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ]
    assert sd["weight_ih_l0"].shape == (gates * H, IN)
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
    assert abs(w.mean()) < 0.1 * bound and abs(w.std() - bound / np.sqrt(3)) < 0.05 * bound


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
    for a, b in zip(_final(cls, state), _final(cls, explicit), strict=True):
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


# -- lengths, streaming, truncated backpropagation --------------------------------------------


@pytest.mark.parametrize("cls", [RNN, LSTM, GRU])
def test_lengths_freeze_the_carry_and_zero_padded_outputs(cls):
    model, x, state = _make(cls, 2), _x(), _state(cls, 2)
    lengths = np.array([6, 2, 0])
    seq, final = model(x, state, lengths=jnp.asarray(lengths))
    for b, n in enumerate(lengths):
        one = jax.tree.map(lambda s, b=b: s[:, b : b + 1], state)
        if n:
            ref_seq, ref = model(x[b : b + 1, :n], one)
            np.testing.assert_allclose(seq[b, :n], ref_seq[0], atol=1e-6)
        else:
            ref = one  # a zero-length example keeps its initial carry
        for got, want in zip(_final(cls, final), _final(cls, ref), strict=True):
            np.testing.assert_allclose(got[:, b], want[:, 0], atol=1e-6)
        np.testing.assert_array_equal(seq[b, n:], 0.0)


def test_lengths_accept_lists_and_traced_arrays():
    model, x = _make(LSTM), _x()
    a = model(x, lengths=[6, 2, 0])
    b = js.jit(lambda m, x, n: m(x, lengths=n))(model, x, jnp.array([6, 2, 0]))
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, atol=1e-6), a, b)


@pytest.mark.parametrize("cls", [RNN, LSTM, GRU])
def test_streaming_chunks_equals_one_call(cls):
    model, x, state = _make(cls, 2), _x(shape=(B, 12, IN)), _state(cls, 2)
    whole_seq, whole = model(x, state)
    pieces, carry = [], state
    for start, stop in ((0, 5), (5, 6), (6, 12)):
        seq, carry = model(x[:, start:stop], carry)
        pieces.append(seq)
    np.testing.assert_allclose(jnp.concatenate(pieces, 1), whole_seq, atol=1e-6)
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, atol=1e-6), carry, whole)


@pytest.mark.parametrize("truncate", [True, False])
def test_stop_gradient_between_chunks_truncates_backpropagation(truncate):
    model, x = _make(LSTM), _x(shape=(B, 8, IN))

    def second_chunk_loss(first):
        _, carry = model(first)
        if truncate:
            carry = js.stop_gradient(carry)
        seq, _ = model(x[:, 4:], carry)
        return jnp.sum(seq**2)

    grad = jax.grad(second_chunk_loss)(x[:, :4])
    assert np.all(grad == 0.0) if truncate else np.abs(grad).max() > 1e-3


# -- scan structure --------------------------------------------------------------------------


def _count_equations(jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for param in eqn.params.values():  # a scan's body, a jit's inner program
            inner = getattr(param, "jaxpr", param)
            if hasattr(inner, "eqns"):
                total += _count_equations(inner)
    return total


@pytest.mark.parametrize("lengths", [False, True])
def test_program_size_does_not_grow_with_T(lengths):
    model = LSTM(8, 8, rngs=js.Rngs(params=0))

    def size(steps):
        x = jnp.zeros((2, steps, 8))
        n = jnp.array([steps, 1]) if lengths else None
        return _count_equations(jax.make_jaxpr(lambda x, n: model(x, lengths=n))(x, n).jaxpr)

    assert size(10) == size(1000) > 20  # > 20: the scan body was counted


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"input_size": 0}, ValueError, r"LSTM: input_size must be an int >= 1, got 0"),
        ({"hidden_size": 2.0}, TypeError, r"LSTM: hidden_size must be an int >= 1, got 2.0"),
        ({"num_layers": 0}, ValueError, r"LSTM: num_layers must be an int >= 1, got 0"),
        ({"unroll": True}, TypeError, r"LSTM: unroll must be an int >= 1, got True"),
    ],
)
def test_bad_construction_is_refused(kwargs, error, match):
    args = {"input_size": IN, "hidden_size": H, "num_layers": 1, "unroll": 1} | kwargs
    with pytest.raises(error, match=match):
        LSTM(args.pop("input_size"), args.pop("hidden_size"), rngs=js.Rngs(params=0), **args)


def test_unknown_nonlinearity_is_refused():
    with pytest.raises(
        ValueError,
        match=r"RNN: nonlinearity must be one of \['relu', 'tanh'\], "
        r"got 'gelu'",
    ):
        _make(RNN, nonlinearity="gelu")


@pytest.mark.parametrize(
    "x, error, match",
    [
        (
            jnp.zeros((T, IN)),
            ValueError,
            r"RNN: expected input \[B, T, I\] with I = input_size = 4, "
            r"got shape \[6, 4\]",
        ),
        (jnp.zeros((B, T, 7)), ValueError, r"RNN: expected input .* got shape \[3, 6, 7\]"),
        (
            jnp.zeros((B, T, IN), jnp.int32),
            TypeError,
            r"RNN: expected a floating-point input, got int32",
        ),
    ],
)
def test_bad_input_is_refused(x, error, match):
    with pytest.raises(error, match=match):
        _make(RNN)(x)


def test_bad_state_is_refused():
    lstm, rnn, x = _make(LSTM, 2), _make(RNN, 2), _x()
    with pytest.raises(
        ValueError,
        match=r"RNN: expected state h \[layers, B, H\] = \[2, 3, 5\], "
        r"got shape \[1, 3, 5\]",
    ):
        rnn(x, jnp.zeros((1, B, H)))
    with pytest.raises(ValueError, match=r"LSTM: expected state c .* got shape \[2, 3, 4\]"):
        lstm(x, (jnp.zeros((2, B, H)), jnp.zeros((2, B, 4))))
    with pytest.raises(TypeError, match=r"LSTM: state must be a pair \(h, c\) or None, got Arr"):
        lstm(x, jnp.zeros((2, B, H)))


@pytest.mark.parametrize(
    "lengths, error, match",
    [
        (
            np.array([1.0, 2.0, 3.0]),
            TypeError,
            r"LSTM: lengths must be integers, got dtype float64",
        ),
        (np.array([1, 2]), ValueError, r"LSTM: expected lengths of shape \[B\] = \[3\], got \[2\]"),
        (
            np.array([1, -1, 3]),
            ValueError,
            r"LSTM: lengths must lie in \[0, T\] = \[0, 6\], got .*-1",
        ),
        (
            np.array([1, 7, 3]),
            ValueError,
            r"LSTM: lengths must lie in \[0, T\] = \[0, 6\], .* to 7",
        ),
    ],
)
def test_bad_lengths_are_refused(lengths, error, match):
    with pytest.raises(error, match=match):
        _make(LSTM)(_x(), lengths=lengths)


def test_traced_lengths_are_checked_for_dtype_and_shape_before_tracing_ends():
    step = js.jit(lambda m, x, n: m(x, lengths=n))
    with pytest.raises(TypeError, match=r"LSTM: lengths must be integers, got dtype float32"):
        step(_make(LSTM), _x(), jnp.ones(B))
    with pytest.raises(ValueError, match=r"LSTM: expected lengths of shape .* got \[3, 1\]"):
        step(_make(LSTM), _x(), jnp.ones((B, 1), jnp.int32))


# -- PyTorch ---------------------------------------------------------------------------------

TOLERANCE = 1e-5  # float32 on CPU; measured: outputs <= 3e-7, gradients <= 1.1e-6


def _torch_pair(torch, cls, layers, **kwargs):
    torch.manual_seed(0)
    ref = getattr(torch.nn, cls.__name__)(IN, H, layers, batch_first=True, **kwargs)
    model = _make(cls, layers, **kwargs)
    model.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    return ref, model


def _weighted_sum(seq, final, like):
    """A loss that weighs every output entry differently, so every gradient is checked."""
    parts = [seq, *final]
    shapes = [tuple(p.shape) for p in parts]
    weights = [np.cos(np.arange(np.prod(s))).reshape(s).astype(np.float32) for s in shapes]
    return sum((p * like(w)).sum() for p, w in zip(parts, weights, strict=True))


def _torch_run(torch, ref, cls, x, state):
    xt = torch.tensor(np.asarray(x), requires_grad=True)
    st = tuple(torch.tensor(np.asarray(s), requires_grad=True) for s in _final(cls, state))
    seq, final = ref(xt, st if cls is LSTM else st[0])
    final = final if cls is LSTM else (final,)
    _weighted_sum(seq, final, torch.tensor).backward()
    out = {"sequence": seq, **{f"state{i}": f for i, f in enumerate(final)}, "grad_x": xt.grad}
    out |= {f"grad_state{i}": s.grad for i, s in enumerate(st)}
    out |= {f"grad_{k}": p.grad for k, p in ref.named_parameters()}
    return {k: v.detach().numpy() for k, v in out.items()}


def _js_run(model, cls, x, state):
    """Outputs and every gradient from one differentiated call at the split/merge boundary."""
    graphdef, params = js.split(model)

    def loss(params, x, state):
        seq, final = js.merge(graphdef, params)(x, state)
        outputs = {"sequence": seq, **{f"state{i}": f for i, f in enumerate(_final(cls, final))}}
        return _weighted_sum(seq, _final(cls, final), jnp.asarray), outputs

    grads, out = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(params, x, state)
    out["grad_x"] = grads[1]
    out |= {f"grad_state{i}": g for i, g in enumerate(_final(cls, grads[2]))}
    return out | {f"grad_{k}": g for k, g in flatten_state(grads[0]).items()}


def compare_with_torch(torch, cls, layers, **kwargs):
    """Largest absolute difference to PyTorch per output, state and gradient."""
    ref, model = _torch_pair(torch, cls, layers, **kwargs)
    x, state = _x(), _state(cls, layers)
    want, got = _torch_run(torch, ref, cls, x, state), _js_run(model, cls, x, state)
    assert sorted(want) == sorted(got)
    return {k: float(np.abs(np.asarray(got[k]) - want[k]).max()) for k in want}


@pytest.mark.torch
@pytest.mark.parametrize(
    "cls, layers, kwargs",
    [
        (RNN, 1, {"nonlinearity": "tanh"}),
        (RNN, 2, {"nonlinearity": "relu"}),
        (LSTM, 1, {}),
        (LSTM, 2, {}),
        (LSTM, 2, {"bias": False}),
    ],
)
def test_matches_pytorch(cls, layers, kwargs):
    torch = pytest.importorskip("torch")
    diffs = compare_with_torch(torch, cls, layers, **kwargs)
    assert max(diffs.values()) <= TOLERANCE, diffs


class _LSTMRegressor(js.Module):
    """LSTM + linear head on the last step, from js-nn alone (the head is a Parameter pair)."""

    def __init__(self, rngs):
        super().__init__()
        self.lstm = LSTM(IN, H, 2, rngs=rngs)
        self.head_weight = js.Parameter(jnp.zeros((2, H)))
        self.head_bias = js.Parameter(jnp.zeros(2))

    def forward(self, x):
        seq, _ = self.lstm(x)
        return seq[:, -1] @ self.head_weight.value.T + self.head_bias.value


@pytest.mark.torch
def test_lstm_model_loads_pytorch_weights_and_gives_its_outputs():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    lstm, head = torch.nn.LSTM(IN, H, 2, batch_first=True), torch.nn.Linear(H, 2)
    state = {f"lstm.{k}": v for k, v in lstm.state_dict().items()}
    state |= {f"head_{k}": v for k, v in head.state_dict().items()}
    model = _LSTMRegressor(js.Rngs(params=1))
    model.load_state_dict({k: v.numpy() for k, v in state.items()})
    x = _x()
    with torch.no_grad():
        want = head(lstm(torch.tensor(np.asarray(x)))[0][:, -1]).numpy()
    np.testing.assert_allclose(model(x), want, atol=TOLERANCE, rtol=0)
