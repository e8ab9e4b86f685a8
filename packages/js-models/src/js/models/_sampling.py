"""Choosing the next token from a row of logits: greedy, or sampled after transformers' logits
warpers (temperature, then top-k, then top-p, as ``generate`` applies them).

The warpers compute what transformers 5.23's ``TemperatureLogitsWarper``, ``TopKLogitsWarper``
and ``TopPLogitsWarper`` compute (``min_tokens_to_keep=1``): removed tokens get ``-inf``.
``Sampling`` holds the static choices (which warpers run, ``top_k``); ``temperature`` and
``top_p`` are traced values, so changing them compiles nothing.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from js._checks import check_bool, is_int


class Sampling(NamedTuple):
    """The static side of a decoding rule (part of the compiled programs' key)."""

    do_sample: bool
    temperature: bool  # whether to divide by a temperature (transformers skips 1.0)
    top_k: int | None
    top_p: bool  # whether to apply top-p (transformers skips 1.0)


def check_sampling(
    do_sample: bool, temperature: float, top_k: int | None, top_p: float | None
) -> tuple[Sampling, np.ndarray]:
    """``(Sampling, [temperature, 1 - top_p] float32)`` after checking each value.

    As in transformers, the warpers only act when sampling; ``top_k=0`` means no top-k.
    """
    owner = "js.models.generate"
    check_bool(owner, "do_sample", do_sample)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.floating)):
        raise TypeError(f"{owner}: temperature must be a float > 0, got {temperature!r}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(
            f"{owner}: temperature must be a finite float > 0, got {temperature!r}. Fix: 1.0 "
            "leaves the logits as they are; greedy decoding is do_sample=False"
        )
    if top_k is not None and not is_int(top_k):
        raise TypeError(f"{owner}: top_k must be None or an int >= 1, got {top_k!r}")
    if top_k is not None and top_k < 0:
        raise ValueError(f"{owner}: top_k must be None (or 0: off) or an int >= 1, got {top_k}")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float, np.floating)):
            raise TypeError(f"{owner}: top_p must be None or a float in (0, 1], got {top_p!r}")
        if not 0 < top_p <= 1:
            raise ValueError(
                f"{owner}: top_p must be in (0, 1], got {top_p!r}: it keeps the most likely "
                "tokens whose probabilities sum to top_p. Fix: e.g. top_p=0.9, or None for all"
            )
    rule = Sampling(
        do_sample=bool(do_sample),
        temperature=bool(do_sample) and float(temperature) != 1.0,
        top_k=int(top_k) if do_sample and top_k else None,
        top_p=bool(do_sample) and top_p is not None and float(top_p) < 1.0,
    )
    # 1 - top_p in double precision, then float32, as torch compares float32 with the scalar
    values = np.array([temperature, 0.0 if top_p is None else 1 - top_p], np.float32)
    return rule, values


def top_k_filter(logits: jax.Array, k: int) -> jax.Array:
    """``-inf`` below the ``k``-th largest logit of each row (ties with it kept)."""
    k = min(max(k, 1), logits.shape[-1])
    kth = jax.lax.top_k(logits, k)[0][..., -1:]  # [..., 1]
    return jnp.where(logits < kth, -jnp.inf, logits)


def top_p_filter(logits: jax.Array, rest: jax.Array) -> jax.Array:
    """``-inf`` for the least likely tokens whose probabilities sum to at most ``rest`` (``1 -
    top_p``); the most likely token is always kept."""
    order = jnp.argsort(logits, axis=-1)  # ascending, as transformers sorts
    ascending = jnp.take_along_axis(logits, order, axis=-1)
    cumulative = jnp.cumsum(jax.nn.softmax(ascending, axis=-1), axis=-1)
    drop_sorted = (cumulative <= rest).at[..., -1].set(False)
    rows = jnp.arange(logits.shape[0])[:, None]
    drop = jnp.zeros_like(drop_sorted).at[rows, order].set(drop_sorted)
    return jnp.where(drop, -jnp.inf, logits)


def warp(logits: jax.Array, rule: Sampling, values: jax.Array) -> jax.Array:
    """``logits [B, V]`` after the warpers ``rule`` turns on (``values``: temperature and
    ``1 - top_p``)."""
    if rule.temperature:
        # XLA rewrites x / broadcast(t) as x * (1 / t), one rounding more than torch's x / t:
        # the barrier keeps the division (the same float32 quotients as transformers)
        logits = logits / jax.lax.optimization_barrier(jnp.broadcast_to(values[0], logits.shape))
    if rule.top_k is not None:
        logits = top_k_filter(logits, rule.top_k)
    if rule.top_p:
        logits = top_p_filter(logits, values[1])
    return logits


def choose(logits: jax.Array, rule: Sampling, values: jax.Array, key: jax.Array) -> jax.Array:
    """The next token of each row, ``[B]`` int32: the first largest logit (greedy), or a draw
    from ``softmax(warp(logits))`` with ``key``."""
    logits = logits.astype(jnp.float32)
    if not rule.do_sample:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return jax.random.categorical(key, warp(logits, rule, values), axis=-1).astype(jnp.int32)
