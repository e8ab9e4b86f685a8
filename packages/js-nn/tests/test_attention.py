"""Attention: masks, MultiheadAttention layout and numbers, fully masked rows, need_weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js._checks import flatten_state
from js.nn.attention import (
    MultiheadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)

B, TQ, TK, D, HEADS = 2, 4, 5, 8, 2
TOLERANCE = 1e-5  # float32 on CPU; measured: outputs <= 1.2e-7, gradients <= 3.6e-7


def _rand(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _inputs(tq=TQ, tk=TK):
    return _rand(0, (B, tq, D)), _rand(1, (B, tk, D)), _rand(2, (B, tk, D))


def _mha(**kwargs):
    return MultiheadAttention(D, HEADS, rngs=js.Rngs(params=0), **kwargs)


# -- masks -----------------------------------------------------------------------------------


def test_causal_mask():
    mask = causal_mask(4)
    assert mask.shape == (1, 1, 4, 4) and mask.dtype == jnp.bool_
    np.testing.assert_array_equal(mask[0, 0], np.tril(np.ones((4, 4), bool)))


def test_padding_mask():
    valid = np.array([[True, True, False], [True, False, False]])
    mask = padding_mask(valid)
    assert mask.shape == (2, 1, 1, 3) and mask.dtype == jnp.bool_
    np.testing.assert_array_equal(mask[:, 0, 0], valid)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: causal_mask(0), ValueError, r"causal_mask: T must be an int >= 1, got 0"),
        (
            lambda: causal_mask(2.0),
            TypeError,
            r"causal_mask: T must be an int >= 1, got 2.0 \(a float",
        ),
        (
            lambda: padding_mask(np.ones((2, 3))),
            TypeError,
            r"padding_mask: valid must be boolean \[B, T\], got dtype float64",
        ),
        (
            lambda: padding_mask(np.ones(3, bool)),
            ValueError,
            r"padding_mask: expected valid \[B, T\], got shape \[3\]",
        ),
    ],
)
def test_bad_mask_arguments_are_refused(call, error, match):
    with pytest.raises(error, match=match):
        call()


# -- construction ----------------------------------------------------------------------------


def test_state_dict_keys_shapes_and_init():
    sd = _mha().state_dict()
    assert list(sd) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    assert sd["in_proj_weight"].shape == (3 * D, D) and sd["out_proj.weight"].shape == (D, D)
    assert not sd["in_proj_bias"].any() and not sd["out_proj.bias"].any()
    assert np.abs(sd["in_proj_weight"]).max() <= np.sqrt(6 / (4 * D))  # xavier uniform
    assert np.abs(sd["out_proj.weight"]).max() <= 1 / np.sqrt(D)  # fan-in uniform
    assert list(_mha(bias=False).state_dict()) == ["in_proj_weight", "out_proj.weight"]


def test_repr():
    text = repr(_mha(bias=False))
    assert text.splitlines()[0] == "MultiheadAttention(8, 2, bias=False"
    assert "(out_proj): _Projection(in_features=8, out_features=8, bias=False\n" in text


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((6, 4), ValueError, r"MultiheadAttention: embed_dim 6 is not divisible by num_heads 4"),
        ((0, 1), ValueError, r"MultiheadAttention: embed_dim must be an int >= 1, got 0"),
        ((8, True), TypeError, r"MultiheadAttention: num_heads must be an int >= 1, got True"),
    ],
)
def test_bad_construction_is_refused(args, error, match):
    with pytest.raises(error, match=match):
        MultiheadAttention(*args, rngs=js.Rngs(params=0))


# -- forward ---------------------------------------------------------------------------------


def test_shapes_and_per_head_weights():
    mha, (q, k, v) = _mha(), _inputs()
    assert mha(q, k, v).shape == (B, TQ, D)
    out, weights = mha(q, k, v, need_weights=True)
    assert out.shape == (B, TQ, D) and weights.shape == (B, HEADS, TQ, TK)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(out, mha(q, k, v), atol=1e-6)


def test_need_weights_is_static_under_js_jit():
    mha, (q, k, v) = _mha(), _inputs()
    step = js.jit(
        lambda m, q, k, v, need_weights: m(q, k, v, need_weights=need_weights),
        static_argnames="need_weights",
    )
    out, weights = step(mha, q, k, v, need_weights=True)
    assert weights.shape == (B, HEADS, TQ, TK)
    np.testing.assert_allclose(step(mha, q, k, v, need_weights=False), out, atol=1e-6)
    plain = js.jit(lambda m, q, k, v: m(q, k, v, need_weights=True))(mha, q, k, v)
    np.testing.assert_allclose(plain[1], weights, atol=1e-6)
    mask = padding_mask(np.array([[True] * TK, [True, False, True, False, True]]))
    masked = js.jit(lambda m, q, k, v, mask: m(q, k, v, mask=mask, need_weights=True))
    np.testing.assert_allclose(
        masked(mha, q, k, v, mask)[1], mha(q, k, v, mask, True)[1], atol=1e-6
    )


@pytest.mark.parametrize("traced", [True, False])
def test_non_bool_need_weights_is_refused(traced):
    mha, (q, k, v) = _mha(), _inputs()
    match = r"MultiheadAttention: need_weights must be a Python bool .* static_argnames"
    with pytest.raises(TypeError, match=match):
        if traced:  # not declared static: js.jit traces it
            js.jit(lambda m, q, k, v, w: m(q, k, v, need_weights=w))(mha, q, k, v, True)
        else:
            mha(q, k, v, need_weights=1)


def test_fully_masked_rows_give_zero_weights_zero_output_and_finite_gradients():
    mha, (q, k, v) = _mha(), _inputs()
    mha.out_proj.bias.value = jnp.ones(D)  # the zero output must not be out_proj.bias
    mask = np.ones((B, 1, TQ, TK), bool)
    mask[0, :, 1] = False  # example 0, query 1: no key allowed in any head
    mask[1] = False  # example 1: nothing allowed
    out, weights = mha(q, k, v, mask=mask, need_weights=True)
    np.testing.assert_array_equal(out[0, 1], 0.0)
    np.testing.assert_array_equal(out[1], 0.0)
    np.testing.assert_array_equal(weights[0, :, 1], 0.0)
    assert np.abs(out[0, 0]).min() > 0  # other rows keep the bias

    def loss(m, q, k, v):
        return jnp.sum(m(q, k, v, mask=mask) ** 2)

    _, grads = js.value_and_grad(loss)(mha, q, k, v)
    inputs = jax.grad(lambda *x: loss(mha, *x), argnums=(0, 1, 2))(q, k, v)
    for g in [*flatten_state(grads).values(), *inputs]:
        assert np.all(np.isfinite(g))


def test_scaled_dot_product_attention_zero_row():
    q, k, v = _rand(0, (3, 4)), _rand(1, (5, 4)), _rand(2, (5, 6))
    mask = np.ones((3, 5), bool)
    mask[2] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (3, 6)
    np.testing.assert_array_equal(out[2], 0.0)
    np.testing.assert_array_equal(weights[2], 0.0)
    grad = jax.grad(lambda q: scaled_dot_product_attention(q, k, v, mask)[0].sum())(q)
    assert np.all(np.isfinite(grad))


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shapes, match",
    [
        (
            ((B, D), (B, TK, D), (B, TK, D)),
            r"MultiheadAttention: expected query \[B, Tq, D\] with D = embed_dim = 8, "
            r"got shape \[2, 8\]",
        ),
        (
            ((B, TQ, D), (B, TK, 6), (B, TK, D)),
            r"MultiheadAttention: expected key \[B, Tk, D\] .* got shape \[2, 5, 6\]",
        ),
        (
            ((B, TQ, D), (B, TK, D), (B, 3, D)),
            r"MultiheadAttention: expected key and value of one shape .* value \[2, 3, 8\]",
        ),
        (
            ((1, TQ, D), (B, TK, D), (B, TK, D)),
            r"MultiheadAttention: .* query of the same B, got query \[1, 4, 8\]",
        ),
    ],
)
def test_bad_inputs_are_refused(shapes, match):
    with pytest.raises(ValueError, match=match):
        _mha()(*(jnp.zeros(s) for s in shapes))


@pytest.mark.parametrize(
    "mask, error, match",
    [
        (
            np.ones((TQ, TK)),
            TypeError,
            r"MultiheadAttention: mask must be boolean \(True = allowed\), "
            r"got dtype float64",
        ),
        (
            np.ones((TQ, TQ), bool),
            ValueError,
            r"MultiheadAttention: mask of shape \[4, 4\] does not "
            r"broadcast to the scores .* = \[2, 2, 4, 5\]",
        ),
        (np.ones((1, 1, 1, TQ, TK), bool), ValueError, r"mask of shape \[1, 1, 1, 4, 5\] does not"),
        (np.ones((3, 1, TQ, TK), bool), ValueError, r"mask of shape \[3, 1, 4, 5\] does not"),
    ],
)
def test_bad_masks_are_refused(mask, error, match):
    with pytest.raises(error, match=match):
        _mha()(*_inputs(), mask=mask)


def test_scaled_dot_product_attention_names_itself_in_mask_errors():
    q = jnp.zeros((2, 3))
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: mask of shape \[4\]"):
        scaled_dot_product_attention(q, q, q, np.ones(4, bool))


# -- PyTorch ---------------------------------------------------------------------------------

VALID = np.array([[True] * TK, [True, True, False, False, False]])  # every row keeps a key


def _masks(kind):
    """(js mask, PyTorch keyword arguments): PyTorch's masks mean True = blocked."""
    if kind == "none":
        return None, {}
    if kind == "causal":
        mask = causal_mask(TK)
        return mask, {"attn_mask": ~np.asarray(mask[0, 0])}
    if kind == "padding":
        return padding_mask(VALID), {"key_padding_mask": ~VALID}
    both = causal_mask(TK) & padding_mask(VALID)
    return both, {"attn_mask": ~np.asarray(causal_mask(TK)[0, 0]), "key_padding_mask": ~VALID}


