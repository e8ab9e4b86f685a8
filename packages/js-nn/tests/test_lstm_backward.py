"""The LSTM's hand-written backward (``fused_backward``): gradients, T = 0, forward mode, and
the masked (``lengths``) path's gradients against PyTorch's packed sequences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js._checks import flatten_state
from js.nn._lstm_kernel import forward_mode
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

    # One program: eager, each op around the scans would compile on its own (4 s for three).
    g_params, g_x, g_state = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(params, x, state)
    return {**flatten_state(g_params), "x": g_x, "h0": g_state[0], "c0": g_state[1]}


def test_fused_backward_matches_autodiff_for_inputs_state_and_every_parameter():
    model, x = _make(), _x()
    state = (_x(1, (2, B, H)), _x(2, (2, B, H)))
    fused = _grads(model, x, state)
    autodiff = _grads(model, x, state, lengths=[T] * B)  # the masked path: plain autodiff
    unfused = _grads(_make(fused_backward=False), x, state)
    assert sorted(fused) == sorted(autodiff) and len(fused) == 8 + 3
    for key in fused:
        assert np.abs(fused[key]).max() > 1e-3, key  # every gradient is exercised
        np.testing.assert_allclose(fused[key], autodiff[key], atol=1e-5, err_msg=key)
        np.testing.assert_allclose(fused[key], unfused[key], atol=1e-5, err_msg=key)


@pytest.mark.parametrize("fused_backward", [True, False])
def test_gradient_at_T_zero(fused_backward):
    """T = 0: the state passes through unchanged, so d(sum h)/dh0 is one and the rest zero."""
    model, x = _make(fused_backward=fused_backward), jnp.ones((B, 0, IN))
    state = (_x(1, (2, B, H)), _x(2, (2, B, H)))
    graphdef, params = js.split(model)

    def loss(params, x, state):
        _, (h, c) = js.merge(graphdef, params)(x, state)
        return h.sum() + 2 * c.sum()

    g_params, g_x, (g_h, g_c) = jax.grad(loss, argnums=(0, 1, 2))(params, x, state)
    assert g_x.shape == (B, 0, IN)
    np.testing.assert_array_equal(g_h, 1.0)
    np.testing.assert_array_equal(g_c, 2.0)
    assert all(not np.any(g) for g in flatten_state(g_params).values())
    # The reported call: js.grad of the model at T = 0.
    grads = js.grad(lambda m, x: m(x)[1][0].sum())(
        LSTM(3, 4, rngs=js.Rngs(params=0)), jnp.ones((2, 0, 3))
    )
    assert all(not np.any(g) for g in jax.tree.leaves(grads))


def _jvp(model, x, dx):
    return jax.jvp(lambda x: model(x), (x,), (dx,))


@pytest.mark.parametrize("fused_backward", [True, False])
def test_forward_mode_works(fused_backward):
    model, x, dx = _make(fused_backward=fused_backward), _x(), _x(3)
    (seq, _), (dseq, (dh, dc)) = _jvp(model, x, dx)
    eps = 1e-3  # central difference, float32
    plus, minus = model(x + eps * dx), model(x - eps * dx)
    np.testing.assert_allclose(dseq, (plus[0] - minus[0]) / (2 * eps), atol=2e-3)
    np.testing.assert_allclose(dc, (plus[1][1] - minus[1][1]) / (2 * eps), atol=2e-3)


# jacfwd and hessian take the scan path jax.jvp takes in test_forward_mode_works (default run);
# hessian's nested case (a JVP tracer under a linearize tracer) is test_forward_mode_detection's.
# Eagerly they compile 56 programs beyond the jvp's (most of the 12 s test_forward_mode_works
# took with them), so they run in the full tier.
@pytest.mark.slow
@pytest.mark.parametrize("fused_backward", [True, False])
def test_jacfwd_and_hessian_work(fused_backward):
    model, x = _make(fused_backward=fused_backward), _x()
    # jacfwd with respect to the parameters, and hessian (forward over reverse)
    graphdef, params = js.split(model)
    jac = jax.jacfwd(lambda p: js.merge(graphdef, p)(x[:1, :3])[1][0].sum())(params)
    rev = jax.grad(lambda p: js.merge(graphdef, p)(x[:1, :3])[1][0].sum())(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), jac, rev)
    hess = jax.hessian(lambda x: model(x)[0].sum())(x[:1, :3])
    assert hess.shape == (1, 3, IN) * 2 and np.isfinite(hess).all()


def test_forward_mode_outside_a_compiled_call_needs_fused_backward_false():
    """The documented limit: a JVP of an already compiled function cannot be seen inside it."""
    x, dx = _x(), _x(3)
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        jax.jvp(jax.jit(lambda x: _make()(x)[0]), (x,), (dx,))
    model = _make(fused_backward=False)
    _, got = jax.jvp(jax.jit(lambda x: model(x)[0]), (x,), (dx,))
    _, want = jax.jvp(lambda x: _make()(x)[0], (x,), (dx,))  # eager: detected, scan path
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_forward_mode_detection():
    x = jnp.ones(2)
    seen = []

    def probe(x):
        seen.append(forward_mode(x, {"nested": [x]}))
        return x.sum()

    probe(x), jax.grad(probe)(x), jax.jvp(probe, (x,), (x,)), jax.hessian(probe)(x)
    jax.vmap(jax.grad(probe))(jnp.ones((2, 2)))
    assert seen == [False, False, True, True, False]


def test_fused_backward_option_is_checked_and_shown():
    with pytest.raises(TypeError, match=r"LSTM: fused_backward must be True or False, got 1"):
        _make(fused_backward=1)
    assert "fused_backward=False" in repr(_make(fused_backward=False)).splitlines()[0]
    assert "fused_backward" not in repr(_make()).splitlines()[0]


# -- lengths (the masked path) against PyTorch's packed sequences ----------------------------


@pytest.mark.torch
def test_lengths_gradients_match_pytorch_packed_sequences():
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    torch.manual_seed(0)
    ref = torch.nn.LSTM(IN, H, 2, batch_first=True)
    model = _make()
    model.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    x, lengths = _x(), [6, 2, 4]  # PyTorch refuses zero lengths in a packed sequence
    state = (_x(1, (2, B, H)), _x(2, (2, B, H)))

    xt = torch.tensor(np.asarray(x), requires_grad=True)
    st = tuple(torch.tensor(np.asarray(s), requires_grad=True) for s in state)
    packed = pack_padded_sequence(xt, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
    out, (h, c) = ref(packed, st)
    seq, _ = pad_packed_sequence(out, batch_first=True, total_length=T)
    weights = [
        torch.tensor(np.cos(np.arange(t.numel())).reshape(t.shape), dtype=torch.float32)
        for t in (seq, h, c)
    ]
    sum((t * w).sum() for t, w in zip((seq, h, c), weights, strict=True)).backward()
    want = {f"{k}": p.grad.numpy() for k, p in ref.named_parameters()}
    want |= {"x": xt.grad.numpy(), "h0": st[0].grad.numpy(), "c0": st[1].grad.numpy()}

    got_out = model(x, state, lengths)
    np.testing.assert_allclose(got_out[0], seq.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(got_out[1][0], h.detach().numpy(), atol=1e-5)
    got = _grads(model, x, state, lengths)
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-5, err_msg=key)
