"""Content digests of checkpoint arrays: one 64-bit value, computed on the host or on devices.

Every array is read as 32-bit words ``w[j]`` (its bytes: a 4-byte element is one word, an
8-byte element two, a 1- or 2-byte element one zero-extended word), ``j`` the word's index in
row-major order, and its digest is the pair of sums, modulo 2**32::

    a = sum((w[j] ^ 0x5bd1e995) * (2 j + 1))       b = sum(fmix32(w[j] + j * 0x9e3779b9))

(``fmix32`` is MurmurHash3's finaliser). Why this and not blake2b or xxhash over the bytes:

- it is a sum of per-word terms, and integer addition modulo 2**32 is associative and
  commutative, so XLA computes it *where the array lives*: a sharded array (even one spread
  over several processes, which no process can turn into NumPy) gets the same digest as its
  gathered copy, on any mesh, without a transfer; restoring onto another mesh checks the same
  numbers;
- ``a`` changes with any change of one word (the odd factor is invertible modulo 2**32), so a
  flipped byte or bit is always caught; ``b`` mixes each word non-linearly, so moved or
  swapped words are caught too (with probability 1 - 2**-32);
- NumPy computes the same sums for thousands of small arrays packed in one buffer in one
  vectorised pass (:func:`packed_digests`).

It is a check against damage (truncation, bit rot, a file from another save), not against an
adversary: it is not cryptographic.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

_K1, _GOLDEN, _M1, _M2 = 0x5BD1E995, 0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35
EMPTY = "0" * 16


def _fmix(h, xp):
    h = h ^ (h >> 16)
    h = h * xp.uint32(_M1)
    h = h ^ (h >> 13)
    h = h * xp.uint32(_M2)
    return h ^ (h >> 16)


def host_words(array: np.ndarray) -> np.ndarray:
    """The 32-bit words of a NumPy array, flat (a view when the element is 4 or 8 bytes)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    size = flat.dtype.itemsize
    if size in (4, 8):
        return flat.view(np.uint32)
    return flat.view({1: np.uint8, 2: np.uint16}[size]).astype(np.uint32)


def words_per_item(dtype) -> int:
    return 2 if np.dtype(dtype).itemsize == 8 else 1


def _terms(words: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = (words ^ np.uint32(_K1)) * (index * np.uint32(2) + np.uint32(1))
    b = _fmix(words + index * np.uint32(_GOLDEN), np)
    return a, b


def _hex(a: int, b: int) -> str:
    return f"{a & 0xFFFFFFFF:08x}{b & 0xFFFFFFFF:08x}"


def packed_digests(buffer: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> list[str]:
    """The digest of each array packed in ``buffer`` (1-D, one dtype), array ``i`` being
    ``buffer[starts[i]:starts[i] + sizes[i]]``, in one vectorised pass."""
    if len(starts) == 0:
        return []
    words = host_words(buffer)
    per = words_per_item(buffer.dtype)
    starts, sizes = np.asarray(starts, np.int64) * per, np.asarray(sizes, np.int64) * per
    owner = np.repeat(np.arange(len(starts)), sizes)
    index = (np.arange(len(words), dtype=np.int64) - starts[owner]).astype(np.uint32)
    sums = []
    for term in _terms(words, index):
        # Sums of at most 2**32 uint32 terms fit in uint64: exact, then reduced modulo 2**32.
        total = np.concatenate([[0], np.cumsum(term, dtype=np.uint64)])
        sums.append(total[starts + sizes] - total[starts])
    return [_hex(int(a), int(b)) for a, b in zip(*sums, strict=True)]


def host_digest(array: np.ndarray) -> str:
    """The digest of one NumPy array (the same as :func:`device_digests` gives on devices)."""
    words = host_words(np.asarray(array))
    if words.size == 0:
        return EMPTY
    a, b = _terms(words, np.arange(words.size, dtype=np.uint32))
    return _hex(int(np.sum(a, dtype=np.uint64)), int(np.sum(b, dtype=np.uint64)))


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
    a = (words ^ jnp.uint32(_K1)) * (index * jnp.uint32(2) + jnp.uint32(1))
    b = _fmix(words + index * jnp.uint32(_GOLDEN), jnp)
    return jnp.stack([jnp.sum(a, dtype=jnp.uint32), jnp.sum(b, dtype=jnp.uint32)])


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
        out.append(_hex(int(a), int(b)))
    return out
