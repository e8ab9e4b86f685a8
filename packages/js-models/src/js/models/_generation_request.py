"""A generation request: ``generate``'s options checked and bucketed on the host, and what calls
keep between them (each model's generation config, its last cache, the count of compiled programs).

The options a call leaves out come from the model's ``generation_config`` (the folder's
``generation_config.json``), then the model config (its token ids), then transformers'
defaults. The prompt is left-padded to a bucket (16, 32, 64, 128, 256, 512, then multiples of
512) so that prompts of nearby lengths share the compiled programs of ``_generation.py``.
"""

from __future__ import annotations

import collections
import functools
import threading
import weakref
from collections.abc import Callable
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
    check_token_rules,
)
from ._sampling import token_ids as _token_ids

OWNER = "js.models.generate"

# Programs traced, by name ("prefill", "decode", "beam", "encode"): a trace is a compilation
# (tests count them).
TRACES: collections.Counter[str] = collections.Counter()


def bucket(n: int) -> int:
    """The length a prompt of ``n`` tokens (or ``n`` new tokens) is padded to: 16, 32, 64, 128,
    256, 512, then the next multiple of 512.

    Example:
        >>> from js.models._generation_request import bucket
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
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
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
    """Each option: the argument, else the generation config's, else (token ids and lists) the
    model config's, else the default; ``max_new_tokens`` from ``max_length`` where only it is
    set."""
    folder = _GENERATION_CONFIGS.get(model) or {}
    config = getattr(model, "config", None)
    settings = {}
    for name, default in DEFAULTS.items():
        value = options.get(name)
        if value is None:
            value = folder.get(name)
        if value is None and name.endswith(("_token_id", "_tokens")):
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
    # [temperature, 1 - top_p, repetition_penalty, length_penalty, min_new_tokens,
    # max_new_tokens, begin] float32 (begin: the new token begin_suppress_tokens bar)
    values: np.ndarray
    eos: np.ndarray  # [E] int32 (E may be 0)
    pad: np.int32
    key: jax.Array
    cache_dtype: Any  # None: the model's
    given: np.ndarray  # [B, P_bucket] int32: the prompt as given, after NOT_GIVEN
    beams: int  # num_beams
    early_stopping: bool | str
    returned: int  # num_return_sequences
    tokens: np.ndarray  # [4, K] int32: the TOKEN_RULES' ids (-1: none)

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
            jnp.asarray(self.tokens),
        )


class _Arrays(NamedTuple):
    """A request's arrays for the compiled programs (traced: other values compile nothing)."""

    ids: Any  # [B, W]
    mask: Any  # [B, W]
    given: Any  # [B, W]
    values: Any  # [7]
    eos: Any  # [E]
    pad: Any  # scalar
    key: Any
    tokens: Any  # [4, K]


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
    token_rules, begin = check_token_rules(settings, P, vocab)
    processing = check_processing(
        settings["repetition_penalty"],
        settings["no_repeat_ngram_size"],
        settings["min_new_tokens"],
        eos,
        token_rules,
    )
    beams, returned, early_stopping = _check_beams(settings, rule.do_sample)
    more = [settings[name] for name in ("repetition_penalty", "length_penalty", "min_new_tokens")]
    more += [max_new_tokens, begin]
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
        tokens=token_rules,
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
