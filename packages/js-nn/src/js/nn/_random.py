"""Initial arrays drawn on the host, without compiling a program per shape.

Eager JAX compiles every op once per shape and dtype on first use, so drawing each layer's
weights with ``jax.random`` made building a model cost a compilation per distinct weight shape
(1.5 s for a small CNN). Here a layer's key (``rngs.next("params")``) seeds a NumPy PCG64
generator through its key data, the values are computed in NumPy (float64, then cast to the
parameter's dtype) and copied to the device once. The same key gives the same weights on every
platform and in either ``jax_enable_x64`` mode. The formulas use the generator's raw 64-bit
words only, not NumPy's distribution methods, whose streams NumPy may change between versions.

Under a trace (a model built inside ``js.jit`` or ``jax.eval_shape``) the key is abstract and the
draw falls back to ``jax.random`` with the same distribution but different values.
"""

from __future__ import annotations

import math

import jax
import jax.core  # jax.core.Tracer below; pyright knows a submodule only once imported
import jax.numpy as jnp
import numpy as np

Shape = tuple[int, ...]

# Acklam's rational approximation of the normal quantile (relative error < 1.2e-9).
_A = (
    -39.69683028665376,
    220.9460984245205,
    -275.9285104469687,
    138.3577518672690,
    -30.66479806614716,
    2.506628277459239,
)
_B = (
    -54.47609879822406,
    161.5858368580409,
    -155.6989798598866,
    66.80131188771972,
    -13.28068155288572,
)
_C = (
    -7.784894002430293e-03,
    -3.223964580411365e-01,
    -2.400758277161838,
    -2.549732539343734,
    4.374664141464968,
    2.938163982698783,
)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996, 3.754408661907416)
_P_LOW = 0.02425


def _is_traced(key) -> bool:
    return isinstance(key, jax.core.Tracer)


def _raw_words(key, size: int) -> np.ndarray:
    """``size`` uint64 words from a PCG64 generator seeded with the key's data."""
    seed = np.random.SeedSequence(np.asarray(jax.random.key_data(key), np.uint32).tolist())
    return np.random.PCG64(seed).random_raw(size).astype(np.uint64)


def _open_unit(key, size: int) -> np.ndarray:
    """Float64 uniforms in the open interval (0, 1), 53 bits each."""
    return ((_raw_words(key, size) >> np.uint64(11)) + 0.5) * 2.0**-53


def _polyval(coefficients, x):
    result = np.zeros_like(x)
    for c in coefficients:
        result = result * x + c
    return result


def ndtri(p: np.ndarray) -> np.ndarray:
    """The standard normal quantile ``Phi^-1(p)`` for ``p`` in (0, 1), float64."""
    p = np.asarray(p, np.float64)
    tail = np.minimum(p, 1.0 - p)
    q = np.sqrt(-2.0 * np.log(np.where(tail < _P_LOW, tail, 0.5)))
    low = _polyval(_C, q) / (_polyval(_D, q) * q + 1.0)
    r = (p - 0.5) ** 2
    central = (p - 0.5) * _polyval(_A, r) / (_polyval(_B, r) * r + 1.0)
    return np.where(tail < _P_LOW, np.where(p < 0.5, low, -low), central)


def _to_device(values: np.ndarray, dtype, sharding) -> jax.Array:
    # jax.device_put compiles nothing (jnp.asarray does); casting here keeps float32 under x64.
    return jax.device_put(np.asarray(values, np.float64).astype(np.dtype(dtype)), sharding)


def uniform(key, shape: Shape, low: float, high: float, dtype=jnp.float32, sharding=None):
    """``U(low, high)`` of ``shape`` and ``dtype`` from a JAX key, placed with ``sharding``."""
    if _is_traced(key):
        return jax.random.uniform(key, shape, dtype, low, high)
    size = math.prod(shape)
    unit = (_raw_words(key, size) >> np.uint64(11)) * 2.0**-53  # [0, 1)
    return _to_device((low + (high - low) * unit).reshape(shape), dtype, sharding)


def normal(key, shape: Shape, mean=0.0, std=1.0, dtype=jnp.float32, sharding=None):
    """``N(mean, std^2)`` of ``shape`` and ``dtype`` from a JAX key (inverse-CDF method)."""
    if _is_traced(key):
        return mean + std * jax.random.normal(key, shape, dtype)
    return _to_device(mean + std * standard_normal(key, shape), dtype, sharding)


def standard_normal(key, shape: Shape) -> np.ndarray:
    """``N(0, 1)`` float64 NumPy values of ``shape`` from a concrete JAX key."""
    return ndtri(_open_unit(key, math.prod(shape))).reshape(shape)


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def truncated_normal(key, shape: Shape, mean, std, a, b, dtype=jnp.float32, sharding=None):
    """``N(mean, std^2)`` conditioned on ``[a, b]`` (absolute bounds, as torch's)."""
    if _is_traced(key):
        lo, hi = (a - mean) / std, (b - mean) / std
        return mean + std * jax.random.truncated_normal(key, lo, hi, shape, dtype)
    # torch's method: uniform between the bounds' CDFs, mapped through the normal quantile.
    p_lo, p_hi = _phi((a - mean) / std), _phi((b - mean) / std)
    p = p_lo + (p_hi - p_lo) * _open_unit(key, math.prod(shape))
    values = mean + std * ndtri(np.clip(p, 2.0**-60, 1.0 - 2.0**-53))
    return _to_device(np.clip(values, a, b).reshape(shape), dtype, sharding)


def zeros(shape: Shape, dtype=jnp.float32) -> jax.Array:
    """``jnp.zeros`` built on the host: ``jnp.zeros`` compiles once per shape, this does not."""
    return jax.device_put(np.zeros(shape, np.dtype(dtype)))


def ones(shape: Shape, dtype=jnp.float32) -> jax.Array:
    """``jnp.ones`` built on the host, without a compilation."""
    return jax.device_put(np.ones(shape, np.dtype(dtype)))


def full(shape: Shape, value: float, dtype=jnp.float32, sharding=None) -> jax.Array:
    """``jnp.full`` built on the host and placed with ``sharding``, without a compilation."""
    return jax.device_put(np.full(shape, value, np.dtype(dtype)), sharding)
