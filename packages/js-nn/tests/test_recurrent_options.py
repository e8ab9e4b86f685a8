"""GRU and the PyTorch options of RNN/LSTM/GRU: batch_first, bias, dropout, dtype, refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js._checks import flatten_state
from js.nn import GRU, LSTM, RNN

B, T, IN, H = 3, 5, 4, 6
TOLERANCE = 1e-5  # float32 on CPU; measured: outputs and gradients <= 1.5e-6


def _x(seed=0, shape=(B, T, IN)):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _parts(cls, state) -> tuple:
    """The state as a tuple of arrays: ``(h, c)`` for LSTM, ``(h,)`` otherwise."""
    return tuple(state) if cls is LSTM else (state,)


def _state(cls, layers, seed=1):
    parts = tuple(_x(seed + i, (layers, B, H)) for i in range(2 if cls is LSTM else 1))
    return parts if cls is LSTM else parts[0]


def _input(batch_first: bool):
    x = _x()
    return x if batch_first else jnp.swapaxes(x, 0, 1)  # [T, B, I]


# -- PyTorch: outputs and every gradient ------------------------------------------------------


def _weighted_sum(arrays, like):
    """A loss that weighs every output entry differently, so every gradient is checked."""
    total = 0.0
    for a in arrays:
        w = np.cos(np.arange(np.prod(a.shape))).reshape(tuple(a.shape)).astype(np.float32)
        total = total + (a * like(w)).sum()
    return total


def _torch_run(torch, ref, cls, x, state):
    xt = torch.tensor(np.asarray(x), requires_grad=True)
    st = tuple(torch.tensor(np.asarray(s), requires_grad=True) for s in _parts(cls, state))
    seq, final = ref(xt, st if cls is LSTM else st[0])
    final = _parts(cls, final)
    _weighted_sum((seq, *final), torch.tensor).backward()
    out = {"sequence": seq, "grad_x": xt.grad, **{f"state{i}": f for i, f in enumerate(final)}}
    out |= {f"grad_state{i}": s.grad for i, s in enumerate(st)}
    out |= {f"grad_{k}": p.grad for k, p in ref.named_parameters()}
    return {k: v.detach().numpy() for k, v in out.items()}


def _js_run(model, cls, x, state):
    graphdef, params = js.split(model)

    def loss(params, x, state):
        seq, final = js.merge(graphdef, params)(x, state)
        final = _parts(cls, final)
        out = {"sequence": seq, **{f"state{i}": f for i, f in enumerate(final)}}
        return _weighted_sum((seq, *final), jnp.asarray), out

    grads, out = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(params, x, state)
    out["grad_x"] = grads[1]
    out |= {f"grad_state{i}": g for i, g in enumerate(_parts(cls, grads[2]))}
    return out | {f"grad_{k}": g for k, g in flatten_state(grads[0]).items()}


def _pair(torch, cls, layers, **kwargs):
    """A torch layer and the js one with its weights; torch's biases are nonzero (uniform)."""
    torch.manual_seed(0)
    ref = getattr(torch.nn, cls.__name__)(IN, H, layers, **kwargs)
    model = cls(IN, H, layers, rngs=js.Rngs(params=0), **kwargs)
    js.nn.load_torch_state_dict(model, ref.state_dict())
    return ref, model


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize(
    "cls, layers, kwargs",
    [
        (GRU, 1, {"batch_first": True}),
        (GRU, 2, {"batch_first": False}),
        (GRU, 2, {"batch_first": True, "bias": False}),
        (LSTM, 2, {"batch_first": False}),
        (LSTM, 1, {"batch_first": False, "bias": False}),
        (RNN, 2, {"batch_first": False, "nonlinearity": "relu"}),
        (RNN, 1, {"batch_first": True, "bias": False}),
    ],
)
def test_matches_pytorch(cls, layers, kwargs, mode):
    torch = pytest.importorskip("torch")
    ref, model = _pair(torch, cls, layers, **kwargs)
    getattr(ref, mode)(), getattr(model, mode)()
    x, state = _input(kwargs["batch_first"]), _state(cls, layers)
    want, got = _torch_run(torch, ref, cls, x, state), _js_run(model, cls, x, state)
    assert sorted(want) == sorted(got)
    diffs = {k: float(np.abs(np.asarray(got[k]) - want[k]).max()) for k in want}
    assert max(diffs.values()) <= TOLERANCE, diffs


@pytest.mark.torch
@pytest.mark.parametrize("cls", [RNN, LSTM, GRU])
def test_dropout_between_layers_in_eval_mode_matches_pytorch(cls):
    torch = pytest.importorskip("torch")
    ref, model = _pair(torch, cls, 2, dropout=0.5, batch_first=False)
    ref.eval(), model.eval()
    x = _input(False)
    with torch.no_grad():
        want, _ = ref(torch.tensor(np.asarray(x)))
    got, _ = model(x)  # no rngs needed in evaluation
    np.testing.assert_allclose(got, want.numpy(), atol=TOLERANCE, rtol=0)


