"""Mixtral: Mistral's decoder with a sparse mixture of experts in every layer (softmax router,
``num_experts_per_tok`` of ``num_local_experts`` experts, their weights renormalised), as in
transformers 5.23. Every layer attends within ``sliding_window`` when it is set.

Module names are transformers 5's (``model.layers.N.mlp.gate``, ``mlp.experts.gate_up_proj``);
hub files' ``block_sparse_moe.experts.N.w1``/``w3``/``w2`` load too (``_moe.ExpertStacks``).
``router_jitter_noise`` (training only) is not applied.
"""

from __future__ import annotations

from typing import Any

from ._base import architectures
from ._decoder import decoder_classes
from ._moe import MoeConfig, MoeForCausalLM, MoeModel

__all__ = [
    "ARCHITECTURES",
    "MixtralConfig",
    "MixtralForCausalLM",
    "MixtralModel",
]


class MixtralConfig(MoeConfig):
    """A Mixtral ``config.json`` (transformers 5.23's ``MixtralConfig`` keys and defaults;
    ``num_experts`` reads ``num_local_experts``; ``rope_theta`` defaults to 1e6).

    Example:
        >>> from js.models.mixtral import MixtralConfig
        >>> config = MixtralConfig()
        >>> config.num_experts, config.expert_size(), config.rope_parameters["rope_theta"]
        (8, 14336, 1000000.0)
    """

    model_type = "mixtral"
    attribute_map = {"num_experts": "num_local_experts"}
    expert_file_names = {"gate_up_proj": ("w1", "w3"), "down_proj": ("w2",)}

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


MixtralModel, MixtralForCausalLM = decoder_classes(
    MixtralConfig, MoeModel, MoeForCausalLM, key_mapping={r"\.block_sparse_moe\.": ".mlp."}
)

ARCHITECTURES = architectures(MixtralForCausalLM, MixtralModel)
