"""Mixtral: Mistral's decoder with a sparse mixture of experts in every layer (softmax router,
``num_experts_per_tok`` of ``num_local_experts`` experts, their weights renormalised), as in
transformers 5.23. Every layer attends within ``sliding_window`` when it is set.

Module names are transformers 5's (``model.layers.N.mlp.gate``, ``mlp.experts.gate_up_proj``);
hub files' ``block_sparse_moe.experts.N.w1``/``w3``/``w2`` load too (``_moe.ExpertStacks``).
``router_jitter_noise`` (training only) is not applied.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ._base import PretrainedConfig, architectures
from ._decoder import DecoderModel
from ._moe import MoeConfig, MoeForCausalLM, MoeModel


class MixtralConfig(MoeConfig):
    """A Mixtral ``config.json`` (transformers 5.23's ``MixtralConfig`` keys and defaults;
    ``num_experts`` reads ``num_local_experts``).

    Example:
        >>> from js.models.mixtral import MixtralConfig
        >>> config = MixtralConfig()
        >>> config.num_experts, config.num_experts_per_tok, config.sliding_windows()[0]
        (8, 2, None)
    """

    model_type: ClassVar[str] = "mixtral"
    family: ClassVar[str] = "Mixtral"
    attribute_map: ClassVar[dict[str, str]] = {"num_experts": "num_local_experts"}
    expert_file_names: ClassVar[dict[str, tuple[str, ...]]] = {
        "gate_up_proj": ("w1", "w3"),
        "down_proj": ("w2",),
    }
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": None,
        "hidden_act": "silu",
        "max_position_embeddings": 4096 * 32,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-5,
        "use_cache": True,
        "pad_token_id": None,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "sliding_window": None,
        "attention_dropout": 0.0,
        "num_experts_per_tok": 2,
        "num_local_experts": 8,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "router_jitter_noise": 0.0,
        "rope_parameters": None,
    }

    def __init__(self, **kwargs: Any):
        if "rope_theta" not in kwargs and "rope_theta" not in (kwargs.get("rope_parameters") or {}):
            kwargs["rope_theta"] = 1e6  # transformers' MixtralConfig.default_theta
        super().__init__(**kwargs)

    def expert_size(self) -> int:
        """Mixtral's experts are ``intermediate_size`` wide."""
        return self.intermediate_size

    def normalize_top_k(self) -> bool:
        """Always renormalised."""
        return True

    def sparse_layer(self, layer_idx: int) -> bool:
        """Every layer is sparse."""
        return True

    def sliding_windows(self) -> list[int | None]:
        """``sliding_window`` (or None) for every layer."""
        return [self.sliding_window] * self.num_hidden_layers


class MixtralModel(MoeModel):
    """The Mixtral decoder without a head (see ``DecoderModel.forward``)."""

    config_class: ClassVar[type[PretrainedConfig]] = MixtralConfig
    key_mapping: ClassVar[dict[str, str]] = {r"\.block_sparse_moe\.": ".mlp."}


class MixtralForCausalLM(MoeForCausalLM):
    """``MixtralModel`` and the ``lm_head`` (see ``MoeForCausalLM.forward``).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.models.mixtral import MixtralConfig, MixtralForCausalLM
        >>> config = MixtralConfig(vocab_size=32, hidden_size=16, intermediate_size=8,
        ...     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        ...     num_local_experts=4)
        >>> model = MixtralForCausalLM(config, rngs=js.Rngs(params=0))
        >>> model(jnp.array([[1, 2, 3]])).shape
        (1, 3, 32)
        >>> model.model.layers[0].mlp.experts.gate_up_proj.shape
        (4, 16, 16)
    """

    config_class: ClassVar[type[PretrainedConfig]] = MixtralConfig
    base_model_class: ClassVar[type[DecoderModel]] = MixtralModel
    key_mapping: ClassVar[dict[str, str]] = MixtralModel.key_mapping


ARCHITECTURES = architectures(MixtralForCausalLM, MixtralModel)
DEFAULT_ARCHITECTURE = "MixtralForCausalLM"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "MixtralConfig",
    "MixtralForCausalLM",
    "MixtralModel",
]
