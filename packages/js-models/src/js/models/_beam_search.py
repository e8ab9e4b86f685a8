"""Beam search: transformers' ``_beam_search`` (without sampling) as one compiled program, the
prompt then a ``lax.while_loop``: ``num_beams`` rows per prompt, the cache's rows reordered to
follow the beams each step, the finished hypotheses ranked by their summed log-probabilities over
their new-token count to the ``length_penalty``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import js

from ._generation_request import (
    TRACES,
    _Arrays,
    _give_back,
    _Request,
    _take_cache,
    bucket,
)
from ._sampling import processed


def _divide(x: jax.Array, d: jax.Array) -> jax.Array:
    """``x / d`` rounded once, as torch divides (XLA would multiply by ``1 / d``)."""
    return x / jax.lax.optimization_barrier(jnp.broadcast_to(d, x.shape))


@functools.partial(js.jit, static_argnames=("processing", "beams", "early_stopping", "slots"))
def _beam_search(
    model, cache, arrays: _Arrays, new, fill, *, processing, beams, early_stopping, slots
):
    """transformers' ``_beam_search`` (without sampling) over ``ids [B * beams, W]`` (each
    prompt repeated ``beams`` times): ``(sequences [B, beams, slots], scores [B, beams],
    lengths [B, beams])``, the finished hypotheses best first and their new-token counts."""
    TRACES["beam"] += 1
    ids, mask, eos = arrays.ids, arrays.mask, arrays.eos
    BN, N, S = ids.shape[0], beams, slots
    B = BN // N
    K = max(2, 1 + eos.shape[0]) * N  # candidates kept: enough to continue N beams past ends
    f32, huge = jnp.float32, jnp.float32(-1.0e9)
    penalty = arrays.values[3]
    never_longer = (early_stopping == "never") & (penalty > 0)
    cache.reset()
    logits = model(ids, attention_mask=mask, cache=cache, logits_to_keep=1)[:, -1]
    graphdef, state = js.split(cache)
    take = functools.partial(jnp.take_along_axis, axis=1)

    def unfinished(carry):
        return carry[0]

    def turn(carry):
        _, t, logits, running, run_scores, done, scores, finished, lengths, open_, state = carry
        log_probs = jax.nn.log_softmax(logits.astype(f32), axis=-1)
        log_probs = processed(log_probs, processing, arrays, running.reshape(BN, S), t)
        V = log_probs.shape[-1]
        total = (log_probs.reshape(B, N, V) + run_scores[:, :, None]).reshape(B, N * V)
        top_scores, top = jax.lax.top_k(total, K)
        parent, token = top // V, (top % V).astype(jnp.int32)
        candidates = take(running, parent[:, :, None])
        candidates = jax.lax.dynamic_update_slice_in_dim(candidates, token[:, :, None], t, axis=2)
        ends = jnp.isin(token, eos) | (t + 1 >= new)  # an end token, or the last new token
        # the best N candidates that go on
        live = top_scores + ends.astype(f32) * huge
        keep = jax.lax.top_k(live, N)[1]
        running, run_scores, parent = (
            take(candidates, keep[:, :, None]),
            take(live, keep),
            take(parent, keep),
        )
        # the ended candidates among the best N join the finished ones if they score higher
        ended = ends & (jnp.arange(K) < N)
        scored = _divide(top_scores, (t + 1).astype(f32) ** penalty)
        if early_stopping is True:
            scored = scored + jnp.all(finished, axis=-1, keepdims=True).astype(f32) * huge
        scored = scored + (~open_).astype(f32) * huge
        scored = scored + (~ended).astype(f32) * huge
        merged = jnp.concatenate([scores, scored], axis=1)
        best = jax.lax.top_k(merged, N)[1]
        done = take(jnp.concatenate([done, candidates], axis=1), best[:, :, None])
        finished = take(jnp.concatenate([finished, ended], axis=1), best)
        lengths = take(jnp.concatenate([lengths, jnp.full(ended.shape, t + 1)], axis=1), best)
        scores = take(merged, best)
        # each row of the cache follows its beam; then the next tokens run
        step_cache = js.merge(graphdef, state)
        step_cache.reorder((jnp.arange(B)[:, None] * N + parent).reshape(BN))
        # can a running beam still beat the worst finished one?
        hoped = jnp.where(never_longer, new, t + 1).astype(f32) ** penalty
        best_running = _divide(run_scores[:, :1], hoped)
        worst = jnp.where(finished, jnp.min(scores, axis=1, keepdims=True), huge)
        open_ = open_ & jnp.any(best_running > worst, axis=-1, keepdims=True)
        go = jnp.any(open_) & ~jnp.all(ends) & (t + 1 < new)
        if early_stopping is True:
            go = go & ~jnp.all(finished)
        last = running[:, :, t].reshape(BN, 1)
        logits = model(last, cache=step_cache, logits_to_keep=1)[:, -1]
        state = js.split(step_cache)[1]
        return go, t + 1, logits, running, run_scores, done, scores, finished, lengths, open_, state

    running = jnp.full((B, N, S), fill, jnp.int32)
    run_scores = jnp.zeros((B, N), f32).at[:, 1:].set(huge)  # the first step reads beam 0 only
    carry = (
        jnp.bool_(True),
        jnp.int32(0),
        logits,
        running,
        run_scores,
        running,
        jnp.full((B, N), huge),
        jnp.zeros((B, N), bool),
        jnp.zeros((B, N), jnp.int32),
        jnp.ones((B, 1), bool),
        state,
    )
    carry = jax.lax.while_loop(unfinished, turn, carry)
    js.update(cache, carry[-1])
    return carry[5], carry[6], carry[8]


@dataclass
class GenerateOutput:
    """``generate(..., return_dict_in_generate=True)``: the ``sequences`` and, from beam
    search, ``sequences_scores`` ``[B * num_return_sequences]`` (transformers' beam scores:
    summed log-probabilities over the new-token count to the ``length_penalty``)."""

    sequences: jax.Array
    sequences_scores: jax.Array | None = None


def _beam_search_run(model: Any, request: _Request) -> tuple[np.ndarray, jax.Array]:
    """Beam search on the host side (the model in eval mode): repeat each prompt per beam, run
    ``_beam_search``, keep the ``num_return_sequences`` best beams of each prompt, crop to the
    longest."""
    N, R = request.beams, request.returned
    B, width = request.ids.shape
    slots = bucket(request.new)
    spec = (B * N, width + slots, request.cache_dtype)
    eos = request.eos
    # transformers fills with `pad_token_id or eos_token_id[0]` (so 0 gives the end token)
    fill = (int(request.pad) or int(eos[0])) if eos.size else -1
    cache = _take_cache(model, spec)
    done, scores, lengths = _beam_search(
        model,
        cache,
        request.arrays(N),
        np.int32(request.new),
        np.int32(fill),
        processing=request.processing,
        beams=N,
        early_stopping=request.early_stopping,
        slots=slots,
    )
    _give_back(model, spec, cache)
    done, lengths = np.asarray(done)[:, :R], np.asarray(lengths)[:, :R]
    new = done.reshape(B * R, slots)[:, : int(lengths.max())]
    prompt = np.repeat(request.prompt.astype(np.int32), R, axis=0)
    return np.concatenate([prompt, new], axis=1), scores[:, :R].reshape(B * R)
