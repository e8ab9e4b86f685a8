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
repeated n-gram, minimum new tokens, forced first and last tokens, suppressed tokens), their
values traced. With ``num_beams > 1`` one compiled program (``_beam_search.py``) runs
transformers' beam search. The request (options checked, prompts bucketed) is
``_generation_request.py``'s; stop strings are ``_stop_strings.py``'s.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import js
from js._checks import is_int

from ._beam_search import GenerateOutput, _beam_search_run
from ._generation_request import (
    _CALL_DEFAULTS,
    _Arrays,
    _eval_mode,
    _give_back,
    _Request,
    _request,
    _take_cache,
    bucket,
)
from ._generation_request import DEFAULTS as DEFAULTS  # the option names, as _pretrained reads them
from ._generation_request import TRACES as TRACES  # tests count compilations here
from ._generation_request import CausalLM as CausalLM  # js.models.CausalLM
from ._generation_request import generation_config as generation_config
from ._generation_request import set_generation_config as set_generation_config
from ._sampling import Sampling, choose, processed
from ._stop_strings import STOP_CHUNK, _StopStrings


class GenerationConfigMixin:
    """``model.generation_config``, for every model that generates (decoders and
    encoder-decoders)."""

    @property
    def generation_config(self) -> dict[str, Any]:
        """``generate``'s defaults below its arguments: the folder's ``generation_config.json``
        (``{}`` without one), written back by ``save_pretrained``. Edit it or assign a dict."""
        return generation_config(self)

    @generation_config.setter
    def generation_config(self, value: dict[str, Any]) -> None:
        set_generation_config(self, value)


class GenerationMixin(GenerationConfigMixin):
    """``model.generate(...)`` and ``model.stream(...)``: ``js.models.generate`` and
    ``js.models.stream`` on this model, which meets the ``CausalLM`` protocol."""

    def generate(self, input_ids: Any, **options: Any) -> jax.Array:
        """``js.models.generate(self, input_ids, **options)``."""
        return generate(self, input_ids, **options)

    def stream(self, input_ids: Any, **options: Any) -> Iterator[np.ndarray]:
        """``js.models.stream(self, input_ids, **options)``."""
        return stream(self, input_ids, **options)


@functools.partial(js.jit, static_argnames=("rule", "processing", "slots"))
def _prefill(model, cache, arrays: _Arrays, *, rule: Sampling, processing, slots: int):
    """Run the prompt, filling ``cache``: ``(out, finished)``, ``out [B, slots]`` holding the
    first new token."""
    TRACES["prefill"] += 1
    cache.reset()
    ids, mask = arrays.ids, arrays.mask
    logits = model(ids, attention_mask=mask, cache=cache, logits_to_keep=1)[:, -1]  # [B, V]
    out = jnp.zeros((ids.shape[0], slots), jnp.int32)
    logits = processed(logits, processing, arrays, out, 0)
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
        logits = processed(logits, processing, arrays, out, i)
        token = choose(logits, rule, arrays.values, jax.random.fold_in(arrays.key, i))
        token = jnp.where(finished, arrays.pad, token)  # a finished row only pads
        out = jax.lax.dynamic_update_slice_in_dim(out, token[:, None], i, axis=1)
        return out, i + 1, finished | jnp.isin(token, arrays.eos), js.split(step_cache)[1]

    out, count, finished, state = jax.lax.while_loop(
        unfinished, turn, (out, count, finished, state)
    )
    js.update(cache, state)
    return out, count, finished


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
        forced_bos_token_id: the first new token, after a prompt of one token (as
            transformers' ``ForcedBOSTokenLogitsProcessor``: an encoder-decoder's start token).
        forced_eos_token_id: an int or ints: the last new token (``max_new_tokens``-th) is one
            of them (transformers' ``ForcedEOSTokenLogitsProcessor``; BART's configs set 2).
        suppress_tokens: ids never chosen; begin_suppress_tokens: ids not chosen first.
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
    return _generated(model, request, stops, return_dict_in_generate)


def _generated(model: Any, request: _Request, stops: _StopStrings | None, as_dict: bool) -> Any:
    """The search ``request`` asks for (beam search, else greedy or sampled), the model in eval
    mode: the sequences, or with ``as_dict`` a ``GenerateOutput``."""
    with _eval_mode(model):
        if request.beams > 1:
            sequences, scores = _beam_search_run(model, request)
        else:
            sequences, scores = _searched(model, request, stops), None
    if as_dict:
        return GenerateOutput(jnp.asarray(sequences), scores)
    return jnp.asarray(sequences)


def _searched(model: Any, request: _Request, stops: _StopStrings | None) -> np.ndarray:
    """Greedy or sampled search (the model in eval mode): the prompts, then their new tokens
    up to each row's end (or stop string)."""
    run = _Run(model, request)
    if stops is None and not run.done:
        run.advance(request.new)
    while stops is not None and not stops.check(run):
        run.advance(run.count + STOP_CHUNK)
    run.close()
    new = run.tokens() if stops is None else stops.tokens(run)
    return np.concatenate([request.prompt.astype(np.int32), new], axis=1)


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
