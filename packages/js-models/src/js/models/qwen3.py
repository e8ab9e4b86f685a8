"""Qwen3: Qwen2's decoder with an RMSNorm over each head's queries and keys (before rotary),
``attention_bias`` on q, k, v and o, and sliding-window layers as Qwen2 has them
(``use_sliding_window``: layers from ``max_window_layers`` on, or as ``layer_types`` says), as
in transformers 5.23. Module names are transformers' (``model.layers.N.self_attn.q_norm``).
"""

from __future__ import annotations

from ._base import architectures
from ._decoder import DecoderConfig, decoder_classes
from .llama import Qwen2Config

__all__ = ["ARCHITECTURES", "Qwen3Config", "Qwen3ForCausalLM", "Qwen3Model"]


class Qwen3Config(Qwen2Config):
    """A Qwen3 ``config.json`` (transformers 5.23's ``Qwen3Config`` keys and defaults).

    ``head_dim`` defaults to 128 (not ``hidden_size // num_attention_heads``);
    ``sliding_window`` is None unless ``use_sliding_window``.

    Example:
        >>> from js.models.qwen3 import Qwen3Config
        >>> config = Qwen3Config(num_hidden_layers=2, use_sliding_window=True,
        ...     sliding_window=3, max_window_layers=1)
        >>> config.head_dim, config.layer_types
        (128, ['full_attention', 'sliding_attention'])
    """

    attention_bias: bool

    model_type = "qwen3"

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """Qwen3: ``attention_bias`` on q, k, v and o (Llama's rule), no MLP bias."""
        return DecoderConfig.projection_biases(self)

    def qk_norm(self) -> str | None:
        """An RMSNorm over each head's ``head_dim`` features of the queries and keys."""
        return "head"


Qwen3Model, Qwen3ForCausalLM = decoder_classes(Qwen3Config)

ARCHITECTURES = architectures(Qwen3ForCausalLM, Qwen3Model)
