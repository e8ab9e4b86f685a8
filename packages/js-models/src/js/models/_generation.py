"""Generation: ``generate`` and ``stream`` with a key-value cache and compiled decode loops.

Two compiled programs serve a call. The *prefill* runs the model once over the whole prompt,
filling a ``js.nn.KVCache``, and chooses the first new token. The *decode* program is one
``lax.while_loop``: each turn feeds the last token through the model (one position, reading and
extending the cache), chooses the next, and stops when every row has produced an end token or
the limit is reached. ``stream`` runs the same decode program once per chunk.

Shapes are bucketed, so that a server does not compile for every prompt: the prompt is
left-padded (with ``attention_mask`` 0) to the next bucket, and the new-token buffer is the
bucket of ``max_new_tokens`` (the loop stops at the exact count, a traced value). Buckets are
16, 32, 64, 128, 256, 512, then multiples of 512. The programs are keyed on the model's
structure, the batch size, the two buckets, the cache dtype and the static decoding choices
(``do_sample``, ``top_k``, whether a temperature and a top-p apply); the values of
``temperature``, ``top_p``, ``eos_token_id``, ``pad_token_id`` and the seed are arguments.

Outputs follow transformers' ``generate``: the prompt then the new tokens; rows that finish
early are filled with ``pad_token_id``; the result is as long as the longest row needed.

The options a call leaves out come from the model's ``generation_config`` (the folder's
``generation_config.json``), then the model config (its token ids), then transformers'
defaults. Before choosing, the logits pass transformers' processors (repetition penalty, no
repeated n-gram, minimum new tokens), their values traced. With ``num_beams > 1`` one compiled
program (the prompt, then a ``lax.while_loop``) runs transformers' beam search: ``num_beams``
rows per prompt, the cache's rows reordered to follow the beams each step.
"""

from __future__ import annotations

import collections
import functools
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

import js
from js._checks import is_int

from ._sampling import (
    NOT_GIVEN,
    Processing,
    Sampling,
    check_processing,
    check_sampling,
    choose,
    process,
)

OWNER = "js.models.generate"

# Programs traced, by name ("prefill", "decode", "beam"): a trace is a compilation (tests count
# them).
TRACES: collections.Counter[str] = collections.Counter()


