"""Granite (IBM Granite 3): Llama's blocks with four scalar multipliers, as in transformers
5.23: ``embedding_multiplier`` scales the embeddings, ``attention_multiplier`` is the attention
score scale (in place of ``head_dim ** -0.5``), ``residual_multiplier`` scales each block's
update before the residual sum, and the logits are divided by ``logits_scaling``.
``attention_bias`` puts a bias on q, k, v and o, ``mlp_bias`` on the MLP's projections.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ._base import PretrainedConfig, architectures
from ._decoder import DecoderConfig, DecoderForCausalLM, DecoderModel


class GraniteConfig(DecoderConfig):
    """A Granite ``config.json`` (transformers 5.23's ``GraniteConfig`` keys and defaults).

    The skeleton reads ``residual_multiplier`` (``DecoderLayer``) and ``logits_scaling``
    (``DecoderForCausalLM.logits``); this config's hooks give the other two multipliers.

    Example:
        >>> from js.models.granite import GraniteConfig
        >>> config = GraniteConfig(embedding_multiplier=12.0, attention_multiplier=0.015625)
        >>> config.embedding_scale(), config.attention_scale()
        (12.0, 0.015625)
    """

    attention_bias: bool
    mlp_bias: bool
    embedding_multiplier: float
    logits_scaling: float
    residual_multiplier: float
    attention_multiplier: float

    model_type: ClassVar[str] = "granite"
    family: ClassVar[str] = "Granite"
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "use_cache": True,
        "pad_token_id": None,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "rope_parameters": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "embedding_multiplier": 1.0,
        "logits_scaling": 1.0,
        "residual_multiplier": 1.0,
        "attention_multiplier": 1.0,
    }

    def attention_scale(self) -> float:
        """``attention_multiplier`` (transformers' Granite attention's ``scaling``)."""
        return float(self.attention_multiplier)

    def embedding_scale(self) -> float | None:
        """``embedding_multiplier`` (None when it is 1)."""
        scale = self.embedding_multiplier
        return None if scale in (1, 1.0) else float(scale)


class GraniteModel(DecoderModel):
    """The Granite decoder without a head (see ``DecoderModel.forward``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.granite import GraniteConfig, GraniteModel
        >>> config = GraniteConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=4, residual_multiplier=0.22)
        >>> GraniteModel(config, rngs=js.Rngs(params=0))(jnp.array([[1, 2, 3]])).shape
        (1, 3, 16)
    """

    config_class: ClassVar[type[PretrainedConfig]] = GraniteConfig


class GraniteForCausalLM(DecoderForCausalLM):
    """``GraniteModel`` and the ``lm_head``; the logits are divided by ``logits_scaling``."""

    config_class: ClassVar[type[PretrainedConfig]] = GraniteConfig
    base_model_class: ClassVar[type[DecoderModel]] = GraniteModel


ARCHITECTURES = architectures(GraniteForCausalLM, GraniteModel)
DEFAULT_ARCHITECTURE = "GraniteForCausalLM"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "GraniteConfig",
    "GraniteForCausalLM",
    "GraniteModel",
]
