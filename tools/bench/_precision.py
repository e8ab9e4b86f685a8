"""Mixed precision on the transformer block of ``_transformer``: bf16 compute with float32
parameters and Adam state (``js.training.autocast``) against the same js step in float32,
and the hand-written float32 step as the reference. On the CPU, bf16 arithmetic is emulated
(converted to float32 around each op), so the step time says little; the compiled program's
memory (activations kept for the backward pass in bf16) is the check."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import js
import js.losses as losses
import js.optim
from js.nn.attention import causal_mask
from js.training import autocast

from . import _common as C
from ._harness import Variant
from ._transformer import Block, _jax_loss


@js.jit
def bf16_step(model, optimizer, x, y, mask):
    def loss_fn(model):
        with autocast(model, jnp.bfloat16):
            out = model(x.astype(jnp.bfloat16), mask)  # [B, T, D] in bf16
        return losses.mse_loss(out.astype(jnp.float32), y)

    loss, grads = js.value_and_grad(loss_fn)(model)  # float32, like the parameters
    optimizer.step(grads)
    return loss


@js.jit
def f32_step(model, optimizer, x, y, mask):
    def loss_fn(model):
        return losses.mse_loss(model(x, mask), y)

    loss, grads = js.value_and_grad(loss_fn)(model)
    optimizer.step(grads)
    return loss


def variants(batch: int, steps: int, dim: int) -> dict[str, Variant]:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((batch, steps, dim)).astype(np.float32))
    y = jnp.asarray(rng.standard_normal((batch, steps, dim)).astype(np.float32))
    mask = jnp.asarray(causal_mask(steps))  # [1, 1, T, T], True = attend
    out = {
        "jax": C.jax_variant(
            _jax_loss, C.param_dict(Block(dim, rngs=js.Rngs(params=0))), (x, y, mask)
        )
    }
    for name, step in (("js float32", f32_step), ("js bf16-mixed", bf16_step)):
        model = Block(dim, rngs=js.Rngs(params=0))
        optimizer = js.optim.Adam(model.parameters(), lr=C.LR)
        out[name] = C.js_variant(step, model, optimizer, x, y, mask)
    return out
