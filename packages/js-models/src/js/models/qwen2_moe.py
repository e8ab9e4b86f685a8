"""Qwen2-MoE: Qwen2's attention (``qkv_bias`` on q, k and v; o without) with a sparse mixture
of experts (``num_experts_per_tok`` of ``num_experts``, renormalised with ``norm_topk_prob``)
plus a ``shared_expert`` every token passes through, scaled by
``sigmoid(shared_expert_gate(x))``, in the layers ``decoder_sparse_step`` and ``mlp_only_layers``
leave sparse (a dense SwiGLU in the others), as in transformers 5.23. With
``use_sliding_window``, ``layer_types`` defaults to sliding layers at even indices below
``max_window_layers``.

Module names are transformers 5's (``mlp.gate``, ``mlp.experts.gate_up_proj``,
``mlp.shared_expert.gate_proj``, ``mlp.shared_expert_gate``); hub files'
``mlp.experts.N.gate_proj``/``up_proj``/``down_proj`` load too (``_moe.ExpertStacks``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ._base import PretrainedConfig, architectures
from ._decoder import DecoderModel
from ._moe import MoeConfig, MoeForCausalLM, MoeModel


class Qwen2MoeConfig(MoeConfig):
    """A Qwen2-MoE ``config.json`` (transformers 5.23's ``Qwen2MoeConfig`` keys and defaults;
    ``sliding_window`` is 0 unless ``use_sliding_window``, as there).

    Example:
        >>> from js.models.qwen2_moe import Qwen2MoeConfig
        >>> config = Qwen2MoeConfig(num_hidden_layers=3, use_sliding_window=True, sliding_window=4)
        >>> config.layer_types, config.shared_expert_size()
        (['sliding_attention', 'full_attention', 'sliding_attention'], 5632)
    """

    model_type: ClassVar[str] = "qwen2_moe"
    family: ClassVar[str] = "Qwen2Moe"
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "use_cache": True,
        "tie_word_embeddings": False,
        "rope_parameters": None,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
        "attention_dropout": 0.0,
        "decoder_sparse_step": 1,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts_per_tok": 4,
        "num_experts": 60,
        "norm_topk_prob": False,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "mlp_only_layers": None,
        "qkv_bias": True,
        "layer_types": None,
        "pad_token_id": None,
        "bos_token_id": None,
        "eos_token_id": None,
    }

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if self.mlp_only_layers is None:
            self.mlp_only_layers = []
        if not self.use_sliding_window:
            self.sliding_window = 0
        if self.layer_types is None:
            self.layer_types = [
                "sliding_attention"
                if (i + 1) % 2 and i < self.max_window_layers and self.use_sliding_window
                else "full_attention"
                for i in range(self.num_hidden_layers)
            ]

    def projection_biases(self) -> tuple[bool, bool, bool]:
        """``qkv_bias`` on q, k and v; none on o and the MLPs."""
        return bool(self.qkv_bias), False, False

    def shared_expert_size(self) -> int | None:
        """The shared expert's inner size."""
        return self.shared_expert_intermediate_size


class Qwen2MoeModel(MoeModel):
    """The Qwen2-MoE decoder without a head (see ``DecoderModel.forward``)."""

    config_class: ClassVar[type[PretrainedConfig]] = Qwen2MoeConfig


class Qwen2MoeForCausalLM(MoeForCausalLM):
    """``Qwen2MoeModel`` and the ``lm_head`` (see ``MoeForCausalLM.forward``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.qwen2_moe import Qwen2MoeConfig, Qwen2MoeForCausalLM
        >>> config = Qwen2MoeConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1,
        ...     num_attention_heads=4, num_key_value_heads=2, num_experts=4,
        ...     num_experts_per_tok=2, moe_intermediate_size=8, shared_expert_intermediate_size=8)
        >>> model = Qwen2MoeForCausalLM(config, rngs=js.Rngs(params=0))
        >>> model(jnp.array([[1, 2]])).shape
        (1, 2, 32)
        >>> model.model.layers[0].mlp.shared_expert_gate.weight.shape
        (1, 16)
    """

    config_class: ClassVar[type[PretrainedConfig]] = Qwen2MoeConfig
    base_model_class: ClassVar[type[DecoderModel]] = Qwen2MoeModel


ARCHITECTURES = architectures(Qwen2MoeForCausalLM, Qwen2MoeModel)
DEFAULT_ARCHITECTURE = "Qwen2MoeForCausalLM"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "Qwen2MoeConfig",
    "Qwen2MoeForCausalLM",
    "Qwen2MoeModel",
]
