"""Llama and its close kin (Qwen2, Mistral): decoder-only transformers with RMSNorm, rotary
position embeddings, grouped-query attention and a SwiGLU MLP, as in transformers 5.23.

Module names are transformers' (``model.layers.N.self_attn.q_proj``, ``model.norm``,
``lm_head``), so a Hugging Face folder's weights load without renaming. One set of blocks
serves the three families; their configs say where they differ:

- Llama: ``attention_bias`` (q, k, v and o), ``mlp_bias``; full causal attention.
- Qwen2: q, k and v always have a bias, o never; sliding-window layers only with
  ``use_sliding_window`` (layers from ``max_window_layers`` on, or as ``layer_types`` says).
- Mistral: no biases; every layer attends within ``sliding_window`` when it is set.

The blocks, masks, rotary tables and generation contract are the decoder skeleton's
(``_decoder.py``): Llama is its default arrangement, and this file holds the three configs.
Rotary embeddings follow ``rope_parameters`` (transformers 5's spelling, written back) or the
hub's older ``rope_theta`` + ``rope_scaling`` (``_rope.py``).

Masks follow transformers' ``create_causal_mask``: a 2D ``attention_mask`` [B, L] (nonzero =
a real token) hides padded keys; without one and with ``config.use_cache`` false,
``position_ids`` that restart (packed sequences) keep each sequence to itself. A query row
with no allowed key (a left-padded position) gets a zero attention output, as PyTorch's
``scaled_dot_product_attention`` (transformers' default attention) gives it, so padded
positions match transformers too. Inference only: ``attention_dropout`` is not applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._base import architectures
from ._decoder import DecoderConfig, DecoderForCausalLM, DecoderModel, decoder_classes
from ._rope import SUPPORTED_ROPE_TYPES

__all__ = [
    "ARCHITECTURES",
    "SUPPORTED_ROPE_TYPES",
    "LlamaConfig",
    "LlamaForCausalLM",
    "LlamaModel",
    "MistralConfig",
    "MistralForCausalLM",
    "MistralModel",
    "Qwen2Config",
    "Qwen2ForCausalLM",
    "Qwen2Model",
]

# ---------------------------------------------------------------------------------------------
# Configs


class LlamaConfig(DecoderConfig):
    """A Llama ``config.json``: transformers 5.23's ``LlamaConfig`` keys and defaults.

    ``head_dim`` defaults to ``hidden_size // num_attention_heads`` and
    ``num_key_value_heads`` to ``num_attention_heads``. Rotary settings end up in
    ``rope_parameters`` (``{"rope_type": ..., "rope_theta": ..., ...}``), read from it or from
    the older ``rope_theta`` + ``rope_scaling`` keys, which are not written back (as
    transformers 5 does).

    Example:
        >>> from js.models.llama import LlamaConfig
        >>> config = LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=5e5)
        >>> config.head_dim, config.num_key_value_heads, config.rope_parameters
        (16, 4, {'rope_theta': 500000.0, 'rope_type': 'default'})
    """

    attention_bias: bool
    mlp_bias: bool

    model_type = "llama"

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> LlamaConfig:
        """The config of a ``config.json`` mapping. ``LlamaConfig.from_dict`` returns the
        config class of the file's ``model_type`` (a Qwen2 or Mistral file without
        ``architectures`` reaches the family's default class, ``LlamaForCausalLM``, which then
        builds Qwen2's or Mistral's blocks)."""
        kind = _CONFIG_CLASSES.get(config.get("model_type", ""), cls) if cls is LlamaConfig else cls
        return kind(**dict(config))


class Qwen2Config(LlamaConfig):
    """A Qwen2 ``config.json`` (transformers 5.23's ``Qwen2Config`` keys and defaults).

    ``sliding_window`` is None unless ``use_sliding_window``; ``layer_types`` defaults to
    "sliding_attention" from layer ``max_window_layers`` on when it is set.

    Example:
        >>> from js.models.llama import Qwen2Config
        >>> Qwen2Config(num_hidden_layers=2).layer_types
        ['full_attention', 'full_attention']
    """

    use_sliding_window: bool
    max_window_layers: int

    model_type = "qwen2"

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if not self.use_sliding_window:
            self.sliding_window = None
        if self.layer_types is None:
            self.layer_types = [
                "sliding_attention"
                if self.sliding_window is not None and i >= self.max_window_layers
                else "full_attention"
                for i in range(self.num_hidden_layers)
            ]

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """Qwen2: q, k and v have a bias, o and the MLP none."""
        return True, False, False


class MistralConfig(LlamaConfig):
    """A Mistral ``config.json`` (transformers 5.23's ``MistralConfig`` keys and defaults).

    Every layer attends to the last ``sliding_window`` positions (itself included) when
    ``sliding_window`` is set; None means full causal attention.

    Example:
        >>> from js.models.llama import MistralConfig
        >>> MistralConfig().sliding_window, MistralConfig().num_key_value_heads
        (4096, 8)
    """

    model_type = "mistral"

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """Mistral: no biases."""
        return False, False, False

    def sliding_windows(self) -> list[int | None]:
        """``sliding_window`` (or None) for every layer."""
        return [self.sliding_window] * self.num_hidden_layers


_CONFIG_CLASSES: dict[str, type[LlamaConfig]] = {
    "llama": LlamaConfig,
    "qwen2": Qwen2Config,
    "mistral": MistralConfig,
}


# ---------------------------------------------------------------------------------------------
# Models


class LlamaModel(DecoderModel):
    """The Llama decoder without a head: token ids -> last hidden state ``[B, L, hidden]``
    (the skeleton's ``DecoderModel``; see its ``forward``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.llama import LlamaConfig, LlamaForCausalLM
        >>> config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=4, tie_word_embeddings=True)
        >>> model = LlamaForCausalLM(config, rngs=js.Rngs(params=0))
        >>> model(jnp.array([[1, 2, 3]])).shape, model.model(jnp.array([[1, 2, 3]])).shape
        ((1, 3, 32), (1, 3, 16))
        >>> model.lm_head.weight is model.model.embed_tokens.weight
        True
    """

    config_class = LlamaConfig


class LlamaForCausalLM(DecoderForCausalLM):
    """``LlamaModel`` and the ``lm_head`` projection to next-token logits ``[B, L, vocab]``
    (with ``tie_word_embeddings``, ``lm_head.weight`` is ``model.embed_tokens.weight``: one
    Parameter, written once, as transformers does)."""

    base_model_class = LlamaModel


Qwen2Model, Qwen2ForCausalLM = decoder_classes(Qwen2Config, LlamaModel, LlamaForCausalLM)
MistralModel, MistralForCausalLM = decoder_classes(MistralConfig, LlamaModel, LlamaForCausalLM)

ARCHITECTURES = architectures(
    LlamaForCausalLM, LlamaModel, Qwen2ForCausalLM, Qwen2Model, MistralForCausalLM, MistralModel
)
