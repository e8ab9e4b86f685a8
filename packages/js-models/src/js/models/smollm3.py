"""SmolLM3: Llama's blocks where some layers have no rotary positions (NoPE), as in
transformers 5.23. ``no_rope_layers`` has one entry per layer (1: rotary, 0: none); without it,
every ``no_rope_layer_interval``-th layer (the 4th, 8th, ...) has none. Layers attend within
``sliding_window`` where ``layer_types`` says "sliding_attention" (by default, with
``use_sliding_window``, the NoPE layers). The rotary base defaults to 2,000,000 and the head
is tied to the embedding unless ``tie_word_embeddings`` is false.
"""

from __future__ import annotations

from typing import Any

from ._base import architectures
from ._decoder import DecoderConfig, decoder_classes

__all__ = [
    "ARCHITECTURES",
    "SmolLM3Config",
    "SmolLM3ForCausalLM",
    "SmolLM3Model",
]


class SmolLM3Config(DecoderConfig):
    """A SmolLM3 ``config.json`` (transformers 5.23's ``SmolLM3Config`` keys and defaults).

    Example:
        >>> from js.models.smollm3 import SmolLM3Config
        >>> config = SmolLM3Config(num_hidden_layers=4, use_sliding_window=True,
        ...     sliding_window=8)
        >>> config.no_rope_layers, config.layer_ropes(), config.sliding_windows()
        ([1, 1, 1, 0], ['default', 'default', 'default', None], [None, None, None, 8])
        >>> config.rope_parameters
        {'rope_theta': 2000000.0, 'rope_type': 'default'}
    """

    attention_bias: bool
    mlp_bias: bool
    use_sliding_window: bool
    no_rope_layers: list[int]
    no_rope_layer_interval: int

    model_type = "smollm3"

    def __init__(self, **kwargs: Any):
        if kwargs.get("rope_theta") is None:  # SmolLM3's default_theta
            kwargs["rope_theta"] = 2_000_000.0
        super().__init__(**kwargs)
        if self.no_rope_layers is None:
            self.no_rope_layers = [
                int((i + 1) % self.no_rope_layer_interval != 0)
                for i in range(self.num_hidden_layers)
            ]
        if self.layer_types is None:
            slide = self.use_sliding_window and self.sliding_window is not None
            self.layer_types = [
                "sliding_attention" if slide and not rope else "full_attention"
                for rope in self.no_rope_layers[: self.num_hidden_layers]
            ]

    def layer_ropes(self) -> list[str | None]:
        """The default rotary table where ``no_rope_layers`` is 1, none where it is 0."""
        ropes = self.per_layer("no_rope_layers", "1 for rotary, 0 for none")
        return ["default" if rope else None for rope in ropes]


SmolLM3Model, SmolLM3ForCausalLM = decoder_classes(SmolLM3Config)

ARCHITECTURES = architectures(SmolLM3ForCausalLM, SmolLM3Model)
