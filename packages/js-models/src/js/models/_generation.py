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
"""

from __future__ import annotations

import collections
import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

import js
from js._checks import is_int

from ._sampling import Sampling, check_sampling, choose

OWNER = "js.models.generate"

# Programs traced, by name ("prefill", "decode"): a trace is a compilation (tests count them).
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


@dataclass
class _Request:
    """One call's inputs, checked and bucketed on the host."""

    prompt: np.ndarray  # [B, P] as given
    ids: np.ndarray  # [B, P_bucket] int32, left-padded
    mask: np.ndarray  # [B, P_bucket] int32
    new: int  # max_new_tokens
    rule: Sampling
    values: np.ndarray  # [temperature, 1 - top_p] float32
    eos: np.ndarray  # [E] int32 (E may be 0)
    pad: np.int32
    key: jax.Array
    cache_dtype: Any  # None: the model's


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


def _request(
    model: Any,
    input_ids: Any,
    *,
    attention_mask: Any,
    max_new_tokens: Any,
    do_sample: bool,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    eos_token_id: int | Sequence[int] | None,
    pad_token_id: int | None,
    rngs: js.Rngs | None,
    cache_dtype: Any,
) -> _Request:
    if not isinstance(model, CausalLM):
        missing = [m for m in ("make_cache", "__call__") if not callable(getattr(model, m, None))]
        raise TypeError(
            f"{OWNER}: {type(model).__name__} has no {missing[0]}(); generation needs a causal "
            "language model (js.models.CausalLM) with make_cache(batch_size, max_length, *, "
            "dtype) and a forward taking (input_ids, attention_mask=, cache=, "
            "logits_to_keep=), such as js.models' GPT2LMHeadModel or LlamaForCausalLM"
        )
    if not is_int(max_new_tokens):
        raise TypeError(f"{OWNER}: max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise ValueError(
            f"{OWNER}: max_new_tokens must be >= 1, got {max_new_tokens}: generation adds at "
            "least one token. Fix: max_new_tokens=1 or more (the prompt alone is input_ids)"
        )
    prompt, real = _prompt(input_ids, attention_mask)
    B, P = prompt.shape
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
    rule, values = check_sampling(do_sample, temperature, top_k, top_p)
    config = getattr(model, "config", None)
    if eos_token_id is None:  # transformers reads the model's generation defaults
        eos_token_id = getattr(config, "eos_token_id", None) if config is not None else None
    eos = [] if eos_token_id is None else _token_ids("eos_token_id", eos_token_id)
    if pad_token_id is None:
        pad_token_id = getattr(config, "pad_token_id", None) if config is not None else None
    if pad_token_id is None:
        pad_token_id = eos[0] if eos else 0
    pad = _token_ids("pad_token_id", pad_token_id)
    if len(pad) != 1:
        raise TypeError(f"{OWNER}: pad_token_id must be one int, got {pad_token_id!r}")
    key = _sampling_key(rngs, rule.do_sample)
    width = bucket(P)
    ids, mask = np.zeros((B, width), np.int32), np.zeros((B, width), np.int32)
    ids[:, width - P :], mask[:, width - P :] = tokens, real
    return _Request(
        prompt=prompt,
        ids=ids,
        mask=mask,
        new=int(max_new_tokens),
        rule=rule,
        values=values,
        eos=np.array(eos, np.int32),
        pad=np.int32(pad[0]),
        key=key,
        cache_dtype=None if cache_dtype is None else jnp.dtype(cache_dtype),
    )


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


@functools.partial(js.jit, static_argnames=("rule", "slots"))
def _prefill(model, cache, ids, mask, key, values, eos, *, rule: Sampling, slots: int):
    """Run the prompt, filling ``cache``: ``(out, finished)``, ``out [B, slots]`` holding the
    first new token."""
    TRACES["prefill"] += 1
    cache.reset()
    logits = model(ids, attention_mask=mask, cache=cache, logits_to_keep=1)[:, -1]  # [B, V]
    token = choose(logits, rule, values, jax.random.fold_in(key, 0))
    out = jnp.zeros((ids.shape[0], slots), jnp.int32).at[:, 0].set(token)
    return out, jnp.isin(token, eos)


@functools.partial(js.jit, static_argnames=("rule",))
def _decode(model, cache, out, count, limit, finished, key, values, eos, pad, *, rule: Sampling):
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
        token = choose(logits, rule, values, jax.random.fold_in(key, i))
        token = jnp.where(finished, pad, token)  # a finished row only pads
        out = jax.lax.dynamic_update_slice_in_dim(out, token[:, None], i, axis=1)
        return out, i + 1, finished | jnp.isin(token, eos), js.split(step_cache)[1]

    out, count, finished, state = jax.lax.while_loop(
        unfinished, turn, (out, count, finished, state)
    )
    js.update(cache, state)
    return out, count, finished


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
        self.eos, self.values = jnp.asarray(request.eos), jnp.asarray(request.values)
        self.out, self.finished = _prefill(
            model,
            self.cache,
            request.ids,
            request.mask,
            request.key,
            self.values,
            self.eos,
            rule=request.rule,
            slots=self.slots,
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
            request.key,
            self.values,
            self.eos,
            request.pad,
            rule=request.rule,
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
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    rngs: js.Rngs | None = None,
    cache_dtype: Any = None,
) -> jax.Array:
    """Continue each prompt by up to ``max_new_tokens`` tokens: ``[B, L + n]`` int32 token ids,
    the prompt then the new tokens, as transformers' ``generate`` returns them.

    Args:
        model: a causal language model of js.models (``GPT2LMHeadModel``,
            ``LlamaForCausalLM``, Qwen2, Mistral), or any model with ``make_cache`` and a
            forward taking ``(input_ids, attention_mask=, cache=, logits_to_keep=)``.
        input_ids: ``[B, L]`` token ids; rows of different lengths are left-padded.
        attention_mask: ``[B, L]``, 1 for real tokens and 0 for the left padding (None: all
            real). Right padding is refused.
        max_new_tokens: how many tokens to add at most (>= 1).
        do_sample: False (default): greedy, the most likely token; True: draw from the
            distribution after ``temperature``, ``top_k`` and ``top_p``.
        temperature: divides the logits before sampling (> 0).
        top_k: sample among the ``k`` most likely tokens only (None or 0: all). Note that
            transformers' generation config defaults to 50; here the default is no limit.
        top_p: sample among the most likely tokens whose probabilities reach ``top_p``, in
            (0, 1] (None or 1.0: all).
        eos_token_id: an int or a list of ints that end a row; None: the model config's
            ``eos_token_id`` (as transformers does); ``[]``: never stop early.
        pad_token_id: written after a row's end (None: the config's ``pad_token_id``, else the
            first end token).
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
    request = _request(**locals())  # the arguments as given, checked
    with _eval_mode(model):
        run = _Run(model, request)
        if not run.done:
            run.advance(request.new)
        run.close()
    new = run.tokens()
    return jnp.asarray(np.concatenate([request.prompt.astype(np.int32), new], axis=1))


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
    try:  # generate's keywords and defaults; an unknown or missing one is named
        call = inspect.signature(generate).bind(model, input_ids, **options)
    except TypeError as error:
        raise TypeError(f"js.models.stream: {error}. It takes generate's arguments") from None
    call.apply_defaults()
    return _stream(model, _request(**call.arguments), int(chunk))


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
