"""Shared checks of the four ports against PyTorch: outputs, every gradient, Adam in lockstep.

``MAX_DIFF[port][what]`` keeps the largest difference measured (printed by test_ports.py's
report with ``JS_NN_REPORT=1``; the figures in docs/porting.md come from it).
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np

import js
from js._checks import flatten_state

MAX_DIFF: dict[str, dict[str, float]] = collections.defaultdict(dict)


def record(port: str, what: str, value: float) -> float:
    MAX_DIFF[port][what] = max(MAX_DIFF[port].get(what, 0.0), value)
    return value


def to_torch_layout(model, grads) -> dict[str, np.ndarray]:
    """``{torch key: array}`` from js gradients, through each layer's ``to_torch`` hook (the
    transposed convolutions' weight layout), as ``js.nn.torch_state_dict`` converts weights."""
    owners = dict(model.named_modules())
    out = {}
    for key, value in flatten_state(grads).items():
        prefix, _, name = key.rpartition(".")
        convert = getattr(owners.get(prefix), "to_torch", lambda name, array: array)
        out[key] = np.asarray(convert(name, np.asarray(value)))
    return out


def js_output_and_grads(model, forward, cotangents, *args):
    """``forward(model, *args)`` (an array or a tuple of them), and the gradient of
    ``sum(out * cotangent)`` for every Parameter, in one compiled call."""

    def loss(m, *a):
        outs = forward(m, *a)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return sum(jnp.sum(o * c) for o, c in zip(outs, cotangents, strict=True)), outs

    step = js.jit(lambda m, *a: js.value_and_grad(loss, has_aux=True)(m, *a))
    (_, outs), grads = step(model, *args)
    return [np.asarray(o) for o in outs], to_torch_layout(model, grads)


def torch_output_and_grads(torch, model, forward, cotangents, *args):
    """The same in PyTorch: outputs and ``{name: grad}`` for every parameter."""
    model.zero_grad(set_to_none=True)
    outs = forward(model, *args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = zip(outs, cotangents, strict=True)
    total = sum((o * torch.from_numpy(np.array(c))).sum() for o, c in pairs)
    total.backward()
    grads = {name: p.grad.numpy() for name, p in model.named_parameters()}
    return [o.detach().numpy() for o in outs], grads


def cotangents_for(shapes, seed: int = 2) -> list[jax.Array]:
    keys = jax.random.split(jax.random.key(seed), len(shapes))
    return [jax.random.normal(k, s) for k, s in zip(keys, shapes, strict=True)]


def max_abs(pairs) -> float:
    return max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)), initial=0.0)) for a, b in pairs)


def grad_differences(grads: dict, t_grads: dict) -> tuple[float, float]:
    """(max |js - torch|, max of that over each gradient's largest |torch| value)."""
    assert sorted(grads) == sorted(t_grads), (sorted(grads), sorted(t_grads))
    absolute = relative = 0.0
    for key, t_value in t_grads.items():
        diff = float(np.max(np.abs(grads[key] - t_value), initial=0.0))
        absolute = max(absolute, diff)
        relative = max(relative, diff / max(float(np.max(np.abs(t_value))), 1e-12))
    return absolute, relative


def relative_loss_difference(losses, t_losses) -> float:
    losses, t_losses = np.asarray(losses, np.float64), np.asarray(t_losses, np.float64)
    return float(np.max(np.abs(losses - t_losses) / np.abs(t_losses)))
