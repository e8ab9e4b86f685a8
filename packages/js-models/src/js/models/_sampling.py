"""Choosing the next token from a row of logits: greedy, or sampled after transformers' logits
warpers (temperature, then top-k, then top-p, as ``generate`` applies them), and the logits
processors that run before them (repetition penalty, no repeated n-gram, minimum new tokens).

The warpers compute what transformers 5.23's ``TemperatureLogitsWarper``, ``TopKLogitsWarper``
and ``TopPLogitsWarper`` compute (``min_tokens_to_keep=1``): removed tokens get ``-inf``.
``Sampling`` holds the static choices (which warpers run, ``top_k``); ``temperature`` and
``top_p`` are traced values, so changing them compiles nothing. ``Processing`` holds which
processors run (and the n-gram size); the repetition penalty and the minimum count of new tokens
are traced values too.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

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
    fix = "1.0 leaves the logits as they are; greedy decoding is do_sample=False"
    check_positive("temperature", temperature, fix)
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


def check_positive(name: str, value: float, fix: str) -> None:
    """Refuse ``value`` unless it is a finite float (or int) > 0; ``fix`` says what to pass."""
    owner = "js.models.generate"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise TypeError(f"{owner}: {name} must be a float > 0, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{owner}: {name} must be a finite float > 0, got {value!r}. Fix: {fix}")


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


# A position of a processor's history before the prompt (the bucket's left padding).
NOT_GIVEN = np.iinfo(np.int32).min


class Processing(NamedTuple):
    """The static side of the logits processors (part of the compiled programs' key)."""

    repetition: bool = False  # repetition_penalty != 1.0 (transformers skips 1.0)
    ngram: int = 0  # no_repeat_ngram_size (0: off)
    min_new: bool = False  # min_new_tokens > 0 (with end tokens)
    tokens: bool = False  # forced or suppressed tokens (the request's TOKEN_RULES rows)


# The rows of a request's ``tokens`` ``[4, K]`` (ids, -1 padding): transformers'
# ForcedBOSTokenLogitsProcessor (the first new token, for a prompt of one token),
# ForcedEOSTokenLogitsProcessor (the last new token), SuppressTokensLogitsProcessor and
# SuppressTokensAtBeginLogitsProcessor (at new token ``begin``), in transformers' order.
TOKEN_RULES = (
    "forced_bos_token_id",
    "forced_eos_token_id",
    "suppress_tokens",
    "begin_suppress_tokens",
)


def check_processing(
    repetition_penalty: float,
    no_repeat_ngram_size: int,
    min_new_tokens: int,
    eos: list[int],
    tokens: np.ndarray,
) -> Processing:
    """The processors that run, after checking each value (as transformers turns them on);
    ``tokens``: the request's ``TOKEN_RULES`` rows."""
    owner = "js.models.generate"
    fix = "1.0 is no penalty; above 1 (e.g. 1.2) discourages repeated tokens"
    check_positive("repetition_penalty", repetition_penalty, fix)
    for name, value in (
        ("no_repeat_ngram_size", no_repeat_ngram_size),
        ("min_new_tokens", min_new_tokens),
    ):
        if not is_int(value) or value < 0:
            raise ValueError(f"{owner}: {name} must be an int >= 0 (0: off), got {value!r}")
    return Processing(
        repetition=float(repetition_penalty) != 1.0,
        ngram=int(no_repeat_ngram_size),
        min_new=int(min_new_tokens) > 0 and bool(eos),
        tokens=bool((tokens >= 0).any()),
    )


def token_ids(name: str, value: Any) -> list[int]:
    """``value`` (an int or ints) as a list of ints; ``name`` for the error."""
    if is_int(value):
        value = [value]
    if not isinstance(value, (list, tuple, np.ndarray)) or not all(map(is_int, value)):
        raise TypeError(
            f"js.models.generate: {name} must be an int or a list of ints, got {value!r}"
        )
    return [int(v) for v in value]


def check_token_rules(settings: dict[str, Any], P: int, vocab: Any) -> tuple[np.ndarray, int]:
    """The ``TOKEN_RULES`` of ``settings`` (ids in ``[0, vocab)`` where it is an int) as rows
    ``[4, K]`` of ids padded with -1, and the new token the begin-suppressed ones are barred at.
    As transformers: the forced first token only follows a prompt of ``P == 1`` token, and then
    the begin-suppressed tokens are barred at the second new token."""
    rows = []
    for name in TOKEN_RULES:
        ids = [] if settings[name] is None else token_ids(name, settings[name])
        if isinstance(vocab, int) and any(not 0 <= i < vocab for i in ids):
            raise ValueError(f"js.models.generate: {name} must be ids in [0, {vocab}), got {ids}")
        rows.append(ids)
    if P != 1:
        rows[0] = []
    begin = 1 if rows[0] else 0
    tokens = np.full((len(rows), max(1, *map(len, rows))), -1, np.int32)
    for row, ids in enumerate(rows):
        tokens[row, : len(ids)] = ids
    return tokens, begin


def _apply_token_rules(logits, tokens, new, last, begin):
    """The ``TOKEN_RULES`` at new token ``new``: the forced first (``new == 0``) or last
    (``new == last``) tokens get 0 and every other token ``-inf``; the suppressed ones
    ``-inf``, and the begin-suppressed ones at ``new == begin``."""
    V = logits.shape[-1]
    rows = (jnp.arange(V)[None, None, :] == tokens[:, :, None]).any(axis=1)  # [4, V]
    for row, at in ((0, new == 0), (1, new == last)):
        forced = jnp.where(rows[row], 0.0, -jnp.inf)
        logits = jnp.where(rows[row].any() & at, forced, logits)
    return jnp.where(rows[2] | (rows[3] & (new == begin)), -jnp.inf, logits)


def _penalise_repeats(logits, history, counted, penalty):
    """transformers' ``RepetitionPenaltyLogitsProcessor``: every token of ``history`` where
    ``counted`` has its logit divided by ``penalty`` (multiplied where negative)."""
    B, V = logits.shape
    ids = jnp.where(counted & (history >= 0) & (history < V), history, V)
    seen = jnp.zeros((B, V + 1), bool).at[jnp.arange(B)[:, None], ids].set(True)[:, :V]
    # the barrier keeps torch's division (XLA would multiply by 1 / penalty)
    divisor = jax.lax.optimization_barrier(jnp.broadcast_to(penalty, logits.shape))
    return jnp.where(seen, jnp.where(logits < 0, logits * penalty, logits / divisor), logits)


def _ban_repeated_ngrams(logits, history, length, n):
    """transformers' ``NoRepeatNGramLogitsProcessor``: ``-inf`` for each token that would
    complete an ``n``-gram already in ``history[:, :length]`` (``NOT_GIVEN`` positions aside)."""
    B, V = logits.shape
    H = history.shape[1]
    if H < n:
        return logits
    first = jnp.arange(H - n + 1)  # where each candidate n-gram starts
    match = (history[:, : H - n + 1] != NOT_GIVEN) & (first + n <= length)
    for k in range(n - 1):  # its first n - 1 tokens equal the last n - 1 tokens
        last = jax.lax.dynamic_slice_in_dim(history, length - n + 1 + k, 1, axis=1)
        match = match & (history[:, k : k + H - n + 1] == last)
    banned = history[:, n - 1 :]
    ids = jnp.where(match & (banned >= 0) & (banned < V), banned, V)
    ban = jnp.zeros((B, V + 1), bool).at[jnp.arange(B)[:, None], ids].set(True)[:, :V]
    return jnp.where(ban, -jnp.inf, logits)


def process(
    logits: jax.Array,
    rule: Processing,
    values: jax.Array,
    history: jax.Array,
    counted: jax.Array,
    length: jax.Array,
    new: jax.Array,
    eos: jax.Array,
    tokens: jax.Array,
) -> jax.Array:
    """``logits [B, V]`` after the processors ``rule`` turns on, in transformers' order.

    ``history [B, H]``: the tokens so far (up to ``length``: ``NOT_GIVEN``, then the prompt as
    given with its padding, then ``new`` generated tokens); ``counted [B, H]``: those the
    repetition penalty reads (not the padding); ``values``: ``[temperature, 1 - top_p,
    repetition_penalty, length_penalty, min_new_tokens, max_new_tokens, begin]``;
    ``tokens``: the ``TOKEN_RULES`` rows ``[4, K]``.
    """
    if rule.repetition:
        live = counted & (jnp.arange(history.shape[1]) < length)
        logits = _penalise_repeats(logits, history, live, values[2])
    if rule.ngram:
        logits = _ban_repeated_ngrams(logits, history, length, rule.ngram)
    if rule.min_new:
        ends = jnp.isin(jnp.arange(logits.shape[-1]), eos)
        logits = jnp.where(ends & (new < values[4]), -jnp.inf, logits)
    if rule.tokens:
        logits = _apply_token_rules(logits, tokens, new, values[5] - 1, values[6])
    return logits


def processed(logits: jax.Array, processing: Processing, arrays, out, count) -> jax.Array:
    """``logits [B, V]`` (float32) after the processors, each row's tokens so far being
    ``arrays.given`` (the bucketed prompt as given) then ``out[:, :count]`` (``arrays``: a
    request's ``_Arrays``, whose ``mask``, ``values``, ``eos`` and ``tokens`` the processors
    read)."""
    logits = logits.astype(jnp.float32)
    if processing == Processing():
        return logits
    history = jnp.concatenate([arrays.given, out], axis=1)
    counted = jnp.concatenate([arrays.mask != 0, jnp.ones(out.shape, bool)], axis=1)
    length = arrays.given.shape[1] + count
    return process(
        logits,
        processing,
        arrays.values,
        history,
        counted,
        length,
        count,
        arrays.eos,
        arrays.tokens,
    )
