"""Content digests of checkpoint arrays, on the host (NumPy) and on devices (jax.numpy).

Every array is read as 32-bit words ``w[j]`` (a 4-byte element is one word, an 8-byte one
two, a 1- or 2-byte one a zero-extended word), ``j`` the row-major word index; its digest is
the pair of sums modulo 2**32 ``a = sum((w[j] ^ 0x5bd1e995) * (2 j + 1))`` and
``b = sum(fmix32(w[j] + j * 0x9e3779b9))`` (MurmurHash3's finaliser): ``a`` catches any
changed word, ``b`` moved words. A check against damage, not an adversary.

One formula, :func:`digest_terms`, for NumPy and ``jax.numpy``. It is a sum, and integer
addition modulo 2**32 is associative and commutative, so XLA computes it shard by shard: a
sharded array (even one spread over several processes, which no process can turn into NumPy)
gets the same digest as its gathered copy, on any mesh, without a transfer.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

EMPTY = "0" * 16
_K1, _GOLDEN, _M1, _M2 = 0x5BD1E995, 0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35


def _fmix(h, xp):
    h = h ^ (h >> 16)
    h = h * xp.uint32(_M1)
    h = h ^ (h >> 13)
    h = h * xp.uint32(_M2)
    return h ^ (h >> 16)


def _host_words(array: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(array).reshape(-1)
    size = flat.dtype.itemsize
    if size in (4, 8):
        return flat.view(np.uint32)
    return flat.view({1: np.uint8, 2: np.uint16}[size]).astype(np.uint32)


def digest_terms(words: Any, index: Any, xp: Any = np) -> tuple[Any, Any]:
    """The two per-word terms whose sums modulo 2**32 are an array's digest: ``words`` its
    bytes as uint32 words, ``index`` their row-major positions (uint32), ``xp`` the array
    module (NumPy on the host, ``jax.numpy`` on devices)."""
    a = (words ^ xp.uint32(_K1)) * (index * xp.uint32(2) + xp.uint32(1))
    return a, _fmix(words + index * xp.uint32(_GOLDEN), xp)


def hex_digest(a: int, b: int) -> str:
    """The digest's text: the two sums, modulo 2**32, as 16 hex digits."""
    return f"{a & 0xFFFFFFFF:08x}{b & 0xFFFFFFFF:08x}"


def packed_digests(buffer: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> list[str]:
    """The digest of each array packed in ``buffer`` (1-D, one dtype), array ``i`` being
    ``buffer[starts[i]:starts[i] + sizes[i]]``, in one vectorised pass."""
    if len(starts) == 0:
        return []
    words = _host_words(buffer)
    per = 2 if np.dtype(buffer.dtype).itemsize == 8 else 1
    starts, sizes = np.asarray(starts, np.int64) * per, np.asarray(sizes, np.int64) * per
    owner = np.repeat(np.arange(len(starts)), sizes)
    index = (np.arange(len(words), dtype=np.int64) - starts[owner]).astype(np.uint32)
    sums = []
    for term in digest_terms(words, index):
        # Sums of at most 2**32 uint32 terms fit in uint64: exact, then reduced modulo 2**32.
        total = np.concatenate([[0], np.cumsum(term, dtype=np.uint64)])
        sums.append(total[starts + sizes] - total[starts])
    return [hex_digest(int(a), int(b)) for a, b in zip(*sums, strict=True)]


def host_digest(array: np.ndarray) -> str:
    """The digest of one NumPy array (:func:`device_digests` computes the same on devices)."""
    words = _host_words(np.asarray(array))
    if words.size == 0:
        return EMPTY
    a, b = digest_terms(words, np.arange(words.size, dtype=np.uint32))
    return hex_digest(int(np.sum(a, dtype=np.uint64)), int(np.sum(b, dtype=np.uint64)))


# -- on devices -----------------------------------------------------------------------------


def _device_words(x: jax.Array) -> jax.Array:
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    size = np.dtype(x.dtype).itemsize
    if size in (4, 8):
        return jax.lax.bitcast_convert_type(x, jnp.uint32)  # [..., 2] for 8-byte elements
    narrow = {1: jnp.uint8, 2: jnp.uint16}[size]
    return jax.lax.bitcast_convert_type(x, narrow).astype(jnp.uint32)


@functools.partial(jax.jit)
def _device_sums(x: jax.Array) -> jax.Array:
    words = _device_words(x)
    index = jnp.zeros(words.shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(words.ndim)):  # the row-major word index, shard by shard
        index = index + jax.lax.broadcasted_iota(jnp.uint32, words.shape, axis) * jnp.uint32(
            stride & 0xFFFFFFFF
        )
        stride *= words.shape[axis]
    a, b = digest_terms(words, index, jnp)
    # One reduction with two outputs: XLA fuses the terms into it and reads the array once.
    # Two jnp.sums made XLA:CPU keep two array-sized temporaries (a 200 MB model's save
    # needed 100 MB more) and ran 30 times slower.
    zero = jnp.uint32(0)
    sums = jax.lax.reduce((a, b), (zero, zero), _add_pairs, tuple(range(words.ndim)))
    return jnp.stack(sums)


def _add_pairs(x, y):
    return x[0] + y[0], x[1] + y[1]


def device_digests(arrays: list[jax.Array]) -> list[str]:
    """The digest of each ``jax.Array``, computed on its devices (every process of a
    multi-process job must call this together: the sums are collectives)."""
    sums = [_device_sums(x) if x.size else None for x in arrays]  # dispatch all, then read
    out = []
    for total in sums:
        if total is None:
            out.append(EMPTY)
            continue
        a, b = np.asarray(total.addressable_data(0))  # replicated: every process holds it
        out.append(hex_digest(int(a), int(b)))
    return out
