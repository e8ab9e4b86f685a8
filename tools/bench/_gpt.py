"""A small GPT training step: nanoGPT's char-level Shakespeare config scaled to this machine.

4 layers, 4 heads, width 128, context 128, batch 16, vocabulary 65 (the Shakespeare
characters); pre-norm blocks (LayerNorm, causal self-attention, LayerNorm, MLP 128 -> 512 ->
128 with exact GELU), learned positions, a final LayerNorm and a linear head; cross-entropy
over every position; Adam. As in nanoGPT but without dropout (so that js and hand-written JAX
do the same computation) and with an untied head (nanoGPT ties it to the token embedding).
torch runs it as nanoGPT does: one ``c_attn`` projection and ``F.scaled_dot_product_attention(
is_causal=True)``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

import js
import js.losses as losses
import js.nn as nn
import js.optim
from js.nn.attention import causal_mask

from . import _common as C
from ._harness import Variant
from ._transformer import _ln, attention_before

VOCAB = 65


class Block(js.Module):
    def __init__(self, dim: int, heads: int, *, rngs):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, rngs=rngs)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim, rngs=rngs)
        self.fc2 = nn.Linear(4 * dim, dim, rngs=rngs)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, mask=mask)  # [B, T, D]
        return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x)), approximate=False))


class GPT(js.Module):
    """``tokens [B, T] int -> logits [B, T, V]``."""

    def __init__(self, layers: int, heads: int, dim: int, context: int, *, rngs):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim, rngs=rngs)
        self.pos = nn.Embedding(context, dim, rngs=rngs)
        self.blocks = nn.Sequential(*[Block(dim, heads, rngs=rngs) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, rngs=rngs)

    def forward(self, tokens, mask):
        x = self.tok(tokens) + self.pos(jnp.arange(tokens.shape[1]))  # [B, T, D]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))  # [B, T, V]


def js_step_fn(model, optimizer, x, y, mask):
    def loss_fn(model):
        logits = model(x, mask)
        return losses.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))

    loss, grads = js.value_and_grad(loss_fn)(model)
    optimizer.step(grads)
    return loss


js_step = js.jit(js_step_fn)


# -- hand-written: the same network over js's parameter paths.


def _attention_matmul(q, k, v, mask):
    """``softmax(q k^T / sqrt(d), masked) v`` written out: ``[B, h, T, d]`` each."""
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])  # [B, h, T, T]
    weights = jax.nn.softmax(jnp.where(mask, scores, jnp.finfo(scores.dtype).min), axis=-1)
    return weights @ v


def _attention_fused(q, k, v, mask):
    """The same through ``jax.nn.dot_product_attention`` (``[B, T, h, d]`` layout)."""
    t = lambda a: a.transpose(0, 2, 1, 3)  # noqa: E731
    return t(jax.nn.dot_product_attention(t(q), t(k), t(v), is_causal=True))


def _block(p, x, mask, heads, prefix, attend):
    B, T, D = x.shape
    h = _ln(x, p[f"{prefix}.ln1.weight"], p[f"{prefix}.ln1.bias"])
    qkv = h @ p[f"{prefix}.attn.in_proj_weight"].T + p[f"{prefix}.attn.in_proj_bias"]
    q, k, v = (
        a.reshape(B, T, heads, D // heads).transpose(0, 2, 1, 3)  # [B, h, T, d]
        for a in jnp.split(qkv, 3, axis=-1)
    )
    a = attend(q, k, v, mask).transpose(0, 2, 1, 3).reshape(B, T, D)
    x = x + a @ p[f"{prefix}.attn.out_proj.weight"].T + p[f"{prefix}.attn.out_proj.bias"]
    h = _ln(x, p[f"{prefix}.ln2.weight"], p[f"{prefix}.ln2.bias"])
    h = jax.nn.gelu(h @ p[f"{prefix}.fc1.weight"].T + p[f"{prefix}.fc1.bias"], approximate=False)
    return x + h @ p[f"{prefix}.fc2.weight"].T + p[f"{prefix}.fc2.bias"]


def jax_loss(p, extra, x, y, mask, *, layers, heads, attend=_attention_matmul):
    h = p["tok.weight"][x] + p["pos.weight"][: x.shape[1]]  # [B, T, D]
    for i in range(layers):
        h = _block(p, h, mask, heads, f"blocks.{i}", attend)
    h = _ln(h, p["ln_f.weight"], p["ln_f.bias"])
    logits = h @ p["head.weight"].T + p["head.bias"]  # [B, T, V]
    return C.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)), extra


def _torch_model(layers, heads, dim, context):
    import torch
    import torch.nn.functional as F
    from torch import nn as tnn

    class TBlock(tnn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = tnn.LayerNorm(dim), tnn.LayerNorm(dim)
            self.c_attn, self.c_proj = tnn.Linear(dim, 3 * dim), tnn.Linear(dim, dim)
            self.fc1, self.fc2 = tnn.Linear(dim, 4 * dim), tnn.Linear(4 * dim, dim)

        def forward(self, x):
            B, T, D = x.shape
            q, k, v = (
                a.view(B, T, heads, D // heads).transpose(1, 2)
                for a in self.c_attn(self.ln1(x)).split(D, dim=2)
            )
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(a.transpose(1, 2).reshape(B, T, D))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class TGPT(tnn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = tnn.Embedding(VOCAB, dim), tnn.Embedding(context, dim)
            self.blocks = tnn.Sequential(*[TBlock() for _ in range(layers)])
            self.ln_f, self.head = tnn.LayerNorm(dim), tnn.Linear(dim, VOCAB)

        def forward(self, tokens):
            x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
            return self.head(self.ln_f(self.blocks(x)))

    return TGPT()


def _torch_loss(model, x, y):
    import torch

    return torch.nn.functional.cross_entropy(
        model(x.long()).reshape(-1, VOCAB), y.long().reshape(-1)
    )


def variants(layers=4, heads=4, dim=128, context=128, batch=16) -> dict[str, Variant]:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (batch, context + 1)).astype(np.int32)
    x, y = tokens[:, :-1], tokens[:, 1:]  # next-character prediction
    mask = np.asarray(causal_mask(context))  # [1, 1, T, T], True = attend
    model = GPT(layers, heads, dim, context, rngs=js.Rngs(params=0))
    params = C.param_dict(model)

    def loss(attend):
        return lambda p, e, x, y, m: jax_loss(
            p, e, x, y, m, layers=layers, heads=heads, attend=attend
        )

    out = {
        "js": C.js_variant(
            js_step,
            model,
            js.optim.Adam(model.parameters(), lr=C.LR),
            *(jnp.asarray(a) for a in (x, y, mask)),
        ),
        "jax": C.jax_variant(loss(_attention_matmul), params, (x, y, mask)),
        "jax (dot_product_attention)": C.jax_variant(
            loss(_attention_fused), C.param_dict(model), (x, y, mask)
        ),
    }
    old = GPT(layers, heads, dim, context, rngs=js.Rngs(params=0))
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
        out["torch"] = C.torch_variant(
            _torch_model(layers, heads, dim, context), _torch_loss, (x, y)
        )
    return out
