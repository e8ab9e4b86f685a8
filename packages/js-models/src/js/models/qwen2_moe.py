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

from typing import Any

from ._base import architectures
from ._decoder import decoder_classes
from ._moe import MoeConfig, MoeForCausalLM, MoeModel

__all__ = ["ARCHITECTURES", "Qwen2MoeConfig", "Qwen2MoeForCausalLM", "Qwen2MoeModel"]


class Qwen2MoeConfig(MoeConfig):
    """A Qwen2-MoE ``config.json`` (transformers 5.23's ``Qwen2MoeConfig`` keys and defaults;
    ``sliding_window`` is 0 unless ``use_sliding_window``, as there).

    Example:
        >>> from js.models.qwen2_moe import Qwen2MoeConfig
        >>> config = Qwen2MoeConfig(num_hidden_layers=3, use_sliding_window=True, sliding_window=4)
        >>> config.layer_types, config.shared_expert_size()
        (['sliding_attention', 'full_attention', 'sliding_attention'], 5632)
    """

    model_type = "qwen2_moe"
    unused_sliding_window = 0

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
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


Qwen2MoeModel, Qwen2MoeForCausalLM = decoder_classes(Qwen2MoeConfig, MoeModel, MoeForCausalLM)

ARCHITECTURES = architectures(Qwen2MoeForCausalLM, Qwen2MoeModel)
