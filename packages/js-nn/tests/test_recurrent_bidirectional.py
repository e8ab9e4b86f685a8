"""bidirectional=True for RNN, LSTM and GRU: PyTorch's names, layout, numbers and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js._checks import flatten_state
from js.nn import GRU, LSTM, RNN

B, T, IN, H = 3, 5, 4, 6
TOLERANCE = 1e-5  # float32 on CPU; measured: outputs and gradients <= 1e-6

CASES = [  # (class, constructor options): every cell, and LSTM's fused and autodiff backward
    (RNN, {"nonlinearity": "tanh"}),
    (RNN, {"nonlinearity": "relu"}),
    (LSTM, {}),
    (LSTM, {"fused_backward": False}),
    (GRU, {}),
]
IDS = ["rnn-tanh", "rnn-relu", "lstm", "lstm-autodiff", "gru"]


def _x(seed=0, shape=(B, T, IN)):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _parts(cls, state) -> tuple:
    """The state as a tuple of arrays: ``(h, c)`` for LSTM, ``(h,)`` otherwise."""
    return tuple(state) if cls is LSTM else (state,)


def _state(cls, layers, seed=1):
    parts = tuple(_x(seed + i, (2 * layers, B, H)) for i in range(2 if cls is LSTM else 1))
    return parts if cls is LSTM else parts[0]


def _pair(torch, cls, layers, **kwargs):
    """A bidirectional torch layer and the js one holding its weights (torch's nonzero biases)."""
    torch_kwargs = {k: v for k, v in kwargs.items() if k != "fused_backward"}
    torch.manual_seed(0)
    ref = getattr(torch.nn, cls.__name__)(IN, H, layers, bidirectional=True, **torch_kwargs)
    model = cls(IN, H, layers, bidirectional=True, rngs=js.Rngs(params=0), **kwargs)
    assert js.nn.load_torch_state_dict(model, ref.state_dict()) == js.IncompatibleKeys([], [])
    return ref, model


def _weighted_sum(arrays, like):
    """A loss that weighs every output entry differently, so every gradient is checked."""
    total = 0.0
    for a in arrays:
        w = np.cos(np.arange(np.prod(a.shape))).reshape(tuple(a.shape)).astype(np.float32)
        total = total + (a * like(w)).sum()
    return total


def _torch_run(torch, ref, cls, x, state, lengths=None):
    """Torch's outputs and gradients; with ``lengths``, through a packed sequence."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    xt = torch.tensor(np.asarray(x), requires_grad=True)
    st = tuple(torch.tensor(np.asarray(s), requires_grad=True) for s in _parts(cls, state))
    batch_first = ref.batch_first
    inputs = xt
    if lengths is not None:
        inputs = pack_padded_sequence(
            xt, torch.tensor(lengths), batch_first=batch_first, enforce_sorted=False
        )
    seq, final = ref(inputs, st if cls is LSTM else st[0])
    if lengths is not None:
        seq, _ = pad_packed_sequence(seq, batch_first=batch_first, total_length=T)
    final = _parts(cls, final)
    _weighted_sum((seq, *final), torch.tensor).backward()
    out = {"sequence": seq, "grad_x": xt.grad, **{f"state{i}": f for i, f in enumerate(final)}}
    out |= {f"grad_state{i}": s.grad for i, s in enumerate(st)}
    out |= {f"grad_{k}": p.grad for k, p in ref.named_parameters()}
    return {k: v.detach().numpy() for k, v in out.items()}


def _js_run(model, cls, x, state, lengths=None):
    graphdef, params = js.split(model)

    def loss(params, x, state):
        seq, final = js.merge(graphdef, params)(x, state, lengths)
        final = _parts(cls, final)
        out = {"sequence": seq, **{f"state{i}": f for i, f in enumerate(final)}}
        return _weighted_sum((seq, *final), jnp.asarray), out

    grads, out = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(params, x, state)
    out["grad_x"] = grads[1]
    out |= {f"grad_state{i}": g for i, g in enumerate(_parts(cls, grads[2]))}
    return out | {f"grad_{k}": g for k, g in flatten_state(grads[0]).items()}


def _diffs(torch, ref, model, cls, x, state, lengths=None) -> dict[str, float]:
    want = _torch_run(torch, ref, cls, x, state, lengths)
    got = _js_run(model, cls, x, state, lengths)
    assert sorted(want) == sorted(got)
    for k in want:
        assert np.shape(got[k]) == want[k].shape, k
    return {k: float(np.abs(np.asarray(got[k]) - want[k]).max()) for k in want}


def _input(batch_first: bool):
    x = _x()
    return x if batch_first else jnp.swapaxes(x, 0, 1)  # [T, B, I]


# -- layout ----------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("cls", [RNN, LSTM, GRU])
@pytest.mark.parametrize("bias", [True, False])
def test_state_dict_keys_order_and_shapes_equal_pytorchs(cls, bias):
    torch = pytest.importorskip("torch")
    ref = getattr(torch.nn, cls.__name__)(IN, H, 2, bias=bias, bidirectional=True)
    sd = cls(IN, H, 2, bias=bias, bidirectional=True, rngs=js.Rngs(params=0)).state_dict()
    assert list(sd) == list(ref.state_dict())
    assert {k: v.shape for k, v in sd.items()} == {
        k: tuple(v.shape) for k, v in ref.state_dict().items()
    }
    # The round trip: js's torch-layout export loads into torch strictly.
    model = cls(IN, H, 2, bias=bias, bidirectional=True, rngs=js.Rngs(params=1))
    exported = js.nn.torch_state_dict(model)
    ref.load_state_dict({k: torch.from_numpy(v) for k, v in exported.items()})


def test_reverse_weights_are_drawn_like_the_forward_ones():
    sd = LSTM(8, 64, bidirectional=True, rngs=js.Rngs(params=0)).state_dict()
    bound = 1 / np.sqrt(64)
    for name in ("weight_ih_l0_reverse", "weight_hh_l0_reverse"):
        w = sd[name]
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
        assert abs(w.std() - bound / np.sqrt(3)) < 0.05 * bound
    assert not np.array_equal(sd["weight_hh_l0"], sd["weight_hh_l0_reverse"])  # own draws
    # The biases as the forward direction's: LSTM's forget-gate total bias one.
    np.testing.assert_array_equal(sd["bias_ih_l0_reverse"], sd["bias_ih_l0"])
    np.testing.assert_array_equal(sd["bias_hh_l0_reverse"], 0.0)


def test_repr_and_attribute():
    gru = GRU(IN, H, 2, bidirectional=True, rngs=js.Rngs(params=0))
    assert gru.bidirectional is True
    assert repr(gru).splitlines()[0] == "GRU(4, 6, num_layers=2, bidirectional=True"
    assert "bidirectional" not in repr(GRU(IN, H, rngs=js.Rngs(params=0)))


# -- PyTorch: outputs, h_n/c_n and every gradient ---------------------------------------------


def _check_against_torch(cls, kwargs, layers, batch_first, lengths=None):
    torch = pytest.importorskip("torch")
    ref, model = _pair(torch, cls, layers, batch_first=batch_first, **kwargs)
    x, state = _input(batch_first), _state(cls, layers)
    diffs = _diffs(torch, ref, model, cls, x, state, lengths)
    assert max(diffs.values()) <= TOLERANCE, diffs


@pytest.mark.torch
@pytest.mark.parametrize(
    "cls, kwargs, layers, batch_first",
    [  # every case, every layer count and both layouts, in few compilations
        (RNN, {"nonlinearity": "tanh"}, 1, True),
        (RNN, {"nonlinearity": "relu"}, 2, False),
        (LSTM, {}, 2, True),
        (LSTM, {"fused_backward": False}, 2, False),
        # LSTM's and GRU's one time-major layer: each cell's two layers and the time-major
        # layout are above, every combination in the full tier's test below
        pytest.param(LSTM, {}, 1, False, marks=pytest.mark.slow),
        (GRU, {}, 2, True),
        pytest.param(GRU, {}, 1, False, marks=pytest.mark.slow),
    ],
)
def test_matches_pytorch(cls, kwargs, layers, batch_first):
    _check_against_torch(cls, kwargs, layers, batch_first)


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("cls, kwargs", CASES, ids=IDS)
def test_matches_pytorch_every_combination(cls, kwargs, layers, batch_first):
    _check_against_torch(cls, kwargs, layers, batch_first)


@pytest.mark.torch
@pytest.mark.parametrize("cls", [RNN, LSTM, GRU])
def test_default_state_and_no_bias_match_pytorch(cls):
    torch = pytest.importorskip("torch")
    ref, model = _pair(torch, cls, 2, batch_first=True, bias=False)
    x = _x()
    with torch.no_grad():
        want_seq, want = ref(torch.tensor(np.asarray(x)))
    seq, final = model(x)
    assert seq.shape == (B, T, 2 * H)
    np.testing.assert_allclose(seq, want_seq.numpy(), atol=TOLERANCE, rtol=0)
    for got, w in zip(_parts(cls, final), _parts(cls, want), strict=True):
        assert got.shape == (4, B, H)
        np.testing.assert_allclose(got, w.numpy(), atol=TOLERANCE, rtol=0)


@pytest.mark.torch
@pytest.mark.parametrize(
    "cls, kwargs, batch_first",
    [(RNN, {"nonlinearity": "relu"}, False), (LSTM, {}, True), (GRU, {}, False)],
)
def test_lengths_match_pytorch_packed_sequences(cls, kwargs, batch_first):
    """The reverse pass of a padded row starts at its last valid step, as with packing."""
    _check_against_torch(cls, kwargs, 2, batch_first, [5, 2, 4])  # torch refuses zero lengths


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("cls, kwargs", CASES, ids=IDS)
def test_lengths_match_pytorch_packed_sequences_every_combination(cls, kwargs, batch_first):
    _check_against_torch(cls, kwargs, 2, batch_first, [5, 2, 4])


def test_lengths_equal_running_each_row_alone():
    """Padding never reaches the reverse pass; a zero-length row keeps its initial carry."""
    cls = LSTM
    model = cls(IN, H, 2, bidirectional=True, rngs=js.Rngs(params=0))
    x, state, lengths = _x(), _state(cls, 2), [5, 2, 0]
    seq, final = model(x, state, lengths)
    for b, n in enumerate(lengths):
        one = jax.tree.map(lambda s, b=b: s[:, b : b + 1], state)
        ref = one
        if n:
            ref_seq, ref = model(x[b : b + 1, :n], one)
            np.testing.assert_allclose(seq[b, :n], ref_seq[0], atol=1e-6)
        np.testing.assert_array_equal(seq[b, n:], 0.0)
        for got, want in zip(_parts(cls, final), _parts(cls, ref), strict=True):
            np.testing.assert_allclose(got[:, b], want[:, 0], atol=1e-6)


@pytest.mark.torch
def test_load_weights_torch_layout_loads_a_torch_file_strictly(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    ref = torch.nn.LSTM(IN, H, 2, batch_first=True, bidirectional=True)
    st_torch.save_file(ref.state_dict(), tmp_path / "lstm.safetensors")
    model = LSTM(IN, H, 2, bidirectional=True, rngs=js.Rngs(params=0))
    keys = js.nn.load_weights(model, tmp_path / "lstm.safetensors", layout="torch")
    assert keys == js.IncompatibleKeys([], [])
    x = _x()
    with torch.no_grad():
        want, _ = ref(torch.tensor(np.asarray(x)))
    np.testing.assert_allclose(model(x)[0], want.numpy(), atol=TOLERANCE, rtol=0)


# -- dropout, js.jit, the fused LSTM backward, refusals ---------------------------------------


# The dropout between layers is one code path for every cell: LSTM's (h, c) here, RNN's in the
# full tier.
@pytest.mark.parametrize("cls", [pytest.param(RNN, marks=pytest.mark.slow), LSTM])
def test_dropout_acts_on_the_concatenated_output_between_layers(cls):
    model = cls(IN, H, 2, dropout=1.0, bidirectional=True, rngs=js.Rngs(params=0))
    x, state = _x(), _state(cls, 2)
    seq, final = model.train()(x, state, rngs=js.Rngs(dropout=0))
    assert seq.shape == (B, T, 2 * H)
    # p = 1 zeroes both directions of layer 0's output: layer 1 alone on zeros, its own state.
    top = cls(2 * H, H, bidirectional=True, rngs=js.Rngs(params=1))
    top.load_state_dict(
        {k.replace("_l1", "_l0"): v for k, v in model.state_dict().items() if "_l1" in k}
    )
    want_seq, want = top(jnp.zeros((B, T, 2 * H)), jax.tree.map(lambda s: s[2:], state))
    np.testing.assert_allclose(seq, want_seq, atol=1e-6)
    for got, w in zip(_parts(cls, final), _parts(cls, want), strict=True):
        np.testing.assert_allclose(got[2:], w, atol=1e-6)
    # Layer 0 is not dropped: its final state is the evaluation one.
    _, evaluated = model.eval()(x, state)
    for got, w in zip(_parts(cls, final), _parts(cls, evaluated), strict=True):
        np.testing.assert_allclose(got[:2], w[:2], atol=1e-6)


def test_dropout_half_differs_from_evaluation_and_follows_the_key():
    model = GRU(IN, H, 2, dropout=0.5, bidirectional=True, rngs=js.Rngs(params=0))
    x = _x()
    a, h_a = model.train()(x, rngs=js.Rngs(dropout=0))
    b, _ = model(x, rngs=js.Rngs(dropout=0))
    c, _ = model(x, rngs=js.Rngs(dropout=1))
    e, h_e = model.eval()(x)
    assert a.shape == e.shape == (B, T, 2 * H) and h_a.shape == (4, B, H)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c) and not np.allclose(a, e)
    np.testing.assert_allclose(h_a[:2], h_e[:2], atol=1e-6)  # layer 0 sees no dropout


# GRU under js.jit with lengths: test_recurrent_options.py's
# test_gru_under_jit_with_lengths_matches_eager; both directions under js.jit: the LSTM case.
@pytest.mark.parametrize("cls", [LSTM, pytest.param(GRU, marks=pytest.mark.slow)])
def test_jit_matches_eager_with_and_without_lengths(cls):
    model = cls(IN, H, 2, batch_first=False, bidirectional=True, rngs=js.Rngs(params=0))
    x, state = _input(False), _state(cls, 2)
    step = js.jit(lambda m, x, s, n: m(x, s, n))
    for lengths in (None, jnp.array([5, 2, 0])):
        eager = model(x, state, lengths)
        compiled = step(model, x, state, lengths)
        jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, atol=1e-6), eager, compiled)


def test_grad_under_jit_matches_eager():
    model = LSTM(IN, H, 2, bidirectional=True, rngs=js.Rngs(params=0))
    x = _x()

    def loss(m, x):
        seq, (h, c) = m(x)
        return jnp.sum(jnp.sin(seq)) + jnp.sum(h * c)

    eager = js.grad(loss)(model, x)
    compiled = js.jit(js.grad(loss))(model, x)
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, atol=1e-6), eager, compiled)


def _primitives(jaxpr, found: list) -> list:
    for eqn in jaxpr.eqns:
        found.append(eqn.primitive.name)
        for param in eqn.params.values():  # a scan's body, a jit's inner program
            inner = getattr(param, "jaxpr", param)
            if hasattr(inner, "eqns"):
                _primitives(inner, found)
    return found


@pytest.mark.parametrize("fused", [True, False])
def test_each_direction_of_each_layer_uses_the_fused_lstm_kernel(fused):
    model = LSTM(IN, H, 2, bidirectional=True, fused_backward=fused, rngs=js.Rngs(params=0))
    names = _primitives(jax.make_jaxpr(lambda x: model(x))(_x()).jaxpr, [])
    assert names.count("custom_vjp_call") == (4 if fused else 0)
    assert names.count("scan") == 4  # the kernel's forward is a scan too


def test_bad_state_names_the_bidirectional_shape():
    gru = GRU(IN, H, 2, bidirectional=True, rngs=js.Rngs(params=0))
    with pytest.raises(
        ValueError,
        match=r"GRU: expected state h \[2 \* layers, B, H\] = \[4, 3, 6\], got shape \[2, 3, 6\]",
    ):
        gru(_x(), jnp.zeros((2, B, H)))


def test_unbatched_input_is_refused_as_for_one_direction():
    with pytest.raises(ValueError, match=r"LSTM: expected input \[B, T, I\] .* got shape \[5, 4\]"):
        LSTM(IN, H, bidirectional=True, rngs=js.Rngs(params=0))(_x(shape=(T, IN)))
