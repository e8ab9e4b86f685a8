"""Qwen3-MoE: Qwen3's attention (an RMSNorm over each head's queries and keys, before rotary;
``attention_bias`` on q, k, v and o) with a sparse mixture of experts (``num_experts_per_tok``
of ``num_experts``, renormalised with ``norm_topk_prob``) in the layers ``decoder_sparse_step``
and ``mlp_only_layers`` leave sparse, a dense SwiGLU in the others, as in transformers 5.23.
Every layer attends within ``sliding_window`` when ``use_sliding_window`` is set.

Module names are transformers 5's (``mlp.gate``, ``mlp.experts.gate_up_proj``); hub files'
``mlp.experts.N.gate_proj``/``up_proj``/``down_proj`` load too (``_moe.ExpertStacks``).
"""

from __future__ import annotations

from ._base import architectures
from ._decoder import decoder_classes
from ._moe import MoeConfig, MoeForCausalLM, MoeModel
from .qwen3 import Qwen3Config

__all__ = ["ARCHITECTURES", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", "Qwen3MoeModel"]


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

    model_type = "qwen3_moe"
    attribute_map = {"num_experts": "num_local_experts"}

    qk_norm = Qwen3Config.qk_norm  # an RMSNorm over each head's queries and keys


Qwen3MoeModel, Qwen3MoeForCausalLM = decoder_classes(Qwen3MoeConfig, MoeModel, MoeForCausalLM)

ARCHITECTURES = architectures(Qwen3MoeForCausalLM, Qwen3MoeModel)
