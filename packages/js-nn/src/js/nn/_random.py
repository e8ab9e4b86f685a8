"""Initial arrays drawn on the host, without compiling a program per shape.

Eager JAX compiles every op once per shape and dtype on first use, so drawing each layer's
weights with ``jax.random`` made building a model cost a compilation per distinct weight shape
(1.5 s for a small CNN). Here a layer's key (``rngs.next("params")``) seeds a NumPy PCG64
generator through its key data, the values are computed in NumPy and handed to the device
without a copy. A float64 array's numbers come from one 64-bit word each, computed in float64
(53-bit uniforms); a float32, bfloat16 or float16 array's from 32 bits each (a word's low half,
then its high half), computed in float32 (23- or 24-bit uniforms), which is the precision they
are kept in and twice as fast. The same key gives the same weights on every platform and in
either ``jax_enable_x64`` mode. The formulas use the generator's raw 64-bit words only, not
NumPy's distribution methods, whose streams NumPy may change between versions.

Under a trace (a model built inside ``js.jit`` or ``jax.eval_shape``) the key is abstract and the
draw falls back to ``jax.random`` with the same distribution but different values.
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import os

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


def _generator(key) -> np.random.PCG64:
    """The PCG64 generator a concrete key seeds (through its key data)."""
    return np.random.PCG64(
        np.random.SeedSequence(np.asarray(jax.random.key_data(key), np.uint32).tolist())
    )


# Numbers are drawn and computed in blocks of this many: the dozen passes of the quantile's
# formula then run over arrays that stay in the CPU's cache (about 15 ns a number, against 170
# ns over a whole 40M-number embedding), and NumPy releases the GIL for each pass, so a long
# draw runs on one thread per core. Each thread takes a stretch of blocks and its own copy of
# the generator, advanced to the stretch's first word (PCG64's ``advance`` jumps in O(log n)):
# every number comes from the same word, through the same operations, as over the whole array.
_BLOCK = 1 << 15


def _polyval(coefficients, x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Horner's rule into ``out``: ``((c0 * x + c1) * x + c2) ...``, in place."""
    np.multiply(x, coefficients[0], out=out)  # the same product as c0 * x, one pass fewer
    np.add(out, coefficients[1], out=out)
    for c in coefficients[2:]:
        np.multiply(out, x, out=out)
        np.add(out, c, out=out)
    return out


