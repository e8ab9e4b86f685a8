"""Parameter factories shared by every layer: each takes the layer's ``dtype``.

Why this file exists: ``jnp.zeros(shape)`` and ``jax.random.normal(key, shape)`` without a dtype
follow JAX's *default* float, which is float64 once ``jax_enable_x64`` is on. Layers that built
their biases, norm parameters, statistics and embeddings that way came out float64 next to
float32 weights, and a float32 PyTorch state dict no longer loaded. Every parameter is made
here instead, in ``float_dtype(dtype)``: float32 unless the layer was given ``dtype=``
(PyTorch's factory keyword), whatever the x64 flag says.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from . import _random


def float_dtype(layer: str, dtype=None) -> np.dtype:
    """``dtype`` (default float32) as a NumPy dtype, after refusing non-float ones."""
    if dtype is None:
        return np.dtype(np.float32)
    try:
        resolved = jnp.dtype(dtype)
    except TypeError:
        resolved = None
    if resolved is None or not jnp.issubdtype(resolved, jnp.floating):
        raise TypeError(
            f"{layer}: dtype must be a floating-point dtype (jnp.float32, jnp.bfloat16, ...), "
            f"got {dtype!r}. Fix: pass dtype=jnp.float32 or leave it out"
        )
    return resolved


# Every array is built on the host by ``_random`` (no compilation per shape at construction).
def zeros(shape, dtype) -> jax.Array:
    return _random.zeros(tuple(shape), dtype)


def ones(shape, dtype) -> jax.Array:
    return _random.ones(tuple(shape), dtype)


def uniform_fan_in(key, shape, fan_in: int, dtype=jnp.float32) -> jax.Array:
    """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: the Linear/conv weight initialisation."""
    bound = 1.0 / math.sqrt(fan_in)
    return _random.uniform(key, tuple(shape), -bound, bound, dtype)


def normal(key, shape, dtype=jnp.float32) -> jax.Array:
    """``N(0, 1)``: Embedding's initialisation."""
    return _random.normal(key, tuple(shape), dtype=dtype)
