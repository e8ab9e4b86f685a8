"""BART (transformers' ``BartModel`` and ``BartForConditionalGeneration``, model_type ``bart``)
with transformers 5.23's module and state-dict names.

``model.shared`` embeds the tokens of both stacks (``encoder.embed_tokens`` and
``decoder.embed_tokens`` are tied to it, as ``lm_head`` is, with ``tie_word_embeddings``; times
``sqrt(d_model)`` with ``scale_embedding``); each stack adds learned positions
(``embed_positions``, BART's offset of 2 rows) and normalises the sum
(``layernorm_embedding``). The blocks are Whisper's with BART's post-LN placement and a biased
``k_proj``; there is no final norm. ``lm_head``'s logits get the ``final_logits_bias`` buffer.
``generate`` runs _seq2seq's loop from ``decoder_start_token_id`` (2, ``</s>``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from js import Buffer, Module, Rngs, nn
from js.nn.attention import padding_mask

from ._base import PretrainedConfig, PreTrainedModel, architectures
from ._hf import check_tokens
from ._seq2seq import Seq2SeqCache
from .whisper import (
    DecoderStack,
    Seq2SeqLMHead,
    Seq2SeqModel,
    WhisperAttention,
    WhisperDecoderLayer,
    WhisperEncoderLayer,
)

__all__ = ["BartConfig", "BartForConditionalGeneration", "BartModel"]


class BartConfig(PretrainedConfig):
    """BART's ``config.json`` (transformers' keys and defaults: bart-large's)."""

    model_type = "bart"
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }


class BartAttention(WhisperAttention):
    """Whisper's attention with a biased ``k_proj``."""

    key_bias = True


class BartEncoderLayer(WhisperEncoderLayer):
    """Post-LN block: ``self_attn_layer_norm(x + self_attn(x))``, then ``final_layer_norm(x +
    fc2(act(fc1(x))))``."""

    attention_class = BartAttention
    pre_norm = False


class BartDecoderLayer(BartEncoderLayer, WhisperDecoderLayer):
    """Post-LN block: causal ``self_attn``, ``encoder_attn`` over the encoder's output, then the
    feed-forward block, each followed by its norm."""


class BartLearnedPositionalEmbedding(nn.Embedding):
    """Learned positions, row ``position + 2`` (BART's offset) of ``max_positions + 2``."""

    offset = 2

    def __init__(self, max_positions: int, dim: int, *, rngs: Rngs):
        super().__init__(max_positions + self.offset, dim, rngs=rngs)

    def forward(self, positions: jax.Array) -> jax.Array:
        return super().forward(positions + self.offset)


class BartStack(Module):
    """What both stacks share: ``embed_tokens`` (tied to ``shared`` with
    ``tie_word_embeddings``), ``embed_positions``, ``layernorm_embedding`` and ``layers``."""

    def __init__(self, config: BartConfig, layers: Sequence[Module], rngs: Rngs):
        super().__init__()
        D = config.d_model
        self.embed_tokens = nn.Embedding(config.vocab_size, D, rngs=rngs)
        self.embed_scale = math.sqrt(D) if config.scale_embedding else 1.0
        self.embed_positions = BartLearnedPositionalEmbedding(
            config.max_position_embeddings, D, rngs=rngs
        )
        self.layernorm_embedding = nn.LayerNorm(D)
        self.layers = nn.ModuleList(layers)

    def embed(self, ids: jax.Array, positions: jax.Array) -> jax.Array:
        """``layernorm_embedding(embed_tokens(ids) * embed_scale + embed_positions(positions))``."""
        hidden = self.embed_tokens(ids) * self.embed_scale + self.embed_positions(positions)
        return self.layernorm_embedding(hidden)


def _source_mask(attention_mask: Any) -> jax.Array | None:
    """``[B, 1, 1, S]`` bool from the source's ``attention_mask`` ``[B, S]`` (None: none)."""
    return None if attention_mask is None else padding_mask(jnp.asarray(attention_mask) != 0)


