"""What every encoder-decoder model shares: cross-attention's keys and values cached once per
generation, and ``generate`` on the decoder-only generation loop.

A generation encodes the source once (one compiled program, ``_encode``), which also projects
the encoder's output to every decoder layer's cross-attention keys and values and stores them
in a ``Seq2SeqCache`` beside the decoder's self-attention ``js.nn.KVCache``. Then the prefill
and decode programs of ``js.models.generate`` (``_generation.py``) run unchanged on a
``DecoderView``: a ``CausalLM`` whose forward is the decoder over the cached cross keys and
values, starting from ``decoder_start_token_id``; with ``num_beams > 1`` the beam-search program
of ``_beam_search.py`` does, over the source repeated once per beam (as transformers expands
the encoder's output), the cache's self-attention rows following the beams. The encoder's input
is right-padded to a bucket (16, 32, ...) with ``attention_mask`` 0, so that sources of nearby
lengths share one program. The view reads the model's generation config, so the folder's
``generation_config.json`` gives ``generate``'s defaults (BART's ``forced_eos_token_id``).

A family provides (``Seq2SeqGenerationMixin``): ``encode(input_ids, attention_mask)`` (the
encoder's last hidden state), ``cross_attentions()`` (each decoder layer's cross-attention, with
``key_values(encoder_hidden) -> (k, v)`` ``[B, heads, S, head_dim]``), ``decode(input_ids,
attention_mask, *, cache, logits_to_keep)`` (logits, reading ``cache.cross(i)`` and
``cache.encoder_mask()``) and ``make_decoder_cache(batch_size, max_length, *, dtype)`` (the
decoder's self-attention ``KVCache``).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

import js
from js import Buffer, Module, ModuleList, nn
from js._checks import is_int
from js.nn.attention import padding_mask

from ._generation import GenerationConfigMixin, _generated, generate
from ._generation_request import (
    TRACES,
    _eval_mode,
    _give_back,
    _request,
    bucket,
    generation_config,
    set_generation_config,
)

OWNER = "js.models.generate"


class CrossKV(Module):
    """One decoder layer's cross-attention keys ``k`` and values ``v`` over the encoder's
    output, ``[B, heads, S, head_dim]`` (non-persistent buffers)."""

    def __init__(self, k: jax.Array, v: jax.Array):
        super().__init__()
        self.k = Buffer(k, persistent=False)
        self.v = Buffer(v, persistent=False)


class Seq2SeqCache(Module):
    """An encoder-decoder's generation cache: the decoder's self-attention ``KVCache``
    (``decoder``; ``begin``, ``update``, ``mask``, ``reset`` and ``reorder`` are its) and,
    written once per source, each layer's cross-attention keys and values (``cross(i)``) and
    the source's padding (``encoder_valid`` ``[B, S]`` bool).

    Args:
        decoder: the decoder's self-attention cache; its layers, heads, head size and dtype
            are the cross-attention's too.
        source_length: ``S``, the (bucketed) source tokens per row.
    """

    def __init__(self, decoder: nn.KVCache, source_length: int):
        super().__init__()
        B, heads, _, head_dim = decoder.layer(0).k.value.shape
        empty = jnp.zeros((B, heads, source_length, head_dim), decoder.layer(0).k.value.dtype)
        self.decoder = decoder
        self.layers = ModuleList([CrossKV(empty, empty) for _ in range(len(decoder.layers))])
        self.encoder_valid = Buffer(jnp.ones((B, source_length), bool), persistent=False)

    def begin(self, T: int, attention_mask: Any = None) -> jax.Array:
        """``KVCache.begin`` of the decoder's self-attention."""
        return self.decoder.begin(T, attention_mask)

    def update(self, layer: int, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``KVCache.update`` of the decoder's self-attention."""
        return self.decoder.update(layer, k, v)

    def mask(self, T: int, window: int | None = None) -> jax.Array:
        """``KVCache.mask`` of the decoder's self-attention."""
        return self.decoder.mask(T, window)

    def reset(self) -> None:
        """Forget the decoded tokens; the source's keys and values stay."""
        self.decoder.reset()

    def reorder(self, rows: Any) -> None:
        """``KVCache.reorder`` of the decoder's self-attention (beam search follows its beams
        within each source's rows, whose cross keys and values are equal: they stay)."""
        self.decoder.reorder(rows)

    @property
    def start(self) -> Buffer:
        """The first slot of the last ``begin`` (the decoder cache's)."""
        return self.decoder.start

    @property
    def max_length(self) -> int:
        """Self-attention slots per row."""
        return self.decoder.max_length

    def store(self, layer: int, k: jax.Array, v: jax.Array) -> None:
        """Keep cross-attention layer ``layer``'s keys and values ``[B, heads, S, head_dim]``."""
        kv = cast(CrossKV, self.layers[layer])
        kv.k.value, kv.v.value = k.astype(kv.k.value.dtype), v.astype(kv.v.value.dtype)

    def cross(self, layer: int, dtype: Any) -> tuple[jax.Array, jax.Array]:
        """Cross-attention layer ``layer``'s keys and values, in ``dtype``."""
        kv = cast(CrossKV, self.layers[layer])
        return kv.k.value.astype(dtype), kv.v.value.astype(dtype)

    def encoder_mask(self) -> jax.Array:
        """``[B, 1, 1, S]`` bool, True at the source's real tokens."""
        return padding_mask(self.encoder_valid.value)


def cross_key_values(
    attention: Any, index: int, encoder_hidden: jax.Array | None, cache: Any, dtype: Any
) -> tuple[jax.Array, jax.Array]:
    """Decoder layer ``index``'s cross-attention keys and values: the cache's (written once
    per source) when decoding with a ``Seq2SeqCache``, else ``attention.key_values`` of the
    encoder's output."""
    if isinstance(cache, Seq2SeqCache):
        return cache.cross(index, dtype)
    assert encoder_hidden is not None, "a decoder forward without a cache needs the encoder"
    return attention.key_values(encoder_hidden)


class DecoderView(Module):
    """An encoder-decoder model as the ``CausalLM`` the generation loop drives: its forward is
    the model's ``decode`` over a ``Seq2SeqCache`` that holds the source."""

    def __init__(self, model: Any):
        super().__init__()
        self.model, self.config = model, model.config  # the loop reads the config's token ids
        object.__setattr__(self, "training", model.training)  # the model's mode is the view's
        set_generation_config(self, generation_config(model))  # and its generate defaults

    def make_cache(self, batch_size: int, max_length: int, *, dtype: Any = None) -> Any:
        """The decoder's self-attention cache (a generation gives the loop its
        ``Seq2SeqCache``, which holds this and the source's keys and values)."""
        return self.model.make_decoder_cache(batch_size, max_length, dtype=dtype)

    def forward(self, input_ids: Any, attention_mask: Any = None, **options: Any) -> jax.Array:
        """``model.decode`` (``options``: ``cache``, ``logits_to_keep``): next-token logits
        ``[B, L, vocab]``."""
        return self.model.decode(input_ids, attention_mask, **options)


@functools.partial(js.jit, static_argnames="copies")
def _encode(model, cache, ids, mask, copies):
    """Encode the source once and store every decoder layer's cross keys and values in
    ``cache``, each row repeated ``copies`` times (one per beam or returned sample, as
    transformers expands the encoder's output)."""
    TRACES["encode"] += 1
    hidden = model.encode(ids, mask)  # [B, S, d_model]
    repeat = functools.partial(jnp.repeat, repeats=copies, axis=0)
    for index, attention in enumerate(model.cross_attentions()):
        cache.store(index, *map(repeat, attention.key_values(hidden)))
    cache.encoder_valid.value = repeat(mask != 0)


def _source(input_ids: Any, attention_mask: Any) -> tuple[np.ndarray, np.ndarray]:
    """The source ids and mask right-padded to their bucket (padding masked out)."""
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or ids.dtype.kind not in "iu" or 0 in ids.shape:
        raise ValueError(
            f"{OWNER}: input_ids (the source) must be integer token ids [B, S] with S >= 1, "
            f"got shape {list(ids.shape)} and dtype {ids.dtype}. Fix: a batch of one is ids[None]"
        )
    mask = np.ones(ids.shape, bool) if attention_mask is None else np.asarray(attention_mask) != 0
    if mask.shape != ids.shape or not mask.any(axis=1).all():
        raise ValueError(
            f"{OWNER}: attention_mask must be input_ids' shape {list(ids.shape)} with a real "
            f"token (1) in every row, got shape {list(mask.shape)} with "
            f"{int((~mask.any(axis=-1)).sum())} rows of padding only"
        )
    B, S = ids.shape
    width = bucket(S)
    padded, valid = np.zeros((B, width), np.int32), np.zeros((B, width), np.int32)
    padded[:, :S], valid[:, :S] = np.where(mask, ids, 0), mask
    return padded, valid


def _decoder_prompt(config: Any, rows: int, options: dict[str, Any]) -> np.ndarray:
    """The decoder's prompt ``[B, P]``: ``decoder_input_ids`` (taken out of ``options``) led by
    ``decoder_start_token_id`` (prepended where no row starts with it, as transformers does;
    None: the config's), else that token alone."""
    start = options.pop("decoder_start_token_id", None)
    start = getattr(config, "decoder_start_token_id", None) if start is None else start
    if not is_int(start):
        raise ValueError(
            f"{OWNER}: decoder_start_token_id (the decoder's first token) must be an int, got "
            f"{start!r}. Fix: pass decoder_start_token_id= or set it in config.json (T5: 0)"
        )
    prompt = options.pop("decoder_input_ids", None)
    if prompt is None:
        return np.full((rows, 1), start, np.int32)
    prompt = np.asarray(prompt)
    if prompt.ndim != 2 or prompt.dtype.kind not in "iu" or prompt.shape[0] != rows:
        raise ValueError(
            f"{OWNER}: decoder_input_ids must be integer token ids [B, P] with the source's "
            f"{rows} rows, got shape {list(prompt.shape)} and dtype {prompt.dtype}"
        )
    if (prompt[:, 0] != start).all():
        prompt = np.concatenate([np.full((rows, 1), start), prompt], axis=1)
    return prompt.astype(np.int32)


def _generate_arguments(view: DecoderView, prompt: np.ndarray, options: dict[str, Any]) -> dict:
    """``generate(view, prompt, **options)``'s arguments as its request check takes them (the
    defaults filled in, a wrong name refused); an option of ``generate`` alone (one that acts
    on the whole call, such as stop strings) is refused unless left at its default."""
    signature = inspect.signature(generate)
    call = signature.bind(view, prompt, **options)
    call.apply_defaults()
    checked = inspect.signature(_request).parameters
    arguments: dict[str, Any] = {}
    for name, value in call.arguments.items():
        parameter = signature.parameters[name]
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        elif name in checked:
            arguments[name] = value
        elif value != parameter.default:
            raise NotImplementedError(
                f"{OWNER}: {name} is not implemented for encoder-decoder models. Fix: leave "
                f"{name} out"
            )
    return arguments


class Seq2SeqGenerationMixin(GenerationConfigMixin):
    """``model.generate(input_ids, ...)`` for an encoder-decoder model: encode once, then the
    decode loop of ``js.models.generate`` on the decoder (see the module docstring)."""

    def generation_source(self, input_ids: Any, attention_mask: Any) -> tuple[Any, np.ndarray]:
        """``encode``'s input and the mask ``[B, S]`` of the encoder's output: the source ids
        right-padded to a bucket (a family whose source is not tokens, Whisper, overrides it)."""
        return _source(input_ids, attention_mask)

    def generate(self, input_ids: Any, *, attention_mask: Any = None, **options: Any) -> Any:
        """The decoder's tokens ``[B, P + n]`` int32: its prompt (the start token, or
        ``decoder_input_ids`` led by it), then up to ``max_new_tokens`` new ones, as
        transformers' ``generate`` returns them for an encoder-decoder model (greedy, sampled,
        or with ``num_beams > 1`` beam search: ``num_return_sequences`` rows per source).

        Args:
            input_ids: the source ``[B, S]``, padded on either side.
            attention_mask: ``[B, S]``, 1 for real source tokens (None: all real).
            options: ``decoder_start_token_id`` (None: the config's); ``decoder_input_ids``
                ``[B, P]``, the decoder's prompt (forced tokens, such as Whisper's language
                and task); ``suppress_tokens`` (never chosen) and ``begin_suppress_tokens``
                (not chosen first), lists of ids; ``return_dict_in_generate`` (a
                ``GenerateOutput`` with beam search's ``sequences_scores``); and
                ``js.models.generate``'s keyword arguments (``max_new_tokens``, ``do_sample``,
                ``num_beams``, ``length_penalty``, ``eos_token_id``, ...).
        """
        model = cast(Any, self)
        ids, mask = model.generation_source(input_ids, attention_mask)
        prompt = _decoder_prompt(model.config, ids.shape[0], options)
        as_dict = options.pop("return_dict_in_generate", False)
        view = DecoderView(model)
        request = _request(**_generate_arguments(view, prompt, options))
        B, width = request.ids.shape
        rows = B * request.beams  # the decoder's rows: each source repeated per beam or sample
        spec = (rows, width + bucket(request.new), request.cache_dtype)  # the loops' cache spec
        decoder = model.make_decoder_cache(*spec[:2], dtype=spec[2])
        cache = Seq2SeqCache(decoder, mask.shape[1])
        _give_back(view, spec, cache)  # the loop takes this cache as the view's
        with _eval_mode(model):
            _encode(model, cache, ids, mask, copies=rows // ids.shape[0])
            return _generated(view, request, None, as_dict)


__all__ = ["DecoderView", "Seq2SeqCache", "Seq2SeqGenerationMixin", "cross_key_values"]
