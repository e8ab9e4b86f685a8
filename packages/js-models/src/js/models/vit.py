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
this file holds ViT's config, patch embeddings, pixel inputs and classification head.

``interpolate_pos_encoding`` (other image sizes) and masked-image modelling are not ported.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from js import Parameter, Rngs, nn

from ._base import architectures
from ._encoder import EncoderConfig, EncoderModel, EncoderPreTrainedModel


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
    defaults: ClassVar[dict[str, Any]] = {
        **EncoderConfig.defaults,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "image_size": 224,
        "patch_size": 16,
        "num_channels": 3,
        "qkv_bias": True,
        "encoder_stride": 16,
        "pooler_output_size": None,
        "pooler_act": "tanh",
    }


def _pair(owner: str, key: str, value: Any) -> tuple[int, int]:
    """``image_size``/``patch_size``: an int or a pair, as transformers reads them."""
    pair = tuple(value) if isinstance(value, Sequence) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ValueError(
            f"{owner}: {key} must be a positive int or a pair of them, got {value!r}. "
            f"Fix: set {key} in config.json, e.g. 224"
        )
    return pair  # type: ignore[return-value]


class ViTPatchEmbeddings(nn.Module):
    """Non-overlapping patches, each projected to ``hidden_size`` by a strided convolution.

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> ``[B, (H / P) * (W / P), hidden]``.
    """

    def __init__(self, config: ViTConfig, *, rngs: Rngs):
        super().__init__()
        self.image_size = _pair("ViTModel", "image_size", config.image_size)
        self.patch_size = _pair("ViTModel", "patch_size", config.patch_size)
        (h, w), (ph, pw) = self.image_size, self.patch_size
        self.num_patches = (h // ph) * (w // pw)
        self.num_channels = config.num_channels
        self.projection = nn.Conv2d(
            config.num_channels,
            config.hidden_size,
            self.patch_size,
            stride=self.patch_size,
            rngs=rngs,
        )

    def forward(self, pixel_values: jax.Array) -> jax.Array:
        patches = self.projection(pixel_values)  # [B, hidden, H / P, W / P]
        B, D = patches.shape[:2]
        return patches.reshape(B, D, -1).transpose(0, 2, 1)  # [B, patches, hidden]


class ViTEmbeddings(nn.Module):
    """The [CLS] token and the patch embeddings, plus learnt position embeddings.

    Weights:
        ``cls_token`` ``[1, 1, hidden]``, ``position_embeddings`` ``[1, patches + 1, hidden]``,
        both ``N(0, initializer_range)``.
    """

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
        B, _, D = embeddings.shape
        cls = jnp.broadcast_to(self.cls_token.value, (B, 1, D))
        embeddings = jnp.concatenate([cls, embeddings], axis=1)  # [B, patches + 1, hidden]
        return self.dropout(embeddings + self.position_embeddings.value, rngs=rngs)


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


class ViTPreTrainedModel(EncoderPreTrainedModel):
    """What every ViT model shares: its config class, prefix, file-name rules and ``forward``
    (images in; each model's ``outputs`` out)."""

    config: ViTConfig
    config_class = ViTConfig
    base_model_prefix = "vit"
    key_mapping: ClassVar[dict[str, str]] = {
        rf"layers\.(\d+)\.{re.escape(new)}": rf"encoder.layer.\1.{old}"
        for new, old in _NEW_NAMES.items()
    }
    adapter_key_mapping: ClassVar[dict[str, str]] = {
        rf"encoder\.layer\.(\d+)\.{re.escape(old)}$": rf"layers.\1.{new}"
        for new, old in _NEW_NAMES.items()
    }

    def forward(
        self,
        pixel_values: jax.Array,
        interpolate_pos_encoding: bool | None = None,
        *,
        rngs: Rngs | None = None,
    ) -> Any:
        """Encode (``ViTModel``) or classify (``ViTForImageClassification``) a batch of images.

        Args:
            pixel_values: ``[B, C, H, W]`` float images of ``config.image_size`` (normalised
                as the model's image processor does).
            interpolate_pos_encoding: not supported (NotImplementedError when True).
            rngs: a ``dropout`` stream, needed in training mode with dropout only.

        Returns:
            ``ViTModel``: ``(last_hidden_state, pooler_output)``, pooler_output None for a
            model built with ``add_pooling_layer=False``; ``ViTForImageClassification``:
            logits ``[B, num_labels]``.
        """
        pixel_values = _check_pixels(pixel_values, self.config, interpolate_pos_encoding)
        embeddings = self.base_model.embeddings
        dtype = embeddings.patch_embeddings.projection.weight.value.dtype
        hidden = embeddings(pixel_values.astype(dtype), rngs=rngs)  # [B, N + 1, hidden]
        return self.from_embeddings(hidden, None, rngs=rngs)


def _check_pixels(pixel_values: Any, config: ViTConfig, interpolate: bool | None) -> jax.Array:
    """``pixel_values`` as an array ``[B, C, H, W]`` of the configured size, or a clear error."""
    if interpolate:
        raise NotImplementedError(
            "ViTModel: interpolate_pos_encoding=True (images of another size) is not "
            "implemented. Fix: resize the images to config.image_size"
        )
    pixel_values = jnp.asarray(pixel_values)
    C = config.num_channels
    H, W = _pair("ViTModel", "image_size", config.image_size)
    if pixel_values.ndim != 4 or pixel_values.shape[1:] != (C, H, W):
        raise ValueError(
            f"ViTModel: pixel_values must be [batch, {C}, {H}, {W}] (channels first, as in "
            f"transformers), got {list(pixel_values.shape)}. Fix: resize to image_size and "
            "put channels before height and width (x.transpose(0, 3, 1, 2) for NHWC)"
        )
    return pixel_values


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
DEFAULT_ARCHITECTURE = "ViTModel"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "ViTConfig",
    "ViTForImageClassification",
    "ViTModel",
]
