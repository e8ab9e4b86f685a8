"""OLMo 2 (transformers 5.23): Llama's decoder with blocks that norm their outputs, not their
inputs, and an RMSNorm over the whole query and key projections (all heads together) before
rotary. ``attention_bias`` puts a bias on q, k, v and o; the MLP has none.
"""

from __future__ import annotations

from ._base import architectures
from ._decoder import DecoderConfig, DecoderLayer, decoder_classes

__all__ = [
    "ARCHITECTURES",
    "Olmo2Config",
    "Olmo2DecoderLayer",
    "Olmo2ForCausalLM",
    "Olmo2Model",
]


class Olmo2Config(DecoderConfig):
    """An OLMo 2 ``config.json`` (transformers 5.23's ``Olmo2Config`` keys and defaults);
    ``attention_bias`` on q, k, v and o (Llama's rule), no MLP bias."""

    model_type = "olmo2"

    def qk_norm(self) -> str | None:
        """An RMSNorm over the whole query (and key) projection, all heads together."""
        return "projection"


class Olmo2DecoderLayer(DecoderLayer):
    """Post-norm block: ``x + post_attention_layernorm(self_attn(x))``, then
    ``x + post_feedforward_layernorm(mlp(x))`` (no ``input_layernorm``)."""

    norms = "post"


Olmo2Model, Olmo2ForCausalLM = decoder_classes(Olmo2Config, layer_class=Olmo2DecoderLayer)

ARCHITECTURES = architectures(Olmo2ForCausalLM, Olmo2Model)
