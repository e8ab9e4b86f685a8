"""Granite (IBM Granite 3): Llama's blocks with four scalar multipliers, as in transformers
5.23: ``embedding_multiplier`` scales the embeddings, ``attention_multiplier`` is the attention
score scale (in place of ``head_dim ** -0.5``), ``residual_multiplier`` scales each block's
update before the residual sum, and the logits are divided by ``logits_scaling``.
``attention_bias`` puts a bias on q, k, v and o, ``mlp_bias`` on the MLP's projections.
"""

from __future__ import annotations

from ._base import architectures
from ._decoder import DecoderConfig, decoder_classes

__all__ = [
    "ARCHITECTURES",
    "GraniteConfig",
    "GraniteForCausalLM",
    "GraniteModel",
]


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

    model_type = "granite"

    def attention_scale(self) -> float:
        """``attention_multiplier`` (transformers' Granite attention's ``scaling``)."""
        return float(self.attention_multiplier)

    def embedding_scale(self) -> float | None:
        """``embedding_multiplier`` (None when it is 1)."""
        scale = self.embedding_multiplier
        return None if scale in (1, 1.0) else float(scale)


GraniteModel, GraniteForCausalLM = decoder_classes(GraniteConfig)

ARCHITECTURES = architectures(GraniteForCausalLM, GraniteModel)
