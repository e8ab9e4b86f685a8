"""MLP workloads: the tiny 10-16-16-4 (dispatch overhead) and 784-512-512-10 (compute), Adam."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import js
import js.losses as losses
import js.nn as nn
import js.optim

from . import _common as C
from ._harness import Variant


def _loss(model, x, y):
    return losses.cross_entropy(model(x), y)


def js_step_fn(model, optimizer, x, y):
    """The js training step: value_and_grad of the model, one optimizer step, the loss."""
    loss, grads = js.value_and_grad(_loss)(model, x, y)
    optimizer.step(grads)
    return loss


js_step = js.jit(js_step_fn)


def js_model(sizes, seed=0):
    rngs = js.Rngs(params=seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b, rngs=rngs))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _forward(params, x):
    """``x @ W^T + b`` per layer (torch layout, as js stores it), ReLU between."""
    for i in range(0, len(params), 2):
        x = x @ params[i].T + params[i + 1]
        if i + 2 < len(params):
            x = jax.nn.relu(x)
    return x


def _jax_loss(params, extra, x, y):
    return C.cross_entropy(_forward(params, x), y), extra


def _nnx_model(sizes):
    rngs = nnx.Rngs(0)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nnx.Linear(a, b, rngs=rngs))
        if i < len(sizes) - 2:
            layers.append(nnx.relu)
    return nnx.Sequential(*layers)


def _nnx_loss(model, x, y):
    return C.cross_entropy(model(x), y)


def _torch_model(sizes):
    import torch

    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def _torch_loss(model, x, y):
    import torch

    return torch.nn.functional.cross_entropy(model(x), y.long())


def variants(sizes, batch: int, *, torch: bool = True) -> dict[str, Variant]:
    """js, hand-written JAX (same initial weights as js), nnx and torch for one MLP."""
    x, y = C.classes(0, batch, sizes[0], sizes[-1])
    model = js_model(sizes)
    params = C.param_arrays(model)
    optimizer = js.optim.Adam(model.parameters(), lr=C.LR)
    out = {
        "js": C.js_variant(js_step, model, optimizer, jnp.asarray(x), jnp.asarray(y)),
        "jax": C.jax_variant(_jax_loss, params, (x, y)),
        "nnx": C.nnx_variant(_nnx_model(sizes), _nnx_loss, (x, y)),
    }
    if torch and C.HAVE_TORCH:
        C.torch_manual_seed()
        out["torch"] = C.torch_variant(_torch_model(sizes), _torch_loss, (x, y))
    return out


def scan_variants(sizes, batch: int, ks=(8, 32)) -> dict[str, Variant]:
    """K steps per dispatch on the tiny MLP: ``js.jit(js.scan_steps(step))`` for each K.

    The K=1 rows are the plain ``js.jit`` step and the hand-written step; ``jax scan K=..`` is
    the hand-written scan of the same step, the limit of K steps per dispatch.
    """
    out = variants(sizes, batch, torch=False)
    del out["nnx"]
    x, y = C.classes(0, batch, sizes[0], sizes[-1])
    for k in ks:
        model = js_model(sizes)
        optimizer = js.optim.Adam(model.parameters(), lr=C.LR)
        xs = jnp.asarray(np.broadcast_to(x, (k, *x.shape)))  # [K, B, I]
        ys = jnp.asarray(np.broadcast_to(y, (k, *y.shape)))  # [K, B]
        run = js.jit(js.scan_steps(js_step_fn))
        variant = C.js_variant(run, model, optimizer, xs, ys)
        variant.steps_per_call = k
        out[f"js K={k}"] = variant
    k = max(ks)
    out[f"jax scan K={k}"] = _jax_scan(C.param_arrays(js_model(sizes)), x, y, k)
    return out


def _jax_scan(params, x, y, k: int) -> Variant:
    """Hand-written: K Adam steps in one ``lax.scan`` inside one donated ``jax.jit``."""
    import functools

    import optax

    tx = optax.adam(C.LR)

    def one(carry, batch):
        params, opt_state = carry
        loss, grads = jax.value_and_grad(lambda p: _jax_loss(p, None, *batch)[0])(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    @functools.partial(jax.jit, donate_argnums=(0,))
    def run(carry, xs, ys):
        return jax.lax.scan(one, carry, (xs, ys))

    state = [(params, tx.init(params))]
    xs = jnp.asarray(np.broadcast_to(x, (k, *x.shape)))
    ys = jnp.asarray(np.broadcast_to(y, (k, *y.shape)))

    def step():
        state[0], loss = run(state[0], xs, ys)
        return loss

    return Variant(step=step, steps_per_call=k)
