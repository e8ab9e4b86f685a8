"""Shared pieces of the workloads: the loss, data, and runners for each way of stepping."""

from __future__ import annotations

import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ._harness import Variant, js_program, program_bytes, program_flops

HAVE_TORCH = importlib.util.find_spec("torch") is not None
LR = 1e-3


def cross_entropy(logits, y):
    """Mean cross-entropy of integer labels, written out (the hand-written variants' loss)."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=-1))


def classes(key: int, batch: int, features, n_classes: int):
    """A fixed batch: ``x`` normal ``[batch, *features]`` float32, ``y`` ``[batch]`` int32."""
    rng = np.random.default_rng(key)
    shape = (batch, *features) if isinstance(features, tuple) else (batch, features)
    x = rng.standard_normal(shape).astype(np.float32)
    return x, rng.integers(0, n_classes, batch).astype(np.int32)


def param_arrays(model) -> list[jax.Array]:
    """Independent copies of a js model's Parameters, in ``parameters()`` order."""
    return [jnp.array(np.array(p.value)) for p in model.parameters()]


def param_dict(model) -> dict[str, jax.Array]:
    """``{path: array}``: independent copies of a js model's Parameters."""
    return {path: jnp.array(np.array(p.value)) for path, p in model.named_parameters()}


def js_variant(step, *objects_and_batch) -> Variant:
    """A variant running ``step`` (a ``js.jit`` function) on fixed arguments."""
    return Variant(
        step=lambda: step(*objects_and_batch),
        memory=lambda: program_bytes(js_program(step, *objects_and_batch)),
    )


def jax_variant(loss_fn, params, batch, *, extra=None) -> Variant:
    """Hand-written JAX: ``jax.jit`` over a pytree of arrays, optax Adam, donated state.

    ``loss_fn(params, extra, *batch) -> (loss, new_extra)``; ``extra`` is non-differentiated
    state (BatchNorm statistics, a dropout key), threaded and donated like the parameters.
    """
    tx = optax.adam(LR)

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
    def step(params, opt_state, extra, *batch):
        (loss, extra), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, extra, *batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, extra, loss

    state = [params, tx.init(params), extra]
    batch = tuple(jnp.asarray(b) for b in batch)

    def run():
        *new, loss = step(*state, *batch)
        state[:] = new
        return loss

    compiled = functools.cache(lambda: step.lower(*state, *batch).compile())
    return Variant(
        step=run, memory=lambda: program_bytes(compiled()), flops=lambda: program_flops(compiled())
    )


def nnx_variant(model, loss_fn, batch) -> Variant:
    """Flax NNX the documented way: ``nnx.jit`` over the module and an ``nnx.Optimizer``."""
    optimizer = nnx.Optimizer(model, optax.adam(LR), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, *batch):
        grad_fn = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.Param))
        loss, grads = grad_fn(model, *batch)
        optimizer.update(model, grads)
        return loss

    batch = tuple(jnp.asarray(b) for b in batch)
    return Variant(
        step=lambda: step(model, optimizer, *batch),
        memory=lambda: program_bytes(step.lower(model, optimizer, *batch).compile()),
    )


def torch_variant(model, loss_fn, batch) -> Variant:
    """PyTorch eager on the CPU: ``torch.optim.Adam``, zero_grad / backward / step."""
    import torch

    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    batch = tuple(torch.from_numpy(np.asarray(b)) for b in batch)

    def run():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, *batch)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return Variant(step=run)


def traced_with(variant: Variant, owner, name: str, replacement) -> Variant:
    """``variant`` traced with ``owner.name`` replaced: a "before" variant of a js-nn change.

    The first call (where the step is traced and compiled) and the memory analysis (which
    lowers it again) see the old formulation; the library is restored right after each, so
    the variants of a workload still interleave. The variant's step must be its own
    ``js.jit`` function, not one shared with the "after" variant.
    """
    step, memory, first = variant.step, variant.memory, [True]

    def patched(fn):
        saved = getattr(owner, name)
        setattr(owner, name, replacement)
        try:
            return fn()
        finally:
            setattr(owner, name, saved)

    def run():
        if first[0]:
            first[0] = False
            return patched(step)
        return step()

    variant.step, variant.memory = run, lambda: patched(memory)
    return variant


def torch_manual_seed(seed: int = 0) -> None:
    if HAVE_TORCH:
        import torch

        torch.manual_seed(seed)