@pytest.mark.torch
@pytest.mark.parametrize("cls", [LSTM, GRU])
def test_state_dict_round_trips_with_pytorch(cls):
    torch = pytest.importorskip("torch")
    for bias in (True, False):
        ref, model = _pair(torch, cls, 2, bias=bias)
        exported = js.nn.torch_state_dict(model)
        assert list(exported) == list(ref.state_dict())
        ref.load_state_dict({k: torch.from_numpy(v) for k, v in exported.items()})


@pytest.mark.torch
def test_gru_time_major_lengths_match_pytorch_packed_sequences():
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    ref, model = _pair(torch, GRU, 2, batch_first=False)
    x, h0, lengths = _input(False), _state(GRU, 2), [5, 2, 4]  # PyTorch refuses zero lengths
    packed = pack_padded_sequence(
        torch.tensor(np.asarray(x)), torch.tensor(lengths), enforce_sorted=False
    )
    with torch.no_grad():
        out, h = ref(packed, torch.tensor(np.asarray(h0)))
    want, _ = pad_packed_sequence(out, total_length=T)  # [T, B, H], zeros past each length
    seq, final = model(x, h0, lengths)
    np.testing.assert_allclose(seq, want.numpy(), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(final, h.numpy(), atol=TOLERANCE, rtol=0)


# -- GRU -------------------------------------------------------------------------------------


def test_gru_state_dict_follows_pytorch():
    sd = GRU(IN, H, 2, rngs=js.Rngs(params=0)).state_dict()
    assert list(sd) == [
        f"{p}_l{k}" for k in (0, 1) for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ]
    assert sd["weight_ih_l0"].shape == (3 * H, IN) and sd["weight_hh_l1"].shape == (3 * H, H)
    assert sd["bias_hh_l1"].shape == (3 * H,) and not sd["bias_hh_l1"].any()
    assert list(GRU(IN, H, bias=False, rngs=js.Rngs(params=0)).state_dict()) == [
        "weight_ih_l0",
        "weight_hh_l0",
    ]


def test_gru_formula_by_hand():
    """One step of PyTorch's GRU written out, b_hn inside the reset product."""
    gru = GRU(IN, H, rngs=js.Rngs(params=0))
    rng = np.random.default_rng(3)
    for name in ("bias_ih_l0", "bias_hh_l0"):
        getattr(gru, name).value = jnp.asarray(rng.normal(size=3 * H), jnp.float32)
    x, h = _x(shape=(B, 1, IN)), _x(1, (1, B, H))
    seq, _ = gru(x, h)
    p = {k: np.asarray(v, np.float64) for k, v in gru.state_dict().items()}
    gi = np.asarray(x[:, 0], np.float64) @ p["weight_ih_l0"].T + p["bias_ih_l0"]
    gh = np.asarray(h[0], np.float64) @ p["weight_hh_l0"].T + p["bias_hh_l0"]
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    r, z = sig(gi[:, :H] + gh[:, :H]), sig(gi[:, H : 2 * H] + gh[:, H : 2 * H])
    n = np.tanh(gi[:, 2 * H :] + r * gh[:, 2 * H :])
    np.testing.assert_allclose(seq[:, 0], (1 - z) * n + z * np.asarray(h[0]), atol=1e-6)


def test_gru_under_jit_with_lengths_matches_eager():
    gru = GRU(IN, H, 2, batch_first=False, rngs=js.Rngs(params=0))
    x, lengths = _input(False), jnp.array([5, 2, 0])
    eager = gru(x, lengths=lengths)
    compiled = js.jit(lambda m, x, n: m(x, lengths=n))(gru, x, lengths)
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, atol=1e-6), eager, compiled)
    np.testing.assert_array_equal(eager[0][2:, 1], 0.0)  # time-major: padded steps of b = 1


# -- batch_first=False -----------------------------------------------------------------------


@pytest.mark.parametrize("cls", [RNN, LSTM, GRU])
def test_batch_first_false_is_the_transposed_batch_first_layer(cls):
    first = cls(IN, H, 2, rngs=js.Rngs(params=0))
    second = cls(IN, H, 2, batch_first=False, rngs=js.Rngs(params=0))
    x, state, lengths = _x(), _state(cls, 2), jnp.array([5, 3, 0])
    seq_a, final_a = first(x, state, lengths)
    seq_b, final_b = second(jnp.swapaxes(x, 0, 1), state, lengths)
    np.testing.assert_allclose(jnp.swapaxes(seq_b, 0, 1), seq_a, atol=1e-6)
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, atol=1e-6), final_a, final_b)


def test_repr_shows_the_options():
    lstm = LSTM(IN, H, 2, False, False, 0.25, rngs=js.Rngs(params=0))
    assert repr(lstm).splitlines()[0] == (
        "LSTM(4, 6, num_layers=2, bias=False, batch_first=False, dropout=0.25"
    )
    assert repr(GRU(IN, H, rngs=js.Rngs(params=0))).splitlines()[0] == "GRU(4, 6"


# -- dropout between layers ------------------------------------------------------------------


