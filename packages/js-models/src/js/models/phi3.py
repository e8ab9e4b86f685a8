"""Phi-3 (Phi-3, Phi-3.5-mini, Phi-4-mini): Llama's arrangement with fused projections and
LongRoPE, as in transformers 5.23's ``modeling_phi3.py``.

Module names are transformers' (``model.layers.N.self_attn.qkv_proj``, ``mlp.gate_up_proj``),
so a Hugging Face folder's weights load without renaming. Where Phi-3 differs from the decoder
skeleton's Llama arrangement (``_decoder.py``):

- one ``qkv_proj`` (queries, then keys, then values) and ``o_proj``, no biases;
- an MLP ``down_proj(up * act(gate))`` whose ``gate_up_proj`` holds gate then up;
- every layer attends within ``sliding_window`` when it is set;
- rotary positions on the first ``partial_rotary_factor`` of each head (default 1.0), and the
  128k models' ``longrope`` scaling (``short_factor`` up to ``original_max_position_embeddings``
  positions, ``long_factor`` past it; ``_rope.py``).

Generation with ``longrope``: transformers' ``Phi3ForCausalLM.prepare_inputs_for_generation``
drops the cache at the step where the sequence first outgrows
``original_max_position_embeddings`` and runs the whole sequence again, so that every key is
rotated with the long factors. This model does the same: its cache (``make_cache``) also keeps
each slot's token, and the forward that crosses that length (a ``lax.cond`` on the positions)
runs every slot again. Only with ``input_ids`` (not ``inputs_embeds``) and counted positions.

Dropout (``resid_pdrop``, ``embd_pdrop``, ``attention_dropout``) is not applied: inference.
"""

from __future__ import annotations

import inspect
from typing import Any

import jax
import jax.numpy as jnp

import js
from js import Buffer, Module, Rngs, nn
from js.nn import KVCache

from ._base import architectures
from ._decoder import DecoderAttention, DecoderForCausalLM, DecoderLayer, DecoderModel
from ._hf import activation, check_tokens
from ._rope import fold_rope_keys
from .llama import MistralConfig

__all__ = [
    "ARCHITECTURES",
    "Phi3Cache",
    "Phi3Config",
    "Phi3ForCausalLM",
    "Phi3Model",
]


class Phi3Config(MistralConfig):
    """A Phi-3 ``config.json``: transformers 5.23's ``Phi3Config`` keys and defaults; Mistral's
    arrangement (no biases, every layer within ``sliding_window`` when it is set).

    ``rope_parameters`` gets ``partial_rotary_factor`` (the top-level key's, default 1.0), and
    the older rope types "su" and "yarn" become "longrope", as transformers reads them; a
    top-level ``original_max_position_embeddings`` is the one longrope uses.

    Example:
        >>> from js.models.phi3 import Phi3Config
        >>> config = Phi3Config(rope_scaling={"type": "su", "short_factor": [1.0] * 48,
        ...     "long_factor": [2.0] * 48}, max_position_embeddings=131072)
        >>> rope = config.rope_parameters
        >>> rope["rope_type"], rope["original_max_position_embeddings"]
        ('longrope', 4096)
    """

    model_type = "phi3"

    def __init__(self, **kwargs: Any):
        kwargs = fold_rope_keys(
            kwargs, keep=True, partial_rotary_factor=("partial_rotary_factor", 1.0)
        )
        rope = kwargs["rope_parameters"]
        if rope.get("rope_type", rope.get("type")) in ("su", "yarn"):  # Phi-3's older names
            rope["rope_type"] = "longrope"
        super().__init__(**kwargs)


class Phi3Attention(DecoderAttention):
    """The skeleton's attention with one fused ``qkv_proj`` (queries, keys, values)."""

    qkv_name = "qkv_proj"


class Phi3MLP(Module):
    """``down_proj(up * act(gate))`` with ``gate, up = gate_up_proj(x)`` (halves)."""

    def __init__(self, config: Phi3Config, *, rngs: Rngs):
        super().__init__()
        self.hidden_act = config.hidden_act
        activation("Phi3Config", "hidden_act", self.hidden_act)
        hidden, inner = config.hidden_size, config.intermediate_size
        self.gate_up_proj = nn.Linear(hidden, 2 * inner, bias=False, rngs=rngs)
        self.down_proj = nn.Linear(inner, hidden, bias=False, rngs=rngs)

    def forward(self, x: jax.Array) -> jax.Array:
        gate, up = jnp.split(self.gate_up_proj(x), 2, axis=-1)
        return self.down_proj(up * activation("Phi3MLP", "hidden_act", self.hidden_act)(gate))


