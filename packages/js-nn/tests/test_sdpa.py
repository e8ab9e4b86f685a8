"""js.nn.functional.scaled_dot_product_attention against torch.nn.functional's (2.13): masks of
every kind, is_causal (square and L != S), scale, grouped-query attention, gradients, 2-, 3- and
4-D inputs, fully masked rows (zeros, as torch 2.13), dropout, and the errors."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import js.nn.functional as F

RNG = np.random.default_rng(0)


def _normal(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _both(*arrays):
    return [jnp.asarray(a) for a in arrays], [torch.tensor(a) for a in arrays]


def _sdpa(*args, attn_mask=None, **static):
    """F.scaled_dot_product_attention compiled as one program (faster to test than eagerly,
    where every operation compiles on its own)."""
    return jax.jit(functools.partial(F.scaled_dot_product_attention, **static))(
        *args, attn_mask=attn_mask
    )


def _check(j_args, t_args, atol=2e-6, **kwargs):
    t_kwargs = {
        k: torch.tensor(np.asarray(v)) if isinstance(v, jax.Array) else v for k, v in kwargs.items()
    }
    expected = TF.scaled_dot_product_attention(*t_args, **t_kwargs).numpy()
    got = _sdpa(*j_args, **kwargs)
    assert got.shape == expected.shape and got.dtype == j_args[0].dtype
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=atol)
    return got


@pytest.mark.parametrize(
    "shapes",
    [
        ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)),  # [B, H, L, E], L != S
        ((3, 5, 8), (3, 5, 8), (3, 5, 6)),  # 3-D, Ev != E
        ((5, 8), (7, 8), (7, 8)),  # 2-D
        ((2, 3, 5, 8), (1, 3, 7, 8), (1, 3, 7, 8)),  # leading dims broadcast
    ],
)
def test_no_mask_shapes(shapes):
    j, t = _both(*(_normal(*s) for s in shapes))
    _check(j, t)


@pytest.mark.parametrize("mask_shape", [(5, 7), (2, 1, 5, 7), (2, 3, 5, 7), (1, 7), (3, 1, 7)])
def test_bool_mask_true_takes_part(mask_shape):
    j, t = _both(_normal(2, 3, 5, 8), _normal(2, 3, 7, 8), _normal(2, 3, 7, 8))
    mask = RNG.random(mask_shape) > 0.4
    _check(j, t, attn_mask=jnp.asarray(mask))


def test_float_mask_is_added():
    j, t = _both(_normal(2, 3, 5, 8), _normal(2, 3, 7, 8), _normal(2, 3, 7, 8))
    bias = _normal(3, 5, 7)
    bias[0, 2, :3] = -np.inf
    _check(j, t, attn_mask=jnp.asarray(bias))


def test_fully_masked_rows_give_zeros_as_torch():
    j, t = _both(_normal(1, 2, 4, 8), _normal(1, 2, 6, 8), _normal(1, 2, 6, 8))
    mask = RNG.random((4, 6)) > 0.3
    mask[1] = False
    got = _check(j, t, attn_mask=jnp.asarray(mask))
    np.testing.assert_array_equal(got[:, :, 1], 0.0)
    bias = np.zeros((4, 6), np.float32)
    bias[2] = -np.inf
    got = _check(j, t, attn_mask=jnp.asarray(bias))
    np.testing.assert_array_equal(got[:, :, 2], 0.0)


@pytest.mark.parametrize("lengths", [(6, 6), (4, 7), (7, 4)])
def test_is_causal_top_left_as_torch(lengths):
    L, S = lengths
    j, t = _both(_normal(2, 3, L, 8), _normal(2, 3, S, 8), _normal(2, 3, S, 8))
    got = _check(j, t, is_causal=True)
    explicit = _sdpa(*j, attn_mask=jnp.tril(jnp.ones((L, S), bool)))
    np.testing.assert_allclose(got, explicit, rtol=1e-6, atol=1e-6)


# (torch gives NaN for scale=0.0 with is_causal, 0 * -inf in its math; js gives the mean of
# the allowed values)
@pytest.mark.parametrize(("scale", "causal"), [(0.0, False), (0.37, True), (2.0, True)])
def test_scale(scale, causal):
    j, t = _both(_normal(2, 2, 5, 8), _normal(2, 2, 5, 8), _normal(2, 2, 5, 8))
    _check(j, t, scale=scale, is_causal=causal)


@pytest.mark.parametrize(
    ("kv_heads", "mask_shape"),
    [(1, None), (2, (5, 7)), (2, (2, 6, 5, 7)), (3, (2, 1, 5, 7))],
)
def test_grouped_query_attention(kv_heads, mask_shape):
    j, t = _both(_normal(2, 6, 5, 8), _normal(2, kv_heads, 7, 8), _normal(2, kv_heads, 7, 4))
    mask = None if mask_shape is None else jnp.asarray(RNG.random(mask_shape) > 0.3)
    _check(j, t, attn_mask=mask, enable_gqa=True)


def test_grouped_query_attention_causal_3d():
    j, t = _both(_normal(4, 6, 8), _normal(2, 6, 8), _normal(2, 6, 8))
    _check(j, t, is_causal=True, enable_gqa=True)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"is_causal": True},
        {"attn_mask": "bool"},
        {"attn_mask": "float"},
        {"enable_gqa": True, "scale": 0.5},
    ],
)
def test_gradients_match_torch(kwargs):
    kv_heads = 2 if kwargs.get("enable_gqa") else 4
    q, k, v = _normal(2, 4, 5, 8), _normal(2, kv_heads, 6, 8), _normal(2, kv_heads, 6, 8)
    g = _normal(2, 4, 5, 8)
    kwargs = dict(kwargs)
    if kwargs.get("attn_mask") == "bool":
        mask = RNG.random((5, 6)) > 0.4
        mask[3] = False  # a fully masked row: zero gradients, as torch
        kwargs["attn_mask"] = jnp.asarray(mask)
    elif kwargs.get("attn_mask") == "float":
        bias = _normal(4, 5, 6)
        bias[1, 2] = -np.inf  # a row excluded by -inf: zero gradients, as torch
        kwargs["attn_mask"] = jnp.asarray(bias)
    t_kwargs = {
        k: torch.tensor(np.asarray(v)) if isinstance(v, jax.Array) else v for k, v in kwargs.items()
    }
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    (TF.scaled_dot_product_attention(tq, tk, tv, **t_kwargs) * torch.tensor(g)).sum().backward()

    def loss(q, k, v):
        return jnp.sum(F.scaled_dot_product_attention(q, k, v, **kwargs) * g)

    grads = jax.jit(jax.grad(loss, (0, 1, 2)))(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
    for got, tensor in zip(grads, (tq, tk, tv), strict=True):
        assert tensor.grad is not None and bool(jnp.all(jnp.isfinite(got)))
        np.testing.assert_allclose(got, tensor.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_half_precision(dtype):
    tdt = {jnp.bfloat16: torch.bfloat16, jnp.float16: torch.float16}[dtype]
    t = [torch.tensor(_normal(2, 2, 6, 16)).to(tdt) for _ in range(3)]
    j = [jnp.asarray(x.float().numpy(), dtype) for x in t]
    expected = TF.scaled_dot_product_attention(*t, is_causal=True).float().numpy()
    got = _sdpa(*j, is_causal=True)
    assert got.dtype == dtype
    np.testing.assert_allclose(np.asarray(got, np.float32), expected, rtol=2e-2, atol=2e-2)


def test_dropout():
    q, k, v = (jnp.asarray(_normal(1, 2, 4, 8)) for _ in range(3))
    plain = _sdpa(q, k, v)

    @jax.jit
    def dropped(key, p=0.3):
        return F.scaled_dot_product_attention(q, k, v, None, p, dropout_key=key)

    key = jax.random.key(0)
    once = dropped(key)
    np.testing.assert_array_equal(once, dropped(key))  # one key, one mask
    assert not np.allclose(once, plain)
    runs = jax.jit(jax.vmap(dropped))(jax.random.split(jax.random.key(1), 500))
    np.testing.assert_allclose(runs.mean(0), plain, atol=0.2)  # unbiased: 1 / (1 - p) scaling
    all_dropped = F.scaled_dot_product_attention(q, k, v, dropout_p=1.0, dropout_key=key)
    np.testing.assert_array_equal(all_dropped, 0.0)
    ones = [torch.ones(1, 2, 3)] * 3
    assert TF.scaled_dot_product_attention(*ones, dropout_p=1.0).abs().sum() == 0


def test_under_jit():
    q, k, v = (jnp.asarray(_normal(2, 4, 6, 8)) for _ in range(3))
    fn = jax.jit(F.scaled_dot_product_attention, static_argnames=("is_causal",))
    np.testing.assert_allclose(
        fn(q, k, v, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
        rtol=1e-6,
        atol=1e-7,  # compiled and eager round differently: 6e-8 on an AMD EPYC
    )


def _qkv(q=(2, 4, 5, 8), k=(2, 4, 6, 8), v=(2, 4, 6, 8), dtype=jnp.float32):
    return jnp.ones(q, dtype), jnp.ones(k, dtype), jnp.ones(v, dtype)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: F.scaled_dot_product_attention(*_qkv(), jnp.ones((5, 6), bool), is_causal=True),
            ValueError,
            r"attn_mask and is_causal=True were both given",
        ),
        (
            lambda: F.scaled_dot_product_attention(*_qkv(), dropout_p=0.1),
            ValueError,
            r"dropout_p=0.1 needs a random key. Fix: pass dropout_key=",
        ),
        (
            lambda: F.scaled_dot_product_attention(*_qkv(), dropout_p=1.5),
            ValueError,
            r"dropout_p",
        ),
        (
            lambda: F.scaled_dot_product_attention(*_qkv(k=(2, 4, 6, 3))),
            ValueError,
            r"same last dimension E, got query \[2, 4, 5, 8\], key \[2, 4, 6, 3\]",
        ),
        (
            lambda: F.scaled_dot_product_attention(*_qkv(v=(2, 4, 5, 8))),
            ValueError,
            r"key and value must have the same length S",
        ),
        (
            lambda: F.scaled_dot_product_attention(*_qkv(k=(2, 2, 6, 8), v=(2, 2, 6, 8))),
            ValueError,
            r"do not broadcast, got query \[2, 4, 5, 8\], key \[2, 2, 6, 8\].*enable_gqa=True",
        ),
        (
            lambda: F.scaled_dot_product_attention(
                *_qkv(k=(2, 3, 6, 8), v=(2, 3, 6, 8)), enable_gqa=True
            ),
            ValueError,
            r"Hq=4 must be a multiple of the key/value heads Hkv=3, got query \[2, 4, 5, 8\]",
        ),
        (
            lambda: F.scaled_dot_product_attention(*_qkv(), jnp.ones((5, 6), jnp.int32)),
            TypeError,
            r"attn_mask must be bool .* or floating .* got int32",
        ),
        (
            lambda: F.scaled_dot_product_attention(*_qkv(), jnp.ones((3, 6), bool)),
            ValueError,
            r"attn_mask of shape \[3, 6\] does not broadcast to the attention scores "
            r"\[2, 4, 5, 6\]",
        ),
        (
            lambda: F.scaled_dot_product_attention(
                jnp.ones((2, 4, 5, 8)), *_qkv(dtype=jnp.bfloat16)[1:]
            ),
            TypeError,
            r"query, key and value must have one dtype",
        ),
        (
            lambda: F.scaled_dot_product_attention(*_qkv(q=(8,))),
            ValueError,
            r"query must be at least 2-D",
        ),
    ],
)
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_torch_refuses_what_js_refuses():
    # the reference (math) implementation refuses a mask with is_causal; the E mismatch too
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.ones(1, 2, 3, 4)
    with sdpa_kernel(SDPBackend.MATH), pytest.raises(RuntimeError, match="attn_mask"):
        TF.scaled_dot_product_attention(q, q, q, torch.ones(3, 3, dtype=torch.bool), is_causal=True)
    with pytest.raises(RuntimeError, match="divide"):
        TF.scaled_dot_product_attention(
            torch.ones(1, 4, 3, 4), *(torch.ones(1, 3, 3, 4),) * 2, enable_gqa=True
        )


@pytest.mark.parametrize(
    "case", ["none", "bool", "padding", "empty_row", "float", "causal", "gqa", "grads"]
)
def test_blocks_of_query_rows_give_the_same_result(monkeypatch, case):
    """Large scores on the CPU run in blocks of query rows (``_sdpa._blocks``); made to block
    tiny inputs here (8 rows a block, 37 rows: the last block padded), each case gives what
    the whole rows at once give (to float32 rounding: XLA may sum in another order), and
    torch's result."""
    from js.nn import _sdpa

    monkeypatch.setattr(_sdpa, "BLOCK_ROWS", 8)
    monkeypatch.setattr(_sdpa, "BLOCKED_SCORES_BYTES", 0)
    B, H, L, S, E = 2, 4, 37, 29, 8
    heads_kv = 2 if case == "gqa" else H
    q, k, v = _normal(B, H, L, E), _normal(B, heads_kv, S, E), _normal(B, heads_kv, S, E)
    masks = {
        "bool": RNG.random((L, S)) > 0.3,
        "padding": np.arange(S)[None, None, None, :] < np.array([29, 17])[:, None, None, None],
        "empty_row": np.where(np.arange(L)[:, None] == 5, False, RNG.random((B, H, L, S)) > 0.5),
        "float": _normal(B, H, L, S),
        "gqa": RNG.random((B, 1, L, S)) > 0.3,
    }
    mask = None if case not in masks else jnp.asarray(masks[case])
    static = {"is_causal": case == "causal", "enable_gqa": case == "gqa"}
    assert _sdpa._blocks(jnp.asarray(q), jnp.asarray(k), 0.0, False) == 5
    (jq, jk, jv), (tq, tk, tv) = _both(q, k, v)
    if case == "grads":

        def loss(q, k, v):
            return (F.scaled_dot_product_attention(q, k, v) ** 2).sum()

        def forward_mode(q):  # jvp: the output and its tangent along q
            return jax.jvp(lambda q: F.scaled_dot_product_attention(q, jk, jv), (q,), (q,))

        blocked = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(jq, jk, jv)
        blocked += jax.jit(forward_mode)(jq)
        monkeypatch.setattr(_sdpa, "BLOCKED_SCORES_BYTES", 1 << 60)  # all rows at once
        whole = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(jq, jk, jv)
        whole += jax.jit(forward_mode)(jq)
        for a, b in zip(blocked, whole, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        return
    _check([jq, jk, jv], [tq, tk, tv], attn_mask=mask, **static)
    blocked = _sdpa_(jq, jk, jv, mask, static)
    monkeypatch.setattr(_sdpa, "BLOCKED_SCORES_BYTES", 1 << 60)
    np.testing.assert_allclose(blocked, _sdpa_(jq, jk, jv, mask, static), rtol=1e-5, atol=1e-6)


def _sdpa_(q, k, v, mask, static):
    return np.asarray(_sdpa(q, k, v, attn_mask=mask, **static))
