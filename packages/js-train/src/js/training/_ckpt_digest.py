"""Content digests of checkpoint arrays computed on devices, where each array lives.

The digest (two sums of per-word terms modulo 2**32; see ``js.nn.checkpoint_format``, which
computes it on the host and checks it on every load) is a sum, and integer addition modulo
2**32 is associative and commutative, so XLA computes it shard by shard: a sharded array (even
one spread over several processes, which no process can turn into NumPy) gets the same digest
as its gathered copy, on any mesh, without a transfer.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from js.nn.checkpoint_format import EMPTY, digest_terms, hex_digest
from js.nn.checkpoint_format import host_digest as host_digest
from js.nn.checkpoint_format import packed_digests as packed_digests


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
