"""GPT-NeoX (GPT-NeoX-20B, Pythia): decoder-only transformers with a fused query-key-value
projection and partial rotary positions, as in transformers 5.23's ``modeling_gpt_neox.py``.

Module names are those of the hub's files and of what transformers 5.23 writes
(``gpt_neox.layers.N.attention.query_key_value``, ``gpt_neox.final_layer_norm``, the head
``embed_out``; transformers' module ``lm_head`` is read as ``embed_out``). Where GPT-NeoX
differs from the decoder skeleton's Llama arrangement (``_decoder.py``):

- ``attention.query_key_value`` projects to ``[B, L, heads, 3 * head_dim]`` (each head's query,
  key and value side by side), ``attention.dense`` projects back; both with a bias unless
  ``attention_bias`` is false;
- rotary positions on the first ``rotary_pct`` of each head (default 0.25) with base
  ``rotary_emb_base``: both end up in ``rope_parameters`` (``partial_rotary_factor``,
  ``rope_theta``), as transformers 5 writes them;
- LayerNorms with biases; ``use_parallel_residual`` (default) makes a block
  ``x + attn(ln1(x)) + mlp(ln2(x))``, otherwise ``y = x + attn(ln1(x))``, ``y + mlp(ln2(y))``;
- MLP ``dense_4h_to_h(act(dense_h_to_4h(x)))`` (``gelu``); ``embed_out`` untied by default.

Dropout: ``hidden_dropout`` applies in training mode (with a ``dropout`` stream);
``attention_dropout`` is not applied (the skeleton's attention has no dropout).
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax

from js import Module, Rngs, nn
from js.nn import KVCache

from ._base import PretrainedConfig, PreTrainedModel, architectures
from ._decoder import (
    DecoderAttention,
    DecoderConfig,
    DecoderForCausalLM,
    DecoderModel,
    FeedForward,
)


class GPTNeoXConfig(DecoderConfig):
    """A GPT-NeoX ``config.json``: transformers 5.23's ``GPTNeoXConfig`` keys and defaults.

    The hub's ``rotary_emb_base`` and ``rotary_pct`` are read into ``rope_parameters`` and not
    written back (as transformers 5 does); every head has its own key and value.

    Example:
        >>> from js.models.gpt_neox import GPTNeoXConfig
        >>> GPTNeoXConfig(rotary_pct=0.5, rotary_emb_base=1000).rope_parameters
        {'rope_theta': 1000, 'partial_rotary_factor': 0.5, 'rope_type': 'default'}
    """

    model_type: ClassVar[str] = "gpt_neox"
    family: ClassVar[str] = "GPTNeoX"
    attribute_map: ClassVar[dict[str, str]] = {"num_key_value_heads": "num_attention_heads"}
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 50432,
        "hidden_size": 6144,
        "num_hidden_layers": 44,
        "num_attention_heads": 64,
        "intermediate_size": 24576,
        "hidden_act": "gelu",
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
        "classifier_dropout": 0.1,
        "max_position_embeddings": 2048,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-5,
        "use_cache": True,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "pad_token_id": None,
        "tie_word_embeddings": False,
        "use_parallel_residual": True,
        "rope_parameters": None,
        "attention_bias": True,
        "is_decoder": False,
    }

    def __init__(self, **kwargs: Any):
        # transformers: rope_parameters (or rope_scaling) first, then the hub's own keys
        rope = dict(kwargs.pop("rope_scaling", None) or kwargs.get("rope_parameters") or {})
        rope.setdefault("rope_theta", kwargs.pop("rotary_emb_base", 10000.0))
        rope.setdefault("partial_rotary_factor", kwargs.pop("rotary_pct", 0.25))
        super().__init__(**{**kwargs, "rope_parameters": rope})

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """The attention's projections have a bias with ``attention_bias``; the MLP's always."""
        return self.attention_bias, self.attention_bias, True

    def make_norm(self, size: int) -> Module:
        """``LayerNorm`` (with a bias) and ``layer_norm_eps``."""
        return nn.LayerNorm(size, eps=self.layer_norm_eps)


class GPTNeoXAttention(DecoderAttention):
    """The skeleton's attention with the fused ``query_key_value`` and the output ``dense``."""

    def init_projections(self, config: DecoderConfig, rngs: Rngs) -> None:
        bias, hidden = config.projection_biases()[0], config.hidden_size
        self.query_key_value = nn.Linear(hidden, 3 * hidden, bias=bias, rngs=rngs)
        self.dense = nn.Linear(hidden, hidden, bias=bias, rngs=rngs)

    def project(self, hidden: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        B, L, _ = hidden.shape  # per head: [query | key | value], head_dim each
        qkv = self.query_key_value(hidden).reshape(B, L, self.num_heads, 3, self.head_dim)
        q, k, v = (qkv[:, :, :, i].reshape(B, L, -1) for i in range(3))
        return q, k, v

    def output(self, attended: jax.Array) -> jax.Array:
        return self.dense(attended)


class GPTNeoXMLP(FeedForward):
    """``dense_4h_to_h(act(dense_h_to_4h(x)))`` with ``hidden_act``."""

    in_name: ClassVar[str] = "dense_h_to_4h"
    out_name: ClassVar[str] = "dense_4h_to_h"


class GPTNeoXLayer(Module):
    """A block with ``attention`` after ``input_layernorm`` and ``mlp`` after
    ``post_attention_layernorm``, parallel or sequential (``use_parallel_residual``)."""

    def __init__(self, config: GPTNeoXConfig, layer_idx: int, *, rngs: Rngs):
        super().__init__()
        self.use_parallel_residual = bool(config.use_parallel_residual)
        self.input_layernorm = config.make_norm(config.hidden_size)
        self.post_attention_layernorm = config.make_norm(config.hidden_size)
        self.post_attention_dropout = nn.Dropout(config.hidden_dropout)
        self.post_mlp_dropout = nn.Dropout(config.hidden_dropout)
        self.attention = GPTNeoXAttention(config, layer_idx, rngs=rngs)
        self.mlp = GPTNeoXMLP(config, rngs=rngs)

    def forward(
        self,
        hidden_states: jax.Array,
        mask: jax.Array,
        rope: tuple[jax.Array, jax.Array] | None,
        *,
        cache: KVCache | None = None,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        attended = self.attention(self.input_layernorm(hidden_states), mask, rope, cache)
        attended = self.post_attention_dropout(attended, rngs=rngs)
        if self.use_parallel_residual:
            fed = self.mlp(self.post_attention_layernorm(hidden_states))
            return self.post_mlp_dropout(fed, rngs=rngs) + attended + hidden_states
        attended = attended + hidden_states
        fed = self.mlp(self.post_attention_layernorm(attended))
        return self.post_mlp_dropout(fed, rngs=rngs) + attended


class GPTNeoXPreTrainedModel(PreTrainedModel):
    """What every GPT-NeoX class shares: config class, prefix, file names."""

    config_class: ClassVar[type[PretrainedConfig]] = GPTNeoXConfig
    base_model_prefix: ClassVar[str] = "gpt_neox"
    # transformers 5.23's module name of the head (its files say embed_out)
    key_mapping: ClassVar[dict[str, str]] = {r"^lm_head\.": "embed_out."}
    # buffers of older files, computed here (transformers' _keys_to_ignore_on_load_unexpected)
    ignore_on_load: ClassVar[tuple[str, ...]] = (
        r"attention\.bias",
        r"attention\.masked_bias",
        r"rotary_emb\.inv_freq",
    )


class GPTNeoXModel(GPTNeoXPreTrainedModel, DecoderModel):
    """The GPT-NeoX decoder without a head: token ids -> last hidden state ``[B, L, hidden]``
    (see ``DecoderModel.forward``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.gpt_neox import GPTNeoXConfig, GPTNeoXModel
        >>> config = GPTNeoXConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2)
        >>> GPTNeoXModel(config, rngs=js.Rngs(params=0))(jnp.array([[1, 2, 3]])).shape
        (1, 3, 16)
    """

    layer_class: ClassVar[type[Module]] = GPTNeoXLayer
    embed_name: ClassVar[str] = "embed_in"
    norm_name: ClassVar[str] = "final_layer_norm"

    def build(self, config: Any, rngs: Rngs) -> None:
        super().build(config, rngs)
        self.embedding.padding_idx = None  # transformers' embed_in has no padding row
        self.emb_dropout = nn.Dropout(config.hidden_dropout)

    def embed_positions(
        self,
        hidden: jax.Array,
        position_ids: jax.Array,
        added: jax.Array | None,
        *,
        rngs: Rngs | None,
    ) -> jax.Array:
        """``emb_dropout`` over the embeddings (no learned positions)."""
        hidden = super().embed_positions(hidden, position_ids, added, rngs=rngs)
        return self.emb_dropout(hidden, rngs=rngs)


class GPTNeoXForCausalLM(GPTNeoXPreTrainedModel, DecoderForCausalLM):
    """``GPTNeoXModel`` and the head ``embed_out`` projecting to logits ``[B, L, vocab]``
    (``gpt_neox.embed_in.weight`` itself with ``tie_word_embeddings``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.gpt_neox import GPTNeoXConfig, GPTNeoXForCausalLM
        >>> config = GPTNeoXConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2)
        >>> GPTNeoXForCausalLM(config, rngs=js.Rngs(params=0))(jnp.array([[1, 2, 3]])).shape
        (1, 3, 32)
    """

    base_model_class: ClassVar[type[DecoderModel]] = GPTNeoXModel
    head_name: ClassVar[str] = "embed_out"


ARCHITECTURES = architectures(GPTNeoXForCausalLM, GPTNeoXModel)
DEFAULT_ARCHITECTURE = "GPTNeoXForCausalLM"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "GPTNeoXConfig",
    "GPTNeoXForCausalLM",
    "GPTNeoXModel",
]