def bucket(n: int) -> int:
    """The length a prompt of ``n`` tokens (or ``n`` new tokens) is padded to: 16, 32, 64, 128,
    256, 512, then the next multiple of 512.

    Example:
        >>> from js.models._generation import bucket
        >>> [bucket(n) for n in (1, 16, 17, 100, 600)]
        [16, 16, 32, 128, 1024]
    """
    if n <= 16:
        return 16
    if n <= 512:
        return 1 << (n - 1).bit_length()
    return -(-n // 512) * 512


@runtime_checkable
class CausalLM(Protocol):
    """The generation contract: what ``generate`` and ``stream`` call on a model. Every causal
    language model of js.models meets it (the decoder skeleton's ``DecoderForCausalLM``), and a
    model of your own that does generates too.

    - ``make_cache(batch_size, max_length, *, dtype=None)``: a ``js.nn.KVCache`` with a layer
      per attention layer (its key/value heads and head size), in ``dtype`` (None: the
      model's).
    - ``model(input_ids, attention_mask=None, *, cache=None, logits_to_keep=0)``: logits
      ``[B, L, vocab]`` (the last ``logits_to_keep`` positions when it is > 0), storing the
      tokens' keys and values in ``cache`` (``cache.begin`` once, ``cache.update`` per layer,
      ``cache.mask`` to attend: the ``js.nn.KVCache`` protocol).
    - optionally ``config.vocab_size`` / ``eos_token_id`` / ``pad_token_id`` and
      ``max_positions()`` (learned positions), which ``generate`` checks and reads.
    """

    def make_cache(self, batch_size: int, max_length: int, *, dtype: Any = None) -> Any: ...

    def __call__(
        self,
        input_ids: Any = None,
        attention_mask: Any = None,
        *,
        cache: Any = None,
        logits_to_keep: int = 0,
    ) -> jax.Array: ...


class GenerationMixin:
    """``model.generate(...)`` and ``model.stream(...)``: ``js.models.generate`` and
    ``js.models.stream`` on this model, which meets the ``CausalLM`` protocol."""

    def generate(self, input_ids: Any, **options: Any) -> jax.Array:
        """``js.models.generate(self, input_ids, **options)``."""
        return generate(self, input_ids, **options)

    def stream(self, input_ids: Any, **options: Any) -> Iterator[np.ndarray]:
        """``js.models.stream(self, input_ids, **options)``."""
        return stream(self, input_ids, **options)

    @property
    def generation_config(self) -> dict[str, Any]:
        """``generate``'s defaults below its arguments: the folder's ``generation_config.json``
        (``{}`` without one), written back by ``save_pretrained``. Edit it or assign a dict."""
        return generation_config(self)

    @generation_config.setter
    def generation_config(self, value: dict[str, Any]) -> None:
        set_generation_config(self, value)


# Each model's generation config (beside the model: a dict attribute would be module state).
_GENERATION_CONFIGS: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()

# generate's options a generation config sets, with transformers' GenerationConfig defaults
# (but top_k: no limit, where transformers takes 50 when sampling).
DEFAULTS: dict[str, Any] = {
    "max_new_tokens": None,
    "max_length": 20,
    "do_sample": False,
    "temperature": 1.0,
    "top_k": None,
    "top_p": None,
    "eos_token_id": None,
    "pad_token_id": None,
    "bos_token_id": None,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_new_tokens": 0,
    "num_beams": 1,
    "length_penalty": 1.0,
    "early_stopping": False,
    "num_return_sequences": 1,
}


def generation_config(model: Any) -> dict[str, Any]:
    """``model``'s generation config, a dict (empty when it has none), kept beside the model."""
    with _CACHES_LOCK:
        return _GENERATION_CONFIGS.setdefault(model, {})


def set_generation_config(model: Any, config: dict[str, Any]) -> None:
    """Give ``model`` a generation config (a ``generation_config.json``'s dict)."""
    if not isinstance(config, dict):
        raise TypeError(f"generation_config must be a dict, got {type(config).__name__}")
    with _CACHES_LOCK:
        _GENERATION_CONFIGS[model] = dict(config)


def _settings(model: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Each option: the argument, else the generation config's, else (token ids) the model
    config's, else the default; ``max_new_tokens`` from ``max_length`` where only it is set."""
    folder = _GENERATION_CONFIGS.get(model) or {}
    config = getattr(model, "config", None)
    settings = {}
    for name, default in DEFAULTS.items():
        value = options.get(name)
        if value is None:
            value = folder.get(name)
        if value is None and name.endswith("_token_id"):
            value = getattr(config, name, None)
        settings[name] = default if value is None else value
    if options.get("max_new_tokens") is None and options.get("max_length") is not None:
        settings["max_new_tokens"] = None  # an explicit max_length beats the folder's count
    return settings


def _new_tokens(settings: dict[str, Any], P: int) -> Any:
    """``max_new_tokens``, else ``max_length`` less the prompt (as transformers counts)."""
    if settings["max_new_tokens"] is not None:
        return settings["max_new_tokens"]
    length = settings["max_length"]
    if not is_int(length):
        raise TypeError(f"{OWNER}: max_length must be an int, got {length!r}")
    if length - P < 1:
        raise ValueError(
            f"{OWNER}: max_length={length} leaves no room after the prompt of {P} tokens "
            "(max_length counts the prompt). Fix: pass max_new_tokens"
        )
    return length - P


@dataclass
class _Request:
    """One call's inputs, checked and bucketed on the host."""

    prompt: np.ndarray  # [B, P] as given
    ids: np.ndarray  # [B, P_bucket] int32, left-padded
    mask: np.ndarray  # [B, P_bucket] int32
    new: int  # max_new_tokens
    rule: Sampling
    processing: Processing
    # [temperature, 1 - top_p, repetition_penalty, length_penalty, min_new_tokens] float32
    values: np.ndarray
    eos: np.ndarray  # [E] int32 (E may be 0)
    pad: np.int32
    key: jax.Array
    cache_dtype: Any  # None: the model's
    given: np.ndarray  # [B, P_bucket] int32: the prompt as given, after NOT_GIVEN
    beams: int  # num_beams
    early_stopping: bool | str
    returned: int  # num_return_sequences

    def rules(self) -> dict[str, Any]:
        """The static choices of the greedy and sampling programs."""
        return {"rule": self.rule, "processing": self.processing}

    def arrays(self, copies: int = 1) -> _Arrays:
        """The arrays the programs read, each prompt's rows repeated ``copies`` times."""
        rows = functools.partial(np.repeat, repeats=copies, axis=0)
        return _Arrays(
            rows(self.ids),
            rows(self.mask),
            rows(self.given),
            jnp.asarray(self.values),
            jnp.asarray(self.eos),
            self.pad,
            self.key,
        )


class _Arrays(NamedTuple):
    """A request's arrays for the compiled programs (traced: other values compile nothing)."""

    ids: Any  # [B, W]
    mask: Any  # [B, W]
    given: Any  # [B, W]
    values: Any  # [5]
    eos: Any  # [E]
    pad: Any  # scalar
    key: Any


def _prompt(input_ids: Any, attention_mask: Any) -> tuple[np.ndarray, np.ndarray]:
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or not (ids.dtype.kind in "iu" or ids.size == 0):
        raise ValueError(
            f"{OWNER}: input_ids must be integer token ids [B, L], got shape {list(ids.shape)} "
            f"and dtype {ids.dtype}. Fix: a batch of one prompt is ids[None]"
        )
    if ids.shape[1] == 0 or ids.shape[0] == 0:
        raise ValueError(
            f"{OWNER}: the prompt is empty (input_ids shape {list(ids.shape)}); generation "
            "continues a prompt of at least one token per row. Fix: start each row with the "
            "model's BOS token (config.bos_token_id)"
        )
    if attention_mask is None:
        return ids, np.ones(ids.shape, np.int32)
    mask = np.asarray(attention_mask)
    if mask.shape != ids.shape:
        raise ValueError(
            f"{OWNER}: attention_mask must have input_ids' shape {list(ids.shape)}, got "
            f"{list(mask.shape)}"
        )
    real = mask != 0
    if not real.any(axis=1).all():
        row = int(np.flatnonzero(~real.any(axis=1))[0])
        raise ValueError(f"{OWNER}: row {row} of attention_mask has no real token (all 0)")
    late = real[:, :-1] & ~real[:, 1:]  # a real token followed by padding: right padding
    if late.any():
        row = int(np.flatnonzero(late.any(axis=1))[0])
        raise ValueError(
            f"{OWNER}: row {row} of attention_mask has padding after a real token; generation "
            "needs left padding (new tokens follow each row's last real token). Fix: pad on "
            "the left (a Hugging Face tokenizer: padding_side='left')"
        )
    return ids, real.astype(np.int32)


def _token_ids(name: str, value: Any) -> list[int]:
    if is_int(value):
        value = [value]
    if not isinstance(value, (list, tuple, np.ndarray)) or not all(map(is_int, value)):
        raise TypeError(f"{OWNER}: {name} must be an int or a list of ints, got {value!r}")
    return [int(v) for v in value]


_CALL_DEFAULTS = {"attention_mask": None, "rngs": None, "cache_dtype": None}


def _request(
    model: Any,
    input_ids: Any,
    *,
    attention_mask: Any,
    rngs: js.Rngs | None,
    cache_dtype: Any,
    **options: Any,
) -> _Request:
    unknown = [name for name in options if name not in DEFAULTS]
    if unknown:
        raise TypeError(f"{OWNER}: got an unexpected keyword argument {unknown[0]!r}")
    if not isinstance(model, CausalLM):
        missing = [m for m in ("make_cache", "__call__") if not callable(getattr(model, m, None))]
        raise TypeError(
            f"{OWNER}: {type(model).__name__} has no {missing[0]}(); generation needs a causal "
            "language model (js.models.CausalLM) with make_cache(batch_size, max_length, *, "
            "dtype) and a forward taking (input_ids, attention_mask=, cache=, "
            "logits_to_keep=), such as js.models' GPT2LMHeadModel or LlamaForCausalLM"
        )
    prompt, real = _prompt(input_ids, attention_mask)
    B, P = prompt.shape
    settings = _settings(model, options)
    max_new_tokens = _new_tokens(settings, P)
    if not is_int(max_new_tokens):
        raise TypeError(f"{OWNER}: max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise ValueError(
            f"{OWNER}: max_new_tokens must be >= 1, got {max_new_tokens}: generation adds at "
            "least one token. Fix: max_new_tokens=1 or more (the prompt alone is input_ids)"
        )
    # The model reads token 0 at padded positions (masked out as keys): whatever the caller's
    # padding holds, and whatever pad_token_id is, every id the model embeds is a real one.
    tokens = np.where(real == 1, prompt, 0)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(vocab, int) and (tokens.min() < 0 or tokens.max() >= vocab):
        raise ValueError(
            f"{OWNER}: input_ids holds ids outside the vocabulary [0, {vocab}) (from "
            f"{int(tokens.min())} to {int(tokens.max())}). Fix: encode with the model's tokenizer"
        )
    positions: Callable[[], int] | None = getattr(model, "max_positions", None)
    limit = positions() if callable(positions) else None
    if limit is not None and P + max_new_tokens > limit:
        need = P + max_new_tokens
        raise ValueError(
            f"{OWNER}: a prompt of {P} tokens and {max_new_tokens} new tokens need {need} "
            f"positions; {type(model).__name__} has {limit} (max_positions()). Fix: shorten the "
            f"prompt to at most {limit - max_new_tokens} tokens or ask for fewer new tokens"
        )
    do_sample = settings["do_sample"]
    rule, values = check_sampling(
        do_sample, settings["temperature"], settings["top_k"], settings["top_p"]
    )
    eos_token_id = settings["eos_token_id"]
    eos = [] if eos_token_id is None else _token_ids("eos_token_id", eos_token_id)
    pad_token_id = settings["pad_token_id"]
    if pad_token_id is None:
        pad_token_id = eos[0] if eos else 0
    pad = _token_ids("pad_token_id", pad_token_id)
    if len(pad) != 1:
        raise TypeError(f"{OWNER}: pad_token_id must be one int, got {pad_token_id!r}")
    processing = check_processing(
        settings["repetition_penalty"],
        settings["no_repeat_ngram_size"],
        settings["min_new_tokens"],
        eos,
    )
    beams, returned, early_stopping = _check_beams(settings, rule.do_sample)
    more = [settings["repetition_penalty"], settings["length_penalty"], settings["min_new_tokens"]]
    values = np.concatenate([values, np.array(more, np.float32)])
    key = _sampling_key(rngs, rule.do_sample)
    if rule.do_sample and returned > 1:  # each copy of a prompt draws its own tokens
        prompt, tokens, real = (np.repeat(a, returned, axis=0) for a in (prompt, tokens, real))
        B = B * returned
    width = bucket(P)
    ids, mask = np.zeros((B, width), np.int32), np.zeros((B, width), np.int32)
    given = np.full((B, width), NOT_GIVEN, np.int32)
    ids[:, width - P :], mask[:, width - P :] = tokens, real
    given[:, width - P :] = np.clip(prompt, -1, np.iinfo(np.int32).max)
    return _Request(
        prompt=prompt,
        ids=ids,
        mask=mask,
        new=int(max_new_tokens),
        rule=rule,
        processing=processing,
        values=values,
        eos=np.array(eos, np.int32),
        pad=np.int32(pad[0]),
        key=key,
        cache_dtype=None if cache_dtype is None else jnp.dtype(cache_dtype),
        given=given,
        beams=beams,
        early_stopping=early_stopping,
        returned=returned,
    )


def _check_beams(settings: dict[str, Any], do_sample: bool) -> tuple[int, int, bool | str]:
    """``(num_beams, num_return_sequences, early_stopping)``, checked."""
    beams, returned = settings["num_beams"], settings["num_return_sequences"]
    early_stopping, length_penalty = settings["early_stopping"], settings["length_penalty"]
    for name, value in (("num_beams", beams), ("num_return_sequences", returned)):
        if not is_int(value) or value < 1:
            raise ValueError(f"{OWNER}: {name} must be an int >= 1, got {value!r}")
    if early_stopping not in (True, False, "never"):
        raise ValueError(
            f"{OWNER}: early_stopping must be True, False or 'never', got {early_stopping!r}"
        )
    if isinstance(length_penalty, bool) or not isinstance(
        length_penalty, (int, float, np.floating)
    ):
        raise TypeError(f"{OWNER}: length_penalty must be a float, got {length_penalty!r}")
    if beams > 1 and do_sample:
        raise NotImplementedError(
            f"{OWNER}: beam sampling (num_beams > 1 with do_sample=True) is not supported. "
            "Fix: do_sample=False for beam search, or num_beams=1 to sample"
        )
    if returned > max(beams, 1) and not do_sample:
        raise ValueError(
            f"{OWNER}: num_return_sequences={returned} needs num_beams >= {returned} (beam "
            f"search returns its best beams; greedy search has one). Fix: num_beams={returned}, "
            "or do_sample=True to draw several continuations"
        )
    return int(beams), int(returned), early_stopping


def _sampling_key(rngs: js.Rngs | None, do_sample: bool) -> jax.Array:
    if not do_sample:
        return jax.random.key(0)  # unused: greedy decoding draws nothing
    if not isinstance(rngs, js.Rngs):
        raise TypeError(
            f"{OWNER}: do_sample=True draws from rngs, got rngs={rngs!r}. Fix: pass "
            "rngs=js.Rngs(sample=0) (the same seed gives the same tokens)"
        )
    streams = rngs.streams()
    stream = "sample" if "sample" in streams else "default" if "default" in streams else None
    if stream is None:
        raise ValueError(
            f"{OWNER}: rngs has no 'sample' or 'default' stream (its streams: {streams}). "
            "Fix: rngs=js.Rngs(sample=0)"
        )
    return rngs.next(stream)


# ---------------------------------------------------------------------------------------------
# The compiled programs


def _processed(logits, processing: Processing, arrays: _Arrays, out, count):
    """``logits [B, V]`` (float32) after the processors, each row's tokens so far being
    ``arrays.given`` (the bucketed prompt as given) then ``out[:, :count]``."""
    logits = logits.astype(jnp.float32)
    if processing == Processing():
        return logits
    history = jnp.concatenate([arrays.given, out], axis=1)
    counted = jnp.concatenate([arrays.mask != 0, jnp.ones(out.shape, bool)], axis=1)
    length = arrays.given.shape[1] + count
    return process(logits, processing, arrays.values, history, counted, length, count, arrays.eos)


@functools.partial(js.jit, static_argnames=("rule", "processing", "slots"))
def _prefill(model, cache, arrays: _Arrays, *, rule: Sampling, processing, slots: int):
    """Run the prompt, filling ``cache``: ``(out, finished)``, ``out [B, slots]`` holding the
    first new token."""
    TRACES["prefill"] += 1
    cache.reset()
    ids, mask = arrays.ids, arrays.mask
    logits = model(ids, attention_mask=mask, cache=cache, logits_to_keep=1)[:, -1]  # [B, V]
    out = jnp.zeros((ids.shape[0], slots), jnp.int32)
    logits = _processed(logits, processing, arrays, out, 0)
    token = choose(logits, rule, arrays.values, jax.random.fold_in(arrays.key, 0))
    return out.at[:, 0].set(token), jnp.isin(token, arrays.eos)


@functools.partial(js.jit, static_argnames=("rule", "processing"))
def _decode(model, cache, out, count, limit, finished, arrays: _Arrays, *, rule, processing):
    """Choose tokens ``count .. limit - 1`` of ``out`` (one model call each, reading and
    extending ``cache``), stopping early once every row is finished; ``(out, count, finished)``.
    """
    TRACES["decode"] += 1
    graphdef, state = js.split(cache)

    def unfinished(carry):
        _, i, finished, _ = carry
        return (i < limit) & ~jnp.all(finished)

    def turn(carry):
        out, i, finished, state = carry
        step_cache = js.merge(graphdef, state)
        last = jax.lax.dynamic_slice_in_dim(out, i - 1, 1, axis=1)  # [B, 1]
        logits = model(last, cache=step_cache, logits_to_keep=1)[:, -1]  # [B, V]
        logits = _processed(logits, processing, arrays, out, i)
        token = choose(logits, rule, arrays.values, jax.random.fold_in(arrays.key, i))
        token = jnp.where(finished, arrays.pad, token)  # a finished row only pads
        out = jax.lax.dynamic_update_slice_in_dim(out, token[:, None], i, axis=1)
        return out, i + 1, finished | jnp.isin(token, arrays.eos), js.split(step_cache)[1]

    out, count, finished, state = jax.lax.while_loop(
        unfinished, turn, (out, count, finished, state)
    )
    js.update(cache, state)
    return out, count, finished


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
        log_probs = _processed(log_probs, processing, arrays, running.reshape(BN, S), t)
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


# ---------------------------------------------------------------------------------------------
# Caches kept between calls (per model, the last shape used), so that a repeated call reuses the
# cache's arrays and the programs' bindings. A call takes the cache out while it runs and puts it
# back after, so that calls in two threads never share one (the second makes its own).

_CACHES: weakref.WeakKeyDictionary[Any, tuple[tuple, js.nn.KVCache]] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def _take_cache(model: Any, spec: tuple) -> js.nn.KVCache:
    with _CACHES_LOCK:
        kept = _CACHES.pop(model, None)  # a cache of another shape is freed here
    if kept is not None and kept[0] == spec:
        return kept[1]
    batch, slots, dtype = spec
    return model.make_cache(batch, slots, dtype=dtype)


def _give_back(model: Any, spec: tuple, cache: js.nn.KVCache) -> None:
    with _CACHES_LOCK:
        _CACHES[model] = (spec, cache)


class _Run:
    """One generation: the prefill on construction, then ``advance(limit)`` turns of decode."""

    def __init__(self, model: Any, request: _Request):
        self.model, self.request = model, request
        B, width = request.ids.shape
        self.slots = bucket(request.new)
        self.spec = (B, width + self.slots, request.cache_dtype)
        self.cache = _take_cache(model, self.spec)
        self.arrays, self.rules = request.arrays(), request.rules()
        self.out, self.finished = _prefill(
            model, self.cache, self.arrays, slots=self.slots, **self.rules
        )
        self.count = 1  # tokens in self.out
        # Rows that all ended at their first token end the decode loop at once: no device read
        # here to find out.
        self.done = request.new == 1

    def advance(self, limit: int) -> None:
        """Decode until ``limit`` tokens are out (or every row is finished)."""
        request = self.request
        target = min(limit, request.new)
        self.out, count, self.finished = _decode(
            self.model,
            self.cache,
            self.out,
            np.int32(self.count),
            np.int32(target),
            self.finished,
            self.arrays,
            **self.rules,
        )
        self.count = int(count)  # short of the target only when every row has ended
        self.done = self.count < target or self.count >= request.new

    def close(self) -> None:
        """Keep the cache for the model's next call."""
        _give_back(self.model, self.spec, self.cache)

    def tokens(self, start: int = 0) -> np.ndarray:
        """New tokens ``start .. count - 1`` of every row, ``[B, count - start]`` int32."""
        return np.asarray(self.out[:, start : self.count])


class _eval_mode:
    """The model in eval mode for the call (dropout off), its mode restored after."""

    def __init__(self, model: Any):
        self.model, self.training = model, bool(getattr(model, "training", False))

    def __enter__(self) -> None:
        if self.training:
            self.model.eval()

    def __exit__(self, *exc: Any) -> None:
        if self.training:
            self.model.train()


def generate(
    model: Any,
    input_ids: Any,
    *,
    attention_mask: Any = None,
    stop_strings: str | Sequence[str] | None = None,
    tokenizer: Any = None,
    return_dict_in_generate: bool = False,
    rngs: js.Rngs | None = None,
    cache_dtype: Any = None,
    **options: Any,
) -> Any:
    """Continue each prompt by up to ``max_new_tokens`` tokens: ``[B, L + n]`` int32 token ids,
    the prompt then the new tokens, as transformers' ``generate`` returns them.

    The ``options`` are the keys of ``DEFAULTS`` (those of transformers' ``GenerationConfig``
    below). One left out (or None) takes the model's ``generation_config`` value (the folder's
    ``generation_config.json``), else (token ids) the model config's, else the default, as
    transformers' ``generate`` does.

    Args:
        model: a causal language model of js.models (``GPT2LMHeadModel``,
            ``LlamaForCausalLM``, Qwen2, Mistral), or any model with ``make_cache`` and a
            forward taking ``(input_ids, attention_mask=, cache=, logits_to_keep=)``.
        input_ids: ``[B, L]`` token ids; rows of different lengths are left-padded.
        attention_mask: ``[B, L]``, 1 for real tokens and 0 for the left padding (None: all
            real). Right padding is refused.
        max_new_tokens: how many tokens to add at most (>= 1).
        max_length: the prompt's length plus the new tokens, where ``max_new_tokens`` is not
            given (default 20, as transformers').
        do_sample: False (default): greedy, the most likely token; True: draw from the
            distribution after ``temperature``, ``top_k`` and ``top_p``.
        temperature: divides the logits before sampling (> 0; default 1.0).
        top_k: sample among the ``k`` most likely tokens only (0: all). Note that
            transformers' generation config defaults to 50; here the default is no limit.
        top_p: sample among the most likely tokens whose probabilities reach ``top_p``, in
            (0, 1] (None or 1.0: all).
        eos_token_id: an int or a list of ints that end a row; None: the model config's
            ``eos_token_id`` (as transformers does); ``[]``: never stop early.
        pad_token_id: written after a row's end (None: the config's ``pad_token_id``, else the
            first end token).
        bos_token_id: accepted for transformers' configs (a prompt already holds its start).
        repetition_penalty: divides the logits of every token of the prompt (not its padding)
            and of the new tokens (multiplies negative ones); 1.0 (default): off.
        no_repeat_ngram_size: ``n > 0``: no ``n``-gram occurs twice in a row's tokens (prompt
            included, as transformers counts); 0 (default): off.
        min_new_tokens: the end tokens are barred until this many tokens are new (default 0).
        num_beams: ``> 1``: beam search (greedy, not sampled) with this many beams per prompt.
        length_penalty: beam search ranks a finished beam by its score over its new-token
            count to this power (default 1.0; above 0 favours longer sequences).
        early_stopping: beam search stops a prompt once ``num_beams`` beams are finished
            (True), once the heuristic finds no running beam can win (False, the default), or
            ``"never"`` before none can (transformers' canonical test).
        num_return_sequences: beams returned per prompt (``<= num_beams``; best first, rows
            ``b * n + i``), or samples per prompt with ``do_sample``.
        stop_strings: a string or strings that end a row once its text (``tokenizer.decode``
            of its tokens) holds one overlapping the row's last token, as transformers'
            ``StopStringCriteria`` (greedy and sampling; checked on the host every
            ``STOP_CHUNK`` tokens, the rows padded after their stop).
        tokenizer: decodes the tokens for ``stop_strings`` (js.models' or transformers').
        return_dict_in_generate: True: a ``GenerateOutput`` with ``sequences`` and (beam
            search) ``sequences_scores``, transformers' scores of the returned beams.
        rngs: ``js.Rngs`` with a ``sample`` (or ``default``) stream, needed with
            ``do_sample``: one key is drawn per call, so the same seed gives the same tokens.
        cache_dtype: the key-value cache's dtype (default: the model's; ``jnp.bfloat16`` halves
            its memory).

    The model runs in eval mode for the call (dropout off). The cache and the compiled
    programs are kept for the next call of the same shapes, which compiles nothing.

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models import GPT2Config, GPT2LMHeadModel, generate
        >>> config = GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=20, n_positions=64)
        >>> model = GPT2LMHeadModel(config, rngs=js.Rngs(params=0))
        >>> generate(model, jnp.array([[1, 2, 3]]), max_new_tokens=4).shape
        (1, 7)

        ``stream`` yields the same new tokens in chunks:

        >>> from js.models import stream
        >>> [part.shape for part in stream(model, jnp.array([[1, 2]]), max_new_tokens=5, chunk=2)]
        [(1, 2), (1, 2), (1, 1)]
    """
    request = _request(
        model,
        input_ids,
        attention_mask=attention_mask,
        rngs=rngs,
        cache_dtype=cache_dtype,
        **options,
    )
    stops = _StopStrings(stop_strings, tokenizer, request) if stop_strings is not None else None
    scores = None
    if request.beams > 1:
        sequences, scores = _beam_search_run(model, request)
    else:
        with _eval_mode(model):
            run = _Run(model, request)
            if stops is None and not run.done:
                run.advance(request.new)
            while stops is not None and not stops.check(run):
                run.advance(run.count + STOP_CHUNK)
            run.close()
        new = run.tokens() if stops is None else stops.tokens(run)
        sequences = np.concatenate([request.prompt.astype(np.int32), new], axis=1)
    if return_dict_in_generate:
        return GenerateOutput(jnp.asarray(sequences), scores)
    return jnp.asarray(sequences)


STOP_CHUNK = 8  # new tokens between two checks of the stop strings


class _StopStrings:
    """transformers' ``StopStringCriteria`` on the host, between runs of the decode loop: a
    row ends at the first new token whose text completes a stop string (an occurrence in the
    decoded text of the prompt's real tokens and the new ones that overlaps that token's text);
    the tokens the loop made after it become padding."""

    def __init__(self, strings: Any, tokenizer: Any, request: _Request):
        strings = [strings] if isinstance(strings, str) else list(strings)
        if not strings or not all(isinstance(t, str) and t for t in strings):
            raise TypeError(f"{OWNER}: stop_strings must be a non-empty string or strings")
        if not callable(getattr(tokenizer, "decode", None)):
            raise TypeError(
                f"{OWNER}: stop_strings needs tokenizer= (anything with decode(ids), such as "
                f"js.models.Tokenizer), got {tokenizer!r}"
            )
        if request.beams > 1:
            raise NotImplementedError(f"{OWNER}: stop_strings with beam search is not supported")
        self.strings, self.decode, self.request = strings, tokenizer.decode, request
        P = request.prompt.shape[1]
        real = request.mask[:, -P:] == 1
        self.prompts = [list(p[m]) for p, m in zip(request.prompt, real, strict=True)]
        self.ends = np.full(len(self.prompts), -1)  # each row's last new token (-1: running)
        self.checked = 0

    def _stops_at(self, row: Any, tokens: np.ndarray, j: int) -> bool:
        before = self.decode([int(t) for t in [*self.prompts[row], *tokens[:j]]])
        text = self.decode([int(t) for t in [*self.prompts[row], *tokens[: j + 1]]])
        return any(s in text[max(len(before) - len(s) + 1, 0) :] for s in self.strings)

    def check(self, run: _Run) -> bool:
        """Look at the tokens made since the last check, end the rows that stop (on the
        device too); True when the generation is over."""
        tokens, eos = run.tokens(), set(self.request.eos.tolist())
        for row in np.flatnonzero(self.ends < 0):
            for j in range(self.checked, run.count):
                if tokens[row, j] in eos or self._stops_at(row, tokens[row], j):
                    self.ends[row] = j
                    break
        self.checked = run.count
        stopped = self.ends >= 0
        if stopped.any():
            slot = np.arange(run.out.shape[1])
            after = stopped[:, None] & (slot[None, :] > self.ends[:, None])
            run.out = jnp.where(after, self.request.pad, run.out)
            run.finished = jnp.asarray(stopped) | run.finished
        return bool(stopped.all()) or run.done

    def tokens(self, run: _Run) -> np.ndarray:
        """The new tokens up to the last row's end."""
        last = np.where(self.ends >= 0, self.ends, run.count - 1)
        return run.tokens()[:, : int(last.max()) + 1]


@dataclass
class GenerateOutput:
    """``generate(..., return_dict_in_generate=True)``: the ``sequences`` and, from beam
    search, ``sequences_scores`` ``[B * num_return_sequences]`` (transformers' beam scores:
    summed log-probabilities over the new-token count to the ``length_penalty``)."""

    sequences: jax.Array
    sequences_scores: jax.Array | None = None


def _beam_search_run(model: Any, request: _Request) -> tuple[np.ndarray, jax.Array]:
    """Beam search on the host side: repeat each prompt per beam, run ``_beam_search``, keep
    the ``num_return_sequences`` best beams of each prompt, crop to the longest."""
    N, R = request.beams, request.returned
    B, width = request.ids.shape
    slots = bucket(request.new)
    spec = (B * N, width + slots, request.cache_dtype)
    eos = request.eos
    # transformers fills with `pad_token_id or eos_token_id[0]` (so 0 gives the end token)
    fill = (int(request.pad) or int(eos[0])) if eos.size else -1
    with _eval_mode(model):
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


def stream(model: Any, input_ids: Any, *, chunk: int = 16, **options: Any) -> Iterator[np.ndarray]:
    """``generate``'s new tokens, ``chunk`` at a time: yields ``[B, n]`` int32 NumPy arrays
    (``n <= chunk``; the first chunk includes the prompt's first new token), for showing text
    as it comes. Each chunk is one run of the compiled decode loop (the same program for every
    chunk); the chunks together are ``generate(...)[:, L:]`` for the same arguments and seed.

    Args:
        model, input_ids: as ``generate``.
        chunk: new tokens per yielded array (>= 1).
        options: ``generate``'s keyword arguments (``max_new_tokens``, ``attention_mask``,
            ``do_sample``, ...), checked before anything runs.

    See ``generate``'s example.
    """
    if not is_int(chunk) or chunk < 1:
        raise ValueError(f"js.models.stream: chunk must be an int >= 1, got {chunk!r}")
    for name in ("return_dict_in_generate", "stop_strings", "tokenizer"):
        if options.pop(name, None):
            raise ValueError(f"js.models.stream: {name} is generate's alone")
    try:  # generate's keywords and defaults; an unknown one is named
        request = _request(model, input_ids, **{**_CALL_DEFAULTS, **options})
    except TypeError as error:
        if "unexpected keyword" not in str(error):
            raise
        raise TypeError(f"js.models.stream: {error}. It takes generate's arguments") from None
    if request.beams > 1:
        raise ValueError(
            "js.models.stream: beam search (num_beams > 1) has no tokens to show before its "
            "end (the best beams change until then), as in transformers. Fix: generate"
        )
    return _stream(model, request, int(chunk))


def _stream(model: Any, request: _Request, chunk: int) -> Iterator[np.ndarray]:
    with _eval_mode(model):
        run = _Run(model, request)
        try:
            given = 0
            while True:
                if not run.done and run.count < given + chunk:
                    run.advance(given + chunk)
                if run.count > given:
                    yield run.tokens(given)
                given = run.count
                if run.done:
                    return
        finally:
            run.close()