class BartEncoder(BartStack):
    """``input_ids`` ``[B, S]`` (and ``attention_mask``) -> ``[B, S, d_model]``; positions
    count from the first column whatever the padding, as transformers'."""

    def __init__(self, config: BartConfig, *, rngs: Rngs):
        heads, ffn = config.encoder_attention_heads, config.encoder_ffn_dim
        layers = [
            BartEncoderLayer(config, heads, ffn, rngs=rngs) for _ in range(config.encoder_layers)
        ]
        super().__init__(config, layers, rngs)

    def forward(self, input_ids: Any, attention_mask: Any = None) -> jax.Array:
        ids, _ = check_tokens("BartModel", input_ids, None)
        assert ids is not None
        positions = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
        hidden, mask = self.embed(ids, positions), _source_mask(attention_mask)
        for layer in self.layers:
            hidden = layer(hidden, mask)
        return hidden


class BartDecoder(BartStack, DecoderStack):
    """The decoder (``DecoderStack.forward``), attending to the source's real tokens."""

    owner = "BartModel"

    def __init__(self, config: BartConfig, *, rngs: Rngs):
        layers = [BartDecoderLayer(config, rngs=rngs) for _ in range(config.decoder_layers)]
        super().__init__(config, layers, rngs)

    def cross_mask(self, encoder_attention_mask: Any, cache: Any) -> jax.Array | None:
        """The source's padding ``[B, 1, 1, S]`` (the generation cache's; None: none)."""
        if isinstance(cache, Seq2SeqCache):
            return cache.encoder_mask()
        return _source_mask(encoder_attention_mask)


def shift_tokens_right(input_ids: Any, pad_token_id: int, start: int) -> np.ndarray:
    """The decoder's input for ``input_ids``: ``start`` then every token but the last (-100,
    a label's ignore index, as ``pad_token_id``), as transformers'."""
    ids = np.asarray(input_ids)
    shifted = np.concatenate([np.full((ids.shape[0], 1), start), ids[:, :-1]], axis=1)
    return np.where(shifted == -100, pad_token_id, shifted)


class BartModel(Seq2SeqModel):
    """BART's ``shared`` embedding, ``encoder`` and ``decoder`` without a head.

    ``forward(input_ids, attention_mask=None, decoder_input_ids=None,
    decoder_attention_mask=None)`` returns ``(last_hidden_state [B, T, d_model],
    encoder_last_hidden_state [B, S, d_model])``; ``decoder_input_ids`` None: ``input_ids``
    shifted right after ``decoder_start_token_id``; ``encoder_outputs=`` skips the encoder.
    """

    config_class = BartConfig
    encoder_class, decoder_class = BartEncoder, BartDecoder
    encoder: BartEncoder
    decoder: BartDecoder

    def __init__(self, config: BartConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, rngs=rngs)
        if config.tie_word_embeddings:  # transformers 5 unties every embedding otherwise
            self.encoder.embed_tokens.weight = self.shared.weight
            self.decoder.embed_tokens.weight = self.shared.weight

    def forward(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        decoder_input_ids: Any = None,
        decoder_attention_mask: Any = None,
        *,
        encoder_outputs: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        if decoder_input_ids is None:
            if input_ids is None:
                raise ValueError(
                    "BartModel: give decoder_input_ids, or input_ids to shift right. Fix: "
                    "model(input_ids, attention_mask, decoder_input_ids)"
                )
            config = self.config
            start = config.decoder_start_token_id
            decoder_input_ids = shift_tokens_right(input_ids, config.pad_token_id, start)
        encoded = (
            self.encoder(input_ids, attention_mask) if encoder_outputs is None else encoder_outputs
        )
        hidden = self.decoder(decoder_input_ids, decoder_attention_mask, encoded, attention_mask)
        return hidden, encoded


class BartForConditionalGeneration(Seq2SeqLMHead, PreTrainedModel):
    """``BartModel``, ``lm_head`` (tied to ``model.shared``) and ``final_logits_bias``:
    ``forward`` returns the logits ``[B, T, vocab_size]`` (arguments as ``BartModel.forward``);
    ``generate(input_ids, attention_mask=...)`` as transformers' (greedy, sampled or beam
    search; the config's ``forced_bos_token_id``/``forced_eos_token_id`` force the first and
    last new tokens)."""

    base_model_class = BartModel

    lm_head: nn.Linear

    def __init__(self, config: BartConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.final_logits_bias = Buffer(jnp.zeros((1, config.vocab_size)))

    def logits(self, hidden: jax.Array) -> jax.Array:
        """``lm_head(hidden) + final_logits_bias``."""
        return self.lm_head(hidden) + self.final_logits_bias.value.astype(hidden.dtype)


ARCHITECTURES = architectures(BartForConditionalGeneration, BartModel)
