"""MultiheadAttention's PyTorch options: kdim/vdim, bias, batch_first, dropout, dtype, refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js._checks import flatten_state
from js.nn.attention import MultiheadAttention, padding_mask

B, TQ, TK, D, HEADS, KDIM, VDIM = 2, 4, 5, 8, 2, 6, 3
TOLERANCE = 1e-5  # float32 on CPU; measured: outputs and gradients <= 1e-6
VALID = np.array([[True] * TK, [True, True, False, False, False]])


def _rand(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _inputs(kdim=D, vdim=D, batch_first=True):
    q, k, v = _rand(0, (B, TQ, D)), _rand(1, (B, TK, kdim)), _rand(2, (B, TK, vdim))
    return (q, k, v) if batch_first else tuple(jnp.swapaxes(x, 0, 1) for x in (q, k, v))


def _mha(**kwargs):
    return MultiheadAttention(D, HEADS, rngs=js.Rngs(params=0), **kwargs)


# -- PyTorch ---------------------------------------------------------------------------------


def _weighted(arrays, like):
    total = 0.0
    for a in arrays:
        w = np.cos(np.arange(np.prod(a.shape))).reshape(tuple(a.shape)).astype(np.float32)
        total = total + (a * like(w)).sum()
    return total


def _torch_run(torch, ref, inputs):
    tensors = [torch.tensor(np.asarray(x), requires_grad=True) for x in inputs]
    pad = torch.tensor(~VALID)  # PyTorch's polarity: True = blocked
    out, weights = ref(*tensors, key_padding_mask=pad, average_attn_weights=False)
    _weighted((out, weights), torch.tensor).backward()
    result = {"output": out, "weights": weights}
    result |= {f"grad_{n}": t.grad for n, t in zip("qkv", tensors, strict=True)}
    result |= {f"grad_{k}": p.grad for k, p in ref.named_parameters()}
    return {k: v.detach().numpy() for k, v in result.items()}


def _js_run(mha, inputs):
    graphdef, params = js.split(mha)

    def loss(params, q, k, v):
        out, w = js.merge(graphdef, params)(q, k, v, padding_mask(VALID), need_weights=True)
        return _weighted((out, w), jnp.asarray), {"output": out, "weights": w}

    grads, result = jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True)(params, *inputs)
    result |= {f"grad_{n}": g for n, g in zip("qkv", grads[1:], strict=True)}
    return result | {f"grad_{k}": g for k, g in flatten_state(grads[0]).items()}


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"kdim": KDIM, "vdim": VDIM},
        {"kdim": KDIM, "vdim": VDIM, "bias": False, "batch_first": False},
        {"bias": False},
        {"batch_first": False},
    ],
)
def test_matches_pytorch(kwargs, mode):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    kwargs = {"batch_first": True} | kwargs
    ref, mha = torch.nn.MultiheadAttention(D, HEADS, **kwargs), _mha(**kwargs)
    js.nn.load_torch_state_dict(mha, ref.state_dict())
    getattr(ref, mode)(), getattr(mha, mode)()
    inputs = _inputs(kwargs.get("kdim", D), kwargs.get("vdim", D), kwargs["batch_first"])
    want, got = _torch_run(torch, ref, inputs), _js_run(mha, inputs)
    assert sorted(want) == sorted(got)
    diffs = {k: float(np.abs(np.asarray(got[k]) - want[k]).max()) for k in want}
    assert max(diffs.values()) <= TOLERANCE, diffs


@pytest.mark.torch
def test_separate_projection_state_dict_follows_pytorch():
    torch = pytest.importorskip("torch")
    ref = torch.nn.MultiheadAttention(D, HEADS, kdim=KDIM, vdim=VDIM, batch_first=True)
    mha = _mha(kdim=KDIM, vdim=VDIM)
    assert (
        list(mha.state_dict())
        == list(ref.state_dict())
        == [
            "q_proj_weight",
            "k_proj_weight",
            "v_proj_weight",
            "in_proj_bias",
            "out_proj.weight",
            "out_proj.bias",
        ]
    )
    for key, value in ref.state_dict().items():
        assert mha.state_dict()[key].shape == tuple(value.shape), key
    ref.load_state_dict({k: torch.from_numpy(v) for k, v in js.nn.torch_state_dict(mha).items()})
    bound = np.sqrt(6 / (D + KDIM))  # xavier_uniform_ over [D, kdim]
    assert np.abs(mha.k_proj_weight.value).max() <= bound


# -- dropout on the weights ------------------------------------------------------------------


def test_dropout_drops_and_rescales_the_weights_in_training_only():
    mha, (q, k, v) = _mha(dropout=0.5), _inputs()
    mask = jnp.ones((1, 1, TQ, TK), bool).at[..., TQ:].set(False)  # the last key is masked
    _, clean = mha.eval()(q, k, v, mask, need_weights=True)
    mha.train()
    out, dropped = mha(q, k, v, mask, need_weights=True, rngs=js.Rngs(dropout=0))
    again, _ = mha(q, k, v, mask, need_weights=True, rngs=js.Rngs(dropout=0))
    np.testing.assert_array_equal(out, again)
    kept = np.asarray(dropped) != 0
    assert 0 < kept[np.asarray(clean) != 0].mean() < 1  # some weights dropped, some kept
    np.testing.assert_allclose(np.where(kept, clean / 0.5, 0), dropped, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(dropped)[..., TQ:], 0)  # masked stay zero


def test_dropout_in_training_without_rngs_is_refused():
    with pytest.raises(
        ValueError,
        match=r"MultiheadAttention: dropout=0.25 in training mode "
        r"needs random keys. Fix: pass rngs=rngs",
    ):
        _mha(dropout=0.25)(*_inputs())


def test_dropout_under_jit():
    mha, rngs, (q, k, v) = _mha(dropout=0.1), js.Rngs(dropout=0), _inputs()
    out = js.jit(lambda m, r, q, k, v: m(q, k, v, rngs=r))(mha, rngs, q, k, v)
    assert out.shape == (B, TQ, D) and np.isfinite(out).all()


# -- layout, repr, dtype ---------------------------------------------------------------------


def test_batch_first_false_is_the_transposed_batch_first_layer():
    first, second = _mha(kdim=KDIM), _mha(kdim=KDIM, batch_first=False)
    q, k, v = _inputs(KDIM)
    out, weights = first(q, k, v, padding_mask(VALID), need_weights=True)
    swapped = (jnp.swapaxes(x, 0, 1) for x in (q, k, v))
    out_t, weights_t = second(*swapped, padding_mask(VALID), need_weights=True)
    np.testing.assert_allclose(jnp.swapaxes(out_t, 0, 1), out, atol=1e-6)
    np.testing.assert_allclose(weights_t, weights, atol=1e-6)  # weights: [B, heads, Tq, Tk]


def test_repr_shows_the_options():
    text = repr(_mha(dropout=0.1, bias=False, kdim=KDIM, vdim=VDIM, batch_first=False))
    assert text.splitlines()[0] == (
        "MultiheadAttention(8, 2, dropout=0.1, bias=False, kdim=6, vdim=3, batch_first=False"
    )


def test_parameters_are_float32_under_x64_unless_given_dtype():
    with jax.enable_x64(True):
        default, wide = _mha(), _mha(kdim=KDIM, dtype=jnp.float64)
    assert {v.dtype for v in default.state_dict().values()} == {np.dtype(np.float32)}
    assert {v.dtype for v in wide.state_dict().values()} == {np.dtype(np.float64)}


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (
            {"add_bias_kv": True},
            NotImplementedError,
            r"MultiheadAttention: add_bias_kv=True is not implemented. Fix: pass add_bias_kv=False",
        ),
        (
            {"add_zero_attn": True},
            NotImplementedError,
            r"MultiheadAttention: add_zero_attn=True is not implemented",
        ),
        (
            {"add_zero_attn": 1},
            TypeError,
            r"MultiheadAttention: add_zero_attn must be True or False, got 1",
        ),
        ({"batch_first": None}, TypeError, r"MultiheadAttention: batch_first must be True or"),
        ({"bias": "yes"}, TypeError, r"MultiheadAttention: bias must be True or False, got 'yes'"),
        (
            {"dropout": "0.1"},
            TypeError,
            r"MultiheadAttention: dropout must be a float in \[0, 1\], got '0.1'",
        ),
        (
            {"dropout": -0.1},
            ValueError,
            r"MultiheadAttention: dropout must be in \[0, 1\], got -0.1",
        ),
        ({"dtype": jnp.int8}, TypeError, r"MultiheadAttention: dtype must be a floating-point"),
    ],
)
def test_bad_options_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        _mha(**kwargs)


@pytest.mark.parametrize("name", ["key_padding_mask", "attn_mask"])
def test_pytorch_mask_keywords_are_refused_with_the_polarity_fix(name):
    with pytest.raises(
        TypeError,
        match=rf"MultiheadAttention: {name} is PyTorch's mask \(True "
        r"= blocked, .* True = allowed, passed as mask=. Fix: "
        r"mask = padding_mask\(~key_padding_mask\)",
    ):
        _mha()(*_inputs(), **{name: ~VALID})


@pytest.mark.parametrize(
    "kwargs, shapes, match",
    [
        (
            {"kdim": KDIM},
            ((B, TQ, D), (B, TK, D), (B, TK, D)),
            r"expected key \[B, Tk, Dk\] with Dk = kdim = 6, got shape \[2, 5, 8\]",
        ),
        (
            {"vdim": VDIM, "batch_first": False},
            ((TQ, B, D), (TK, B, D), (TK, B, D)),
            r"expected value \[Tk, B, Dv\] with Dv = vdim = 3, got shape \[5, 2, 8\]",
        ),
        (
            {"batch_first": False},
            ((TQ, B, D), (TK, B, D), (TK, 1, D)),
            r"expected key and value of one shape \[Tk, B, \.\.\.\] \(up to their feature sizes\) "
            r"and query of the same B, got query \[4, 2, 8\], key \[5, 2, 8\], value \[5, 1, 8\]",
        ),
        (
            {"batch_first": False},
            ((TQ, B, D), (TK, 3, D), (TK, 3, D)),
            r"expected key and value .* query of the same B, got query \[4, 2, 8\]",
        ),
    ],
)
def test_bad_inputs_are_refused_in_the_callers_layout(kwargs, shapes, match):
    with pytest.raises(ValueError, match=rf"MultiheadAttention: {match}"):
        _mha(**kwargs)(*(jnp.zeros(s) for s in shapes))
