"""Rotary position embeddings against transformers 5.23's Llama functions.

transformers is not in the nn test environment, so its functions are copied here verbatim in
torch from transformers/models/llama/modeling_llama.py (5.23.0): the default RoPE parameters,
LlamaRotaryEmbedding.forward, rotate_half and apply_rotary_pos_emb.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import js.nn.functional as F


# -- transformers 5.23.0, modeling_llama.py (torch reference) ---------------------------------
def hf_inv_freq(base: float, dim: int) -> torch.Tensor:
    # LlamaRotaryEmbedding.compute_default_rope_parameters
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


def hf_forward(inv_freq, attention_scaling, x, position_ids):
    # LlamaRotaryEmbedding.forward
    freqs = position_ids[..., None].float() * inv_freq.to(device=x.device, dtype=torch.float)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * attention_scaling
    sin = emb.sin() * attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def hf_rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (hf_rotate_half(q) * sin)
    k_embed = (k * cos) + (hf_rotate_half(k) * sin)
    return q_embed, k_embed


# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dim", "theta"), [(8, 10000.0), (64, 10000.0), (128, 500000.0)])
def test_inv_freq(dim, theta):
    got = F.rope_inv_freq(dim, theta)
    assert got.dtype == jnp.float32 and got.shape == (dim // 2,)
    np.testing.assert_allclose(got, hf_inv_freq(theta, dim).numpy(), rtol=1e-6)
    # the host's float32 power: the same bits as torch's in (nearly) every entry
    assert np.mean(np.asarray(got) == hf_inv_freq(theta, dim).numpy()) >= 0.95


def test_inv_freq_is_a_constant_under_jit():
    got = jax.jit(lambda: F.rope_inv_freq(64, 10000.0))()
    assert np.array_equal(np.asarray(got), np.asarray(F.rope_inv_freq(64, 10000.0)))


@pytest.mark.parametrize("scaling", [1.0, 0.7])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_cos_sin(scaling, dtype):
    tdt = {jnp.float32: torch.float32, jnp.bfloat16: torch.bfloat16}[dtype]
    positions = np.array([[0, 1, 2, 3, 4, 5, 1000, 4095], [7, 6, 5, 4, 3, 2, 1, 0]])
    inv_freq = hf_inv_freq(10000.0, 16)
    x = torch.zeros(1, dtype=tdt)
    cos_ref, sin_ref = hf_forward(inv_freq, scaling, x, torch.tensor(positions))
    cos, sin = F.rotary_cos_sin(
        jnp.asarray(positions), F.rope_inv_freq(16), attention_scaling=scaling, dtype=dtype
    )
    assert cos.shape == sin.shape == (2, 8, 16) and cos.dtype == sin.dtype == dtype
    tol = 1e-5 if dtype == jnp.float32 else 8e-3
    np.testing.assert_allclose(np.asarray(cos, np.float32), cos_ref.float().numpy(), atol=tol)
    np.testing.assert_allclose(np.asarray(sin, np.float32), sin_ref.float().numpy(), atol=tol)


def test_rotate_half():
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    np.testing.assert_array_equal(F.rotate_half(jnp.asarray(x)), hf_rotate_half(torch.tensor(x)))


@pytest.mark.parametrize("cos_rank", [3, 2])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_apply_matches_transformers(cos_rank, dtype):
    tdt = {jnp.float32: torch.float32, jnp.bfloat16: torch.bfloat16}[dtype]
    rng = np.random.default_rng(1)
    B, H, Hkv, L, D = 2, 4, 2, 6, 16
    q = torch.tensor(rng.standard_normal((B, H, L, D)).astype(np.float32)).to(tdt)
    k = torch.tensor(rng.standard_normal((B, Hkv, L, D)).astype(np.float32)).to(tdt)
    position_ids = torch.arange(3, 3 + L)[None].expand(B, L)
    cos_t, sin_t = hf_forward(hf_inv_freq(10000.0, D), 1.0, q, position_ids)
    q_ref, k_ref = hf_apply_rotary_pos_emb(q, k, cos_t, sin_t)
    cos, sin = F.rotary_cos_sin(jnp.asarray(position_ids.numpy()), F.rope_inv_freq(D), dtype=dtype)
    if cos_rank == 2:
        cos, sin = cos[0], sin[0]
    jq, jk = (jnp.asarray(t.float().numpy(), dtype) for t in (q, k))
    q_out, k_out = F.apply_rotary_pos_emb(jq, cos, sin), F.apply_rotary_pos_emb(jk, cos, sin)
    assert q_out.dtype == k_out.dtype == dtype and q_out.shape == (B, H, L, D)
    tol = 1e-6 if dtype == jnp.float32 else 2e-2
    np.testing.assert_allclose(np.asarray(q_out, np.float32), q_ref.float().numpy(), atol=tol)
    np.testing.assert_allclose(np.asarray(k_out, np.float32), k_ref.float().numpy(), atol=tol)


def test_float32_cos_with_bfloat16_x_keeps_x_dtype():
    x = jnp.ones((1, 2, 3, 8), jnp.bfloat16)
    cos, sin = F.rotary_cos_sin(jnp.arange(3), F.rope_inv_freq(8))  # [L, D] float32
    assert F.apply_rotary_pos_emb(x, cos, sin).dtype == jnp.bfloat16


def test_rotation_preserves_norms_and_relative_positions():
    # q_m . k_n depends on m - n only: the property RoPE exists for
    rng = np.random.default_rng(2)
    q, k = (jnp.asarray(rng.standard_normal((1, 1, 1, 8)).astype(np.float32)) for _ in range(2))
    inv = F.rope_inv_freq(8)

    def at(x, p):
        cos, sin = F.rotary_cos_sin(jnp.array([p]), inv)
        return F.apply_rotary_pos_emb(x, cos, sin)

    np.testing.assert_allclose(jnp.linalg.norm(at(q, 5)), jnp.linalg.norm(q), rtol=1e-5)
    np.testing.assert_allclose(
        jnp.sum(at(q, 7) * at(k, 3)), jnp.sum(at(q, 14) * at(k, 10)), rtol=1e-4
    )


def test_under_jit_and_grad():
    x = jnp.ones((1, 2, 4, 8))
    cos, sin = F.rotary_cos_sin(jnp.arange(4)[None], F.rope_inv_freq(8))
    out = jax.jit(F.apply_rotary_pos_emb)(x, cos, sin)
    np.testing.assert_allclose(out, F.apply_rotary_pos_emb(x, cos, sin))
    grad = jax.grad(lambda x: jnp.sum(F.apply_rotary_pos_emb(x, cos, sin) ** 2))(x)
    np.testing.assert_allclose(grad, 2 * x, rtol=1e-5)  # a rotation: |Rx|^2 = |x|^2


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: F.rope_inv_freq(7), ValueError, r"head_dim must be even and >= 2, got 7"),
        (lambda: F.rope_inv_freq(8.0), TypeError, r"head_dim must be an int"),  # type: ignore[arg-type]
        (lambda: F.rope_inv_freq(8, -1.0), ValueError, r"theta must be a positive number"),
        (
            lambda: F.rotary_cos_sin(jnp.arange(3), jnp.ones((2, 2))),
            ValueError,
            r"inv_freq must be 1-D",
        ),
        (
            lambda: F.apply_rotary_pos_emb(
                jnp.ones((1, 2, 3, 8)), jnp.ones((3, 6)), jnp.ones((3, 6))
            ),
            ValueError,
            r"cos and sin must share one shape .* D=8, got cos \[3, 6\]",
        ),
        (
            lambda: F.apply_rotary_pos_emb(
                jnp.ones((1, 2, 3, 8)), jnp.ones((4, 8)), jnp.ones((4, 8))
            ),
            ValueError,
            r"cos/sin of shape \[4, 8\] do not broadcast over x \[1, 2, 3, 8\]",
        ),
        (
            lambda: F.apply_rotary_pos_emb(
                jnp.ones((1, 2, 3, 7)), jnp.ones((3, 7)), jnp.ones((3, 7))
            ),
            ValueError,
            r"D even, got \[1, 2, 3, 7\]",
        ),
    ],
)
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