def _weighted(out, weights, like):
    shapes = [tuple(out.shape), tuple(weights.shape)]
    coef = [np.cos(np.arange(np.prod(s))).reshape(s).astype(np.float32) for s in shapes]
    return (out * like(coef[0])).sum() + (weights * like(coef[1])).sum()


def _torch_run(torch, ref, inputs, kwargs, average):
    tensors = [torch.tensor(np.asarray(x), requires_grad=True) for x in inputs]
    kwargs = {k: torch.tensor(v) for k, v in kwargs.items()}
    out, weights = ref(*tensors, need_weights=True, average_attn_weights=average, **kwargs)
    _weighted(out, weights, torch.tensor).backward()
    result = {"output": out, "weights": weights}
    result |= {f"grad_{n}": t.grad for n, t in zip("qkv", tensors, strict=True)}
    result |= {f"grad_{k}": p.grad for k, p in ref.named_parameters()}
    return {k: v.detach().numpy() for k, v in result.items()}


def _js_run(mha, inputs, mask, average):
    """Outputs and every gradient from one differentiated call at the split/merge boundary."""
    graphdef, params = js.split(mha)

    def loss(params, q, k, v):
        out, weights = js.merge(graphdef, params)(q, k, v, mask=mask, need_weights=True)
        weights = weights.mean(1) if average else weights
        return _weighted(out, weights, jnp.asarray), {"output": out, "weights": weights}

    grads, result = jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True)(params, *inputs)
    result |= {f"grad_{n}": g for n, g in zip("qkv", grads[1:], strict=True)}
    return result | {f"grad_{k}": g for k, g in flatten_state(grads[0]).items()}


def compare_with_torch(torch, kind, average=False):
    """Largest absolute difference to PyTorch per output, weights and gradient."""
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(D, HEADS, batch_first=True)
    mha = _mha()
    mha.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    mask, kwargs = _masks(kind)
    inputs = _inputs(TK, TK) if kind in ("causal", "both") else _inputs()
    want = _torch_run(torch, ref, inputs, kwargs, average)
    got = _js_run(mha, inputs, mask, average)
    assert sorted(want) == sorted(got)
    return {k: float(np.abs(np.asarray(got[k]) - want[k]).max()) for k in want}


@pytest.mark.torch
@pytest.mark.parametrize(
    "kind, average",
    [
        ("none", False),
        ("none", True),
        ("causal", False),
        ("padding", False),
        ("both", True),
    ],
)
def test_matches_pytorch(kind, average):
    torch = pytest.importorskip("torch")
    diffs = compare_with_torch(torch, kind, average)
    assert max(diffs.values()) <= TOLERANCE, diffs
