"""Qwen3-MoE: Qwen3's attention (an RMSNorm over each head's queries and keys, before rotary;
``attention_bias`` on q, k, v and o) with a sparse mixture of experts (``num_experts_per_tok``
of ``num_experts``, renormalised with ``norm_topk_prob``) in the layers ``decoder_sparse_step``
and ``mlp_only_layers`` leave sparse, a dense SwiGLU in the others, as in transformers 5.23.
Every layer attends within ``sliding_window`` when ``use_sliding_window`` is set.

Module names are transformers 5's (``mlp.gate``, ``mlp.experts.gate_up_proj``); hub files'
``mlp.experts.N.gate_proj``/``up_proj``/``down_proj`` load too (``_moe.ExpertStacks``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ._base import PretrainedConfig, architectures
from ._decoder import DecoderModel
from ._moe import MoeConfig, MoeForCausalLM, MoeModel


class Qwen3MoeConfig(MoeConfig):
    """A Qwen3-MoE ``config.json`` (transformers 5.23's ``Qwen3MoeConfig`` keys and defaults:
    ``num_experts`` is stored as ``num_local_experts``; ``head_dim``, when the file has it,
    else ``hidden_size // num_attention_heads``).

    Example:
        >>> from js.models.qwen3_moe import Qwen3MoeConfig
        >>> config = Qwen3MoeConfig(num_experts=16, mlp_only_layers=[0], num_hidden_layers=2)
        >>> config.num_local_experts, config.sparse_layer(0), config.sparse_layer(1)
        (16, False, True)
    """

    model_type: ClassVar[str] = "qwen3_moe"
    family: ClassVar[str] = "Qwen3Moe"
    attribute_map: ClassVar[dict[str, str]] = {"num_experts": "num_local_experts"}
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "use_cache": True,
        "tie_word_embeddings": False,
        "rope_parameters": None,
        "attention_bias": False,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "attention_dropout": 0.0,
        "decoder_sparse_step": 1,
        "moe_intermediate_size": 768,
        "num_experts_per_tok": 8,
        "num_local_experts": 128,
        "norm_topk_prob": False,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "mlp_only_layers": None,
        "pad_token_id": None,
        "bos_token_id": None,
        "eos_token_id": None,
    }

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if not self.use_sliding_window:
            self.sliding_window = None
        if self.mlp_only_layers is None:
            self.mlp_only_layers = []

    def qk_norm(self) -> str | None:
        """An RMSNorm over each head's ``head_dim`` features of the queries and keys."""
        return "head"

    def sliding_windows(self) -> list[int | None]:
        """``sliding_window`` (None unless ``use_sliding_window``) for every layer."""
        return [self.sliding_window] * self.num_hidden_layers


class Qwen3MoeModel(MoeModel):
    """The Qwen3-MoE decoder without a head (see ``DecoderModel.forward``)."""

    config_class: ClassVar[type[PretrainedConfig]] = Qwen3MoeConfig


class Qwen3MoeForCausalLM(MoeForCausalLM):
    """``Qwen3MoeModel`` and the ``lm_head`` (see ``MoeForCausalLM.forward``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.qwen3_moe import Qwen3MoeConfig, Qwen3MoeForCausalLM
        >>> config = Qwen3MoeConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1,
        ...     num_attention_heads=4, num_key_value_heads=2, num_experts=4,
        ...     num_experts_per_tok=2, moe_intermediate_size=8)
        >>> Qwen3MoeForCausalLM(config, rngs=js.Rngs(params=0))(jnp.array([[1, 2]])).shape
        (1, 2, 32)
    """

    config_class: ClassVar[type[PretrainedConfig]] = Qwen3MoeConfig
    base_model_class: ClassVar[type[DecoderModel]] = Qwen3MoeModel


ARCHITECTURES = architectures(Qwen3MoeForCausalLM, Qwen3MoeModel)
DEFAULT_ARCHITECTURE = "Qwen3MoeForCausalLM"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "Qwen3MoeConfig",
    "Qwen3MoeForCausalLM",
    "Qwen3MoeModel",
]
