"""OLMo 2 (transformers 5.23): Llama's decoder with blocks that norm their outputs, not their
inputs, and an RMSNorm over the whole query and key projections (all heads together) before
rotary. ``attention_bias`` puts a bias on q, k, v and o; the MLP has none.
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax

from js import Rngs
from js.nn import KVCache

from ._base import PretrainedConfig, architectures
from ._decoder import DecoderConfig, DecoderForCausalLM, DecoderLayer, DecoderModel


class Olmo2Config(DecoderConfig):
    """An OLMo 2 ``config.json`` (transformers 5.23's ``Olmo2Config`` keys and defaults)."""

    attention_bias: bool

    model_type: ClassVar[str] = "olmo2"
    family: ClassVar[str] = "Olmo2"
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 50304,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "initializer_range": 0.02,
        "use_cache": True,
        "pad_token_id": 1,
        "bos_token_id": None,
        "eos_token_id": 50279,
        "tie_word_embeddings": False,
        "rope_parameters": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rms_norm_eps": 1e-5,
    }

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """``attention_bias`` on q, k, v and o; no MLP bias."""
        bias = bool(self.attention_bias)
        return bias, bias, False

    def qk_norm(self) -> str | None:
        """An RMSNorm over the whole query (and key) projection, all heads together."""
        return "projection"


class Olmo2DecoderLayer(DecoderLayer):
    """Post-norm block: ``x + post_attention_layernorm(self_attn(x))``, then
    ``x + post_feedforward_layernorm(mlp(x))`` (no ``input_layernorm``)."""

    def __init__(self, config: DecoderConfig, layer_idx: int, *, rngs: Rngs):
        super().__init__(config, layer_idx, rngs=rngs)
        del self.input_layernorm
        self.post_feedforward_layernorm = config.make_norm(config.hidden_size)

    def forward(
        self,
        hidden_states: jax.Array,
        mask: jax.Array,
        rope: tuple[jax.Array, jax.Array] | None,
        *,
        cache: KVCache | None = None,
        rngs: Rngs | None = None,
    ) -> jax.Array:
        attended = self.self_attn(hidden_states, mask, rope, cache)
        x = hidden_states + self.post_attention_layernorm(attended)
        return x + self.post_feedforward_layernorm(self.mlp(x))


class Olmo2Model(DecoderModel):
    """The OLMo 2 decoder without a head (see ``DecoderModel.forward``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.olmo2 import Olmo2Config, Olmo2Model
        >>> config = Olmo2Config(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2)
        >>> Olmo2Model(config, rngs=js.Rngs(params=0))(jnp.array([[1, 2, 3]])).shape
        (1, 3, 16)
    """

    config_class: ClassVar[type[PretrainedConfig]] = Olmo2Config
    layer_class: ClassVar[type[DecoderLayer]] = Olmo2DecoderLayer


class Olmo2ForCausalLM(DecoderForCausalLM):
    """``Olmo2Model`` and the ``lm_head`` (tied to the embedding with ``tie_word_embeddings``)."""

    config_class: ClassVar[type[PretrainedConfig]] = Olmo2Config
    base_model_class: ClassVar[type[DecoderModel]] = Olmo2Model


ARCHITECTURES = architectures(Olmo2ForCausalLM, Olmo2Model)
DEFAULT_ARCHITECTURE = "Olmo2ForCausalLM"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "Olmo2Config",
    "Olmo2DecoderLayer",
    "Olmo2ForCausalLM",
    "Olmo2Model",
]