@pytest.mark.parametrize("cls", [RNN, LSTM, GRU])
def test_dropout_acts_between_layers_in_training_only(cls):
    model = cls(IN, H, 2, dropout=0.5, rngs=js.Rngs(params=0))
    x = _x()
    clean_seq, clean = model.eval()(x)
    model.train()
    seq, final = model(x, rngs=js.Rngs(dropout=0))
    again, _ = model(x, rngs=js.Rngs(dropout=0))
    other, _ = model(x, rngs=js.Rngs(dropout=1))
    assert seq.shape == clean_seq.shape and np.array_equal(seq, again)  # same key, same mask
    assert not np.allclose(seq, clean_seq) and not np.allclose(seq, other)
    # Layer 0 reads the undropped input, so its final state is the evaluation one.
    h, h_clean = _parts(cls, final)[0], _parts(cls, clean)[0]
    np.testing.assert_allclose(h[0], h_clean[0], atol=1e-6)
    assert not np.allclose(h[1], h_clean[1])


def test_dropout_runs_under_jit_and_grad():
    model = LSTM(IN, H, 2, dropout=0.3, rngs=js.Rngs(params=0))
    rngs = js.Rngs(dropout=0)

    @js.jit
    def step(model, rngs, x):
        return js.grad(lambda m, rngs: jnp.sum(m(x, rngs=rngs)[0] ** 2))(model, rngs)

    grads = step(model, rngs, _x())
    assert all(np.isfinite(g).all() for g in flatten_state(grads).values())


def test_dropout_in_training_without_rngs_is_refused():
    model = GRU(IN, H, 2, dropout=0.5, rngs=js.Rngs(params=0))
    with pytest.raises(
        ValueError,
        match=r"GRU: dropout=0.5 between layers in training mode "
        r"needs random keys. Fix: call it as gru\(x, rngs=",
    ):
        model(_x())
    model.eval()(_x())  # evaluation needs no keys


def test_dropout_with_one_layer_warns_as_pytorch():
    with pytest.warns(
        UserWarning,
        match=r"LSTM: dropout acts between stacked layers, so "
        r"dropout=0.5 with num_layers=1 has no effect",
    ):
        model = LSTM(IN, H, dropout=0.5, rngs=js.Rngs(params=0))
    model(_x())  # training, no rngs: nothing to drop


# -- dtype -----------------------------------------------------------------------------------


def test_parameters_are_float32_under_x64_unless_given_dtype():
    with jax.enable_x64(True):
        # One shape for every draw, so x64 mode compiles the initialisers once.
        default = [cls(H, H, rngs=js.Rngs(params=0)) for cls in (LSTM, GRU)]
        wide = GRU(H, H, dtype=jnp.float64, rngs=js.Rngs(params=0))
    assert {v.dtype for m in default for v in m.state_dict().values()} == {np.dtype(np.float32)}
    assert {v.dtype for v in wide.state_dict().values()} == {np.dtype(np.float64)}
    half = LSTM(IN, H, dtype=jnp.bfloat16, rngs=js.Rngs(params=0))
    assert {v.dtype for v in half.state_dict().values()} == {np.dtype(jnp.bfloat16)}


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"batch_first": 1}, TypeError, r"GRU: batch_first must be True or False, got 1"),
        ({"bias": None}, TypeError, r"GRU: bias must be True or False, got None"),
        ({"bidirectional": "no"}, TypeError, r"GRU: bidirectional must be True or False, got 'no'"),
        ({"dropout": "0.1"}, TypeError, r"GRU: dropout must be a float in \[0, 1\], got '0.1'"),
        ({"dropout": True}, TypeError, r"GRU: dropout must be a float in \[0, 1\], got True"),
        ({"dropout": 1.5}, ValueError, r"GRU: dropout must be in \[0, 1\], got 1.5"),
        ({"dtype": jnp.int32}, TypeError, r"GRU: dtype must be a floating-point dtype .*Fix:"),
        ({"dtype": "nonsense"}, TypeError, r"GRU: dtype must be a floating-point .*'nonsense'"),
    ],
)
def test_bad_options_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        GRU(IN, H, 2, rngs=js.Rngs(params=0), **kwargs)


def test_lstm_proj_size_is_refused():
    with pytest.raises(
        NotImplementedError,
        match=r"LSTM: proj_size=3 \(projected hidden "
        r"state\) is not implemented. Fix: pass",
    ):
        LSTM(IN, H, proj_size=3, rngs=js.Rngs(params=0))


def test_time_major_input_error_names_the_layout():
    with pytest.raises(
        ValueError,
        match=r"RNN: expected input \[T, B, I\] \(batch_first=False\) "
        r"with I = input_size = 4, got shape \[5, 3, 7\]",
    ):
        RNN(IN, H, batch_first=False, rngs=js.Rngs(params=0))(jnp.zeros((T, B, 7)))


def test_time_major_lengths_are_checked_against_the_batch_axis():
    with pytest.raises(
        ValueError, match=r"GRU: expected lengths of shape \[B\] = \[3\], got \[5\]"
    ):
        GRU(IN, H, batch_first=False, rngs=js.Rngs(params=0))(_input(False), lengths=[1] * T)