def _ndtri_into(p: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = ndtri(p)`` for one block; ``out`` may be ``p`` (all of ``p`` is read first)."""
    x = p - 0.5
    tail = np.minimum(p, 1.0 - p)
    where = np.flatnonzero(tail < _P_LOW)  # about 5% of the numbers: their own formula
    tail, below = tail[where], p[where] < 0.5
    r = x * x
    den = _polyval(_B, r, np.empty_like(r))
    np.multiply(den, r, out=den)
    np.add(den, 1.0, out=den)
    _polyval(_A, r, out)
    np.multiply(x, out, out=out)
    np.divide(out, den, out=out)
    if where.size:
        q = np.sqrt(-2.0 * np.log(tail))
        low = _polyval(_C, q, np.empty_like(q)) / (_polyval(_D, q, np.empty_like(q)) * q + 1.0)
        out[where] = np.where(below, low, -low)


def ndtri(p: np.ndarray) -> np.ndarray:
    """The standard normal quantile ``Phi^-1(p)`` for ``p`` in (0, 1), float64."""
    p = np.asarray(p, np.float64)
    out = np.empty_like(p)
    _ndtri_into(p.reshape(-1), out.reshape(-1))
    return out


@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
    """One thread per core this process may use (as torch's initialisation uses them)."""
    return concurrent.futures.ThreadPoolExecutor(_cores(), "js-init")


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# A forked child has none of its parent's threads: it builds its own pool on first use.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool.cache_clear)


def _open_unit(words: np.ndarray) -> np.ndarray:
    """Float64 uniforms in the open interval (0, 1), 53 bits each, from uint64 words."""
    return ((words >> np.uint64(11)) + 0.5) * 2.0**-53


def _aligned(size: int, dtype: np.dtype) -> np.ndarray:
    """``np.empty(size, dtype)`` at a 64-byte boundary: ``jax.device_put`` on the CPU then
    keeps the array as the device buffer instead of copying it (a copy of a 150 MB embedding
    costs a tenth of a second, most of it the new pages' faults)."""
    raw = np.empty(size * dtype.itemsize + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + size * dtype.itemsize].view(dtype)


def _half_words(dtype) -> bool:
    """Whether ``dtype``'s numbers are computed in float32 from 32-bit words (float32, bfloat16,
    float16: two numbers a PCG64 word) rather than in float64 from whole words (float64)."""
    return np.dtype(dtype).itemsize < 8


def _computed(key, shape: Shape, dtype, values, half: bool) -> np.ndarray:
    """``values(words)`` over the key's words, a number each, cast into ``dtype``.

    The words are PCG64's, seeded with the key's data; ``values`` sees them a block at a time
    and must compute each number from its own word alone (every formula here does). With
    ``half`` each 64-bit word gives two uint32 words, its low half first.
    """
    size = math.prod(shape)
    out = _aligned(size, np.dtype(dtype))
    first = _generator(key)
    state = first.state  # read before any thread draws from ``first``

    def stretch(lo: int, hi: int) -> None:
        generator = first
        if lo:  # a multiple of _BLOCK, so even
            generator = np.random.PCG64()
            generator.state = state
            generator.advance(lo // 2 if half else lo)
        for at in range(lo, hi, _BLOCK):
            end = min(at + _BLOCK, hi)
            if half:  # little-endian halves: the low one first on every platform
                raw = generator.random_raw(-(-(end - at) // 2)).astype("<u8", copy=False)
                words = raw.view("<u4")[: end - at]
            else:
                words = generator.random_raw(end - at)
            out[at:end] = values(words)

    blocks = -(-size // _BLOCK)
    threads = min(_cores(), blocks // 4)  # below 4 blocks a thread, one thread does it
    if threads < 2:
        stretch(0, size)
    else:
        per = -(-blocks // threads) * _BLOCK
        bounds = [(lo, min(lo + per, size)) for lo in range(0, size, per)]
        list(_pool().map(lambda bound: stretch(*bound), bounds))
    return out.reshape(shape)


def _unit32(words: np.ndarray, bits: int, offset: float) -> np.ndarray:
    """Float32 uniforms ``(k + offset) * 2**-bits`` from the top ``bits`` bits ``k`` of uint32
    words, exact in float32: 24 bits with offset 0 give [0, 1); 23 bits with offset 0.5 the
    open interval (0, 1) (with 24, ``1 - 2**-25`` would round to 1)."""
    unit = (words >> np.uint32(32 - bits)).astype(np.float32)
    if offset:
        unit += np.float32(offset)
    unit *= np.float32(2.0**-bits)
    return unit


def uniform(key, shape: Shape, low: float, high: float, dtype=jnp.float32, sharding=None):
    """``U(low, high)`` of ``shape`` and ``dtype`` from a JAX key, placed with ``sharding``."""
    if _is_traced(key):
        return jax.random.uniform(key, shape, dtype, low, high)
    half = _half_words(dtype)

    def values(words):  # [0, 1): 24 bits in float32 arithmetic, or 53 in float64
        if not half:
            return low + (high - low) * ((words >> np.uint64(11)) * 2.0**-53)
        unit = _unit32(words, 24, 0.0)
        unit *= np.float32(high - low)
        unit += np.float32(low)
        return unit

    return jax.device_put(_computed(key, shape, dtype, values, half), sharding)


def _normal_values(mean: float, std: float, half: bool):
    """The normal's ``values(words)``: the quantile of 23-bit uniforms in float32 (``half``), or
    of 53-bit ones in float64."""

    def values(words):
        if not half:
            unit = _open_unit(words)
            _ndtri_into(unit, unit)  # in place: each block reads p before it writes out
            return mean + std * unit
        unit = _unit32(words, 23, 0.5)
        _ndtri_into(unit, unit)
        unit *= np.float32(std)
        unit += np.float32(mean)
        return unit

    return values


def normal(key, shape: Shape, mean=0.0, std=1.0, dtype=jnp.float32, sharding=None):
    """``N(mean, std^2)`` of ``shape`` and ``dtype`` from a JAX key (inverse-CDF method)."""
    if _is_traced(key):
        return mean + std * jax.random.normal(key, shape, dtype)
    half = _half_words(dtype)
    values = _normal_values(mean, std, half)
    return jax.device_put(_computed(key, shape, dtype, values, half), sharding)


def standard_normal(key, shape: Shape) -> np.ndarray:
    """``N(0, 1)`` float64 NumPy values of ``shape`` from a concrete JAX key."""
    return _computed(key, shape, np.float64, _normal_values(0.0, 1.0, half=False), half=False)


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def truncated_normal(key, shape: Shape, mean, std, a, b, dtype=jnp.float32, sharding=None):
    """``N(mean, std^2)`` conditioned on ``[a, b]`` (absolute bounds, as torch's)."""
    if _is_traced(key):
        lo, hi = (a - mean) / std, (b - mean) / std
        return mean + std * jax.random.truncated_normal(key, lo, hi, shape, dtype)
    # torch's method: uniform between the bounds' CDFs, mapped through the normal quantile.
    p_lo, p_hi = _phi((a - mean) / std), _phi((b - mean) / std)

    def values(words):
        p = np.clip(p_lo + (p_hi - p_lo) * _open_unit(words), 2.0**-60, 1.0 - 2.0**-53)
        _ndtri_into(p, p)
        return np.clip(mean + std * p, a, b)

    return jax.device_put(_computed(key, shape, dtype, values, half=False), sharding)


def zeros(shape: Shape, dtype=jnp.float32) -> jax.Array:
    """``jnp.zeros`` built on the host: ``jnp.zeros`` compiles once per shape, this does not."""
    return jax.device_put(np.zeros(shape, np.dtype(dtype)))


def ones(shape: Shape, dtype=jnp.float32) -> jax.Array:
    """``jnp.ones`` built on the host, without a compilation."""
    return jax.device_put(np.ones(shape, np.dtype(dtype)))


def full(shape: Shape, value: float, dtype=jnp.float32, sharding=None) -> jax.Array:
    """``jnp.full`` built on the host and placed with ``sharding``, without a compilation."""
    return jax.device_put(np.full(shape, value, np.dtype(dtype)), sharding)
