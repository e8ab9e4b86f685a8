"""A pre-norm transformer block, batch 16, T=128, D=256, 8 heads: causal self-attention and an
MLP (D -> 4D -> D, exact GELU), each with LayerNorm and a residual; MSE to a target; Adam."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import js
import js.losses as losses
import js.nn as nn
import js.optim
from js.nn.attention import causal_mask

from . import _common as C
from ._harness import Variant

HEADS = 8


class Block(js.Module):
    def __init__(self, dim: int, *, rngs):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, HEADS, rngs=rngs)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim, rngs=rngs)
        self.fc2 = nn.Linear(4 * dim, dim, rngs=rngs)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, mask=mask)  # [B, T, D]
        return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x)), approximate=False))


def js_step_fn(model, optimizer, x, y, mask):
    def loss_fn(model):
        return losses.mse_loss(model(x, mask), y)

    loss, grads = js.value_and_grad(loss_fn)(model)
    optimizer.step(grads)
    return loss


js_step = js.jit(js_step_fn)


def _attend_before(q, k, v, mask, *, dropout: float = 0.0, key=None):
    """js-nn's attention before the speed work: a select over every weight of a masked row
    (the bench's blocks use no attention dropout: ``key`` is None)."""
    assert key is None, "the 'before' attention variant has no dropout"
    scores = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])  # [..., Tq, Tk]
    if mask is None:
        weights = jax.nn.softmax(scores, axis=-1)
    else:
        scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
        weights = jnp.where(mask, jax.nn.softmax(scores, axis=-1), 0)
    return weights @ v, weights


def attention_before(variant: Variant) -> Variant:
    """``variant`` compiled with js-nn's attention before the speed work."""
    import js.nn.attention

    return C.traced_with(variant, js.nn.attention, "_attend", _attend_before)


def _ln(x, w, b):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * w + b


def _attention(p, x, mask):
    B, T, D = x.shape
    qkv = x @ p["attn.in_proj_weight"].T + p["attn.in_proj_bias"]  # [B, T, 3D]
    q, k, v = (
        t.reshape(B, T, HEADS, D // HEADS).transpose(0, 2, 1, 3)  # [B, heads, T, d]
        for t in jnp.split(qkv, 3, axis=-1)
    )
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(D // HEADS)  # [B, heads, T, T]
    weights = jax.nn.softmax(jnp.where(mask, scores, jnp.finfo(scores.dtype).min), axis=-1)
    heads = (weights @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    return heads @ p["attn.out_proj.weight"].T + p["attn.out_proj.bias"]


def _jax_loss(p, extra, x, y, mask):
    h = _ln(x, p["ln1.weight"], p["ln1.bias"])
    x = x + _attention(p, h, mask)
    h = _ln(x, p["ln2.weight"], p["ln2.bias"]) @ p["fc1.weight"].T + p["fc1.bias"]
    out = x + jax.nn.gelu(h, approximate=False) @ p["fc2.weight"].T + p["fc2.bias"]
    return jnp.mean(jnp.square(out - y)), extra


class _NNXBlock(nnx.Module):
    def __init__(self, dim, rngs):
        self.ln1 = nnx.LayerNorm(dim, epsilon=1e-5, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(HEADS, dim, decode=False, rngs=rngs)
        self.ln2 = nnx.LayerNorm(dim, epsilon=1e-5, rngs=rngs)
        self.fc1 = nnx.Linear(dim, 4 * dim, rngs=rngs)
        self.fc2 = nnx.Linear(4 * dim, dim, rngs=rngs)

    def __call__(self, x, mask):
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x)), approximate=False))


def _nnx_loss(model, x, y, mask):
    return jnp.mean(jnp.square(model(x, mask) - y))


def _torch_model(dim):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
            self.attn = torch.nn.MultiheadAttention(dim, HEADS, batch_first=True)
            self.fc1, self.fc2 = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

        def forward(self, x, blocked):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=blocked, need_weights=False)[0]
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    return Net()


def _torch_loss(model, x, y, blocked):
    import torch

    return torch.nn.functional.mse_loss(model(x, blocked), y)


def variants(batch: int, steps: int, dim: int) -> dict[str, Variant]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, steps, dim)).astype(np.float32)
    y = rng.standard_normal((batch, steps, dim)).astype(np.float32)
    mask = np.asarray(causal_mask(steps))  # [1, 1, T, T], True = attend
    model = Block(dim, rngs=js.Rngs(params=0))
    params = C.param_dict(model)
    optimizer = js.optim.Adam(model.parameters(), lr=C.LR)
    out = {
        "js": C.js_variant(
            js_step, model, optimizer, jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask)
        ),
        "jax": C.jax_variant(_jax_loss, params, (x, y, mask)),
        "nnx": C.nnx_variant(_NNXBlock(dim, nnx.Rngs(0)), _nnx_loss, (x, y, mask)),
    }
    old = Block(dim, rngs=js.Rngs(params=0))
    out["js (attention before)"] = attention_before(
        C.js_variant(
            js.jit(js_step_fn),
            old,
            js.optim.Adam(old.parameters(), lr=C.LR),
            *(jnp.asarray(a) for a in (x, y, mask)),
        )
    )
    if C.HAVE_TORCH:
        C.torch_manual_seed()
        blocked = ~mask[0, 0]  # torch's nn.MultiheadAttention: True = blocked
        out["torch"] = C.torch_variant(_torch_model(dim), _torch_loss, (x, y, blocked))
    return out
