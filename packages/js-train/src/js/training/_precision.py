"""Mixed precision: compute in bfloat16 (or float16) with float32 parameters at rest.

``autocast(model, dtype)`` is a context manager used *inside* a step's loss function. On entry
it casts every floating parameter of ``model`` to ``dtype`` in place; on exit it puts the
original float32 arrays back and casts any buffer the forward pass wrote (BatchNorm's running
statistics) back to its dtype on entry. Inside ``js.value_and_grad`` the cast is part of the
differentiated function, so the gradients come back in float32, the dtype of the parameters:
the optimizer's moments and update stay float32 (the "master weights"), as with
``precision="bf16-mixed"`` in PyTorch Lightning or ``jmp``'s ``compute_dtype`` policy. Nothing
is cast at rest: ``state_dict``, checkpoints and the optimizer only ever see float32.

Inputs are not touched (the step casts ``x``; an integer input such as token ids stays an
integer), and the loss should be computed in float32 from the upcast output, as the reference
steps in :mod:`js.training.steps` do with ``compute_dtype=``. Float16's narrow exponent needs
loss scaling, which this does not do: use bfloat16 (same exponent range as float32).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

import js

_DTYPES = (jnp.bfloat16, jnp.float16, jnp.float32)


def check_compute_dtype(owner: str, dtype: DTypeLike | None) -> np.dtype | None:
    """``dtype`` as a NumPy dtype when it is None, bfloat16, float16 or float32."""
    if dtype is None:
        return None
    try:
        found = np.dtype(dtype)
    except TypeError:
        found = None
    if found not in [np.dtype(d) for d in _DTYPES]:
        raise ValueError(
            f"{owner}: compute_dtype must be None, jnp.bfloat16, jnp.float16 or jnp.float32, "
            f"got {dtype!r}. Fix: compute_dtype=jnp.bfloat16 for bf16 mixed precision."
        )
    return found


@contextlib.contextmanager
def autocast(model: js.Module, dtype: DTypeLike = jnp.bfloat16) -> Iterator[js.Module]:
    """Run ``model``'s forward passes with its floating parameters cast to ``dtype``.

    Args:
        model: a ``js.Module``.
        dtype: the compute dtype (``jnp.bfloat16``; float16 or float32 also accepted).

    Example:
        >>> import jax.numpy as jnp, js, js.nn as nn
        >>> layer = nn.Linear(3, 2, rngs=js.Rngs(params=0))
        >>> with autocast(layer, jnp.bfloat16):
        ...     y = layer(jnp.ones((1, 3), jnp.bfloat16))
        >>> y.dtype, layer.weight.value.dtype
        (dtype(bfloat16), dtype('float32'))
    """
    if not isinstance(model, js.Module):
        raise TypeError(f"autocast: model must be a js.Module, got {type(model).__name__}")
    compute = check_compute_dtype("autocast", dtype)
    params = [p for _, p in model.named_parameters()]
    kept = [p.value for p in params]
    buffers = [(b, b.value.dtype) for _, b in model.named_buffers()]
    for param, value in zip(params, kept, strict=True):
        if jnp.issubdtype(value.dtype, jnp.floating):
            param.value = value.astype(compute)
    try:
        yield model
    finally:
        for param, value in zip(params, kept, strict=True):
            param.value = value
        for buffer, was in buffers:
            if buffer.value.dtype != was:
                buffer.value = buffer.value.astype(was)