class Phi3DecoderLayer(DecoderLayer):
    """The skeleton's pre-norm block with Phi-3's attention and MLP."""

    attention_class = Phi3Attention
    mlp_class = Phi3MLP


class Phi3Model(DecoderModel):
    """The Phi-3 decoder without a head (see ``DecoderModel.forward``)."""

    config_class = Phi3Config
    layer_class = Phi3DecoderLayer


class Phi3Cache(KVCache):
    """The skeleton's ``KVCache`` that also keeps each slot's token id (``tokens`` ``[B,
    max_length]``), so that a ``longrope`` model can run the sequence again."""

    def __init__(self, batch_size: int, max_length: int, *args: Any, **kwargs: Any):
        super().__init__(batch_size, max_length, *args, **kwargs)
        tokens = jnp.zeros((batch_size, max_length), jnp.int32)
        self.tokens = Buffer(tokens, persistent=False)


class Phi3ForCausalLM(DecoderForCausalLM):
    """``Phi3Model`` and ``lm_head``; with ``longrope``, generation runs the sequence again
    when it outgrows ``original_max_position_embeddings`` (see the module's docstring)."""

    base_model_class = Phi3Model

    def make_cache(self, batch_size: int, max_length: int, *, dtype: Any = None) -> KVCache:
        """The skeleton's cache; with ``longrope`` a ``Phi3Cache`` (token ids kept too)."""
        if self.config.rope_parameters.get("rope_type") != "longrope":
            return super().make_cache(batch_size, max_length, dtype=dtype)
        dtype = self.decoder.embedding.weight.value.dtype if dtype is None else dtype
        layers, heads, dim = self.decoder.cache_layout()
        return Phi3Cache(batch_size, max_length, layers, heads, dim, dtype=dtype)

    def cached_step(self, inputs: tuple[Any, ...], options: dict[str, Any]) -> jax.Array | None:
        """With a ``Phi3Cache``, counted positions and ``input_ids``: the step as usual, or
        every slot again where the step takes the sequence past
        ``original_max_position_embeddings``."""
        given = inspect.signature(self.decoder.forward).bind(*inputs, **options).arguments
        cache, ids = given.get("cache"), given.get("input_ids")
        if not isinstance(cache, Phi3Cache) or ids is None or given.get("position_ids") is not None:
            return None
        ids = jnp.asarray(check_tokens(type(self).__name__, ids, given.get("inputs_embeds"))[0])
        return self._longrope_step(ids, given.get("attention_mask"), cache)

    def _longrope_step(self, ids: jax.Array, attention_mask: Any, cache: Phi3Cache) -> jax.Array:
        """The hidden state of the new tokens: as usual, or, when the call takes the sequence
        past ``original_max_position_embeddings`` (over every row), of every slot run again."""
        B, T = ids.shape
        real = (
            jnp.ones((B, T), bool) if attention_mask is None else jnp.asarray(attention_mask) != 0
        )
        start, before = cache.length.value, cache.next_position.value  # [], [B]
        after = before + real.sum(axis=1, dtype=jnp.int32)  # each row's length after the call
        original = self.config.rope_parameters["original_max_position_embeddings"]
        crossing = (start > 0) & (before.max() <= original) & (after.max() > original)
        cache.tokens.value = jax.lax.dynamic_update_slice(
            cache.tokens.value, ids.astype(jnp.int32), (0, start)
        )
        graphdef, state = js.split(cache)

        def step(state: Any) -> tuple[jax.Array, Any]:  # the new tokens, as usual
            mine = js.merge(graphdef, state)
            return self.decoder(ids, attention_mask, cache=mine), js.split(mine)[1]

        def again(state: Any) -> tuple[jax.Array, Any]:  # every slot, with the long factors
            mine = js.merge(graphdef, state)
            valid = jax.lax.dynamic_update_slice(mine.valid.value, real, (0, start))
            mine.reset()
            hidden = self.decoder(mine.tokens.value, valid.astype(jnp.int32), cache=mine)
            mine.start.value, mine.length.value, mine.next_position.value = start, start + T, after
            return jax.lax.dynamic_slice_in_dim(hidden, start, T, axis=1), js.split(mine)[1]

        hidden, state = jax.lax.cond(crossing, again, step, state)
        js.update(cache, state)
        return hidden


ARCHITECTURES = architectures(Phi3ForCausalLM, Phi3Model)
