"""The Vision Transformer (Dosovitskiy et al., 2020) as transformers 5.23 builds it:
``ViTModel`` and ``ViTForImageClassification``, loading Hugging Face ``model_type: "vit"``
folders.

Module names are those of the FILES: transformers 5 renamed ViT's modules
(``layers.N.attention.q_proj``, ``mlp.fc1``) but still writes, and its hub files hold, the
older names (``encoder.layer.N.attention.attention.query``, ``intermediate.dense``), converting
on load and back on save. js names the modules as the files do, so a file loads and saves
without renaming; ``key_mapping`` maps transformers 5's module names to them, for a file
written from a model's ``state_dict()`` directly.

The blocks are the encoder skeleton's (``_encoder.py``, BERT's) in its pre-norm arrangement;
this file holds ViT's config, patch embeddings and classification head; images go in through
``_vision.py`` (shared with the other vision towers), which also resizes the positions for images
of another size (``interpolate_pos_encoding``). Masked-image modelling is not ported.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import jax

from js import Parameter, Rngs, nn

from ._base import architectures
from ._encoder import EncoderConfig, EncoderModel
from ._vision import (
    VisionPreTrainedModel,
    pair,
    patch_grid,
    patchify,
    prepend,
    resize_positions,
)

__all__ = [
    "ARCHITECTURES",
    "ViTConfig",
    "ViTForImageClassification",
    "ViTModel",
]


class ViTConfig(EncoderConfig):
    """A ViT ``config.json``: transformers' ``ViTConfig`` keys and defaults (ViT-B/16, 224):
    BERT-base's encoder without dropout, pre-norm, its self-attention named ``attention``.

    ``pooler_output_size`` None means ``hidden_size``, as in transformers.

    Example:
        >>> config = ViTConfig(hidden_size=32, image_size=32, patch_size=8, num_labels=5)
        >>> config.num_labels, config.pooler_act
        (5, 'tanh')
    """

    model_type = "vit"
    pre_norm = True
    self_attention_name = "attention"


class ViTPatchEmbeddings(nn.Module):
    """Non-overlapping patches, each projected to ``hidden_size`` by a strided convolution.

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> ``[B, (H / P) * (W / P), hidden]``.
    """

    def __init__(self, config: ViTConfig, *, rngs: Rngs):
        super().__init__()
        self.image_size = pair(config.owner(), "image_size", config.image_size)
        self.patch_size = pair(config.owner(), "patch_size", config.patch_size)
        self.grid = patch_grid(self.image_size, self.patch_size)  # (rows, columns)
        self.num_patches = self.grid[0] * self.grid[1]
        self.num_channels = config.num_channels
        self.projection = nn.Conv2d(
            config.num_channels,
            config.hidden_size,
            self.patch_size,
            stride=self.patch_size,
            rngs=rngs,
        )

    def forward(self, pixel_values: jax.Array) -> jax.Array:
        return patchify(self.projection, pixel_values)  # [B, patches, hidden]


class ViTEmbeddings(nn.Module):
    """The [CLS] token and the patch embeddings, plus learnt position embeddings (resized to
    the patch grid of images of another size; ``antialias`` as PyTorch's, DINOv2 with registers).

    Weights:
        ``cls_token`` ``[1, 1, hidden]``, ``position_embeddings`` ``[1, patches + 1, hidden]``,
        both ``N(0, initializer_range)``.
    """

    antialias: ClassVar[bool] = False

    def __init__(self, config: ViTConfig, *, rngs: Rngs):
        super().__init__()
        D, std = config.hidden_size, config.initializer_range
        self.cls_token = Parameter(jax.random.normal(rngs.next("params"), (1, 1, D)) * std)
        self.patch_embeddings = ViTPatchEmbeddings(config, rngs=rngs)
        positions = self.patch_embeddings.num_patches + 1
        key = rngs.next("params")
        self.position_embeddings = Parameter(jax.random.normal(key, (1, positions, D)) * std)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, pixel_values: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        embeddings = self.patch_embeddings(pixel_values)  # [B, patches, hidden]
        embeddings = prepend(self.cls_token.value, embeddings)  # [B, patches + 1, hidden]
        table, patches = self.position_embeddings.value, self.patch_embeddings
        grid = patch_grid(pixel_values.shape[2:], patches.patch_size)  # the images' own
        positions = resize_positions(table, patches.grid, grid, leading=1, antialias=self.antialias)
        return self.dropout(embeddings + positions, rngs=rngs)


# transformers 5's ViT module names (its WeightRenaming for "ViTModel", reversed) -> the
# files' names, which are js's module names. One rule per name, each leaving a key no other
# rule matches, so the result is the same whether every rule or only the first applies.
_NEW_NAMES = {
    "attention.q_proj": "attention.attention.query",
    "attention.k_proj": "attention.attention.key",
    "attention.v_proj": "attention.attention.value",
    "attention.o_proj": "attention.output.dense",
    "mlp.fc1": "intermediate.dense",
    "mlp.fc2": "output.dense",
    "layernorm_before": "layernorm_before",
    "layernorm_after": "layernorm_after",
}


class ViTPreTrainedModel(VisionPreTrainedModel):
    """What every ViT model shares: its config class, prefix and file-name rules (``forward``:
    ``VisionPreTrainedModel``'s, images in; each model's ``outputs`` out)."""

    config: ViTConfig
    config_class = ViTConfig
    base_model_prefix = "vit"
    key_mapping = {
        rf"layers\.(\d+)\.{re.escape(new)}": rf"encoder.layer.\1.{old}"
        for new, old in _NEW_NAMES.items()
    }
    adapter_key_mapping: ClassVar[dict[str, str]] = {
        rf"encoder\.layer\.(\d+)\.{re.escape(old)}$": rf"layers.\1.{new}"
        for new, old in _NEW_NAMES.items()
    }


class ViTModel(EncoderModel, ViTPreTrainedModel):
    """The ViT encoder: patch embeddings, [CLS] token and positions, ``num_hidden_layers``
    pre-LayerNorm blocks, the final ``layernorm`` and, with ``add_pooling_layer``, ``pooler``
    (``pooler_act(dense(h[:, 0]))``, to ``pooler_output_size``).

    Args:
        config: a ``ViTConfig``.
        add_pooling_layer: build ``pooler`` (transformers' default True).
        rngs: ``js.Rngs`` with a ``params`` stream.

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> ``(last_hidden_state [B, N + 1, hidden],
        pooler_output [B, pooler_output_size] or None)``, ``N`` patches.

    Example:
        >>> import jax.numpy as jnp, js
        >>> config = ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        ...                    intermediate_size=16, image_size=8, patch_size=4)
        >>> model = ViTModel(config, rngs=js.Rngs(params=0)).eval()
        >>> hidden, pooled = model(jnp.ones((2, 3, 8, 8)))
        >>> hidden.shape, pooled.shape
        ((2, 5, 8), (2, 8))
    """

    embeddings_class = ViTEmbeddings
    final_norm_name = "layernorm"


class ViTForImageClassification(ViTPreTrainedModel):
    """ViT (without pooler) and a linear ``classifier`` on the final [CLS] state.

    Args:
        config: a ``ViTConfig``; ``num_labels`` from ``id2label`` (else ``num_labels``, else
            2); ``num_labels=0`` makes ``classifier`` the identity, as in transformers.
        rngs: ``js.Rngs`` with a ``params`` stream.

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> logits ``[B, num_labels]``.

    Example:
        >>> import jax.numpy as jnp, js
        >>> config = ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        ...                    intermediate_size=16, image_size=8, patch_size=4, num_labels=3)
        >>> model = ViTForImageClassification(config, rngs=js.Rngs(params=0)).eval()
        >>> model(jnp.ones((2, 3, 8, 8))).shape
        (2, 3)
    """

    def __init__(self, config: ViTConfig, *, rngs: Rngs):
        super().__init__(config)
        n = config.num_labels
        self.vit = ViTModel(config, add_pooling_layer=False, rngs=rngs)
        self.classifier = nn.Linear(config.hidden_size, n, rngs=rngs) if n > 0 else nn.Identity()

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The logits ``[B, num_labels]`` of the final [CLS] state."""
        return self.classifier(hidden[:, 0])


ARCHITECTURES = architectures(ViTModel, ViTForImageClassification)
