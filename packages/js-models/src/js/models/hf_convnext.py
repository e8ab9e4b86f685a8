"""transformers' own ConvNeXt (``model_type`` ``"convnext"``, ``modeling_convnext.py`` in
transformers 5.23) in js.nn; timm's ConvNeXt is ``js.models.convnext``.

The network is timm's ConvNeXt with channels-last blocks, so the stages are timm's
``ConvNeXtStage`` modules, and ``key_mapping`` / ``save_key_mapping`` translate the names:
transformers' ``stages.N.downsampling_layer.K`` and ``layers.M.dwconv``, ``layernorm``,
``pwconv1``, ``pwconv2``, ``layer_scale_parameter`` are timm's ``downsample.K`` and
``blocks.M.conv_dw``, ``norm``, ``mlp.fc1``, ``mlp.fc2``, ``gamma``. Around them:
``embeddings.patch_embeddings`` / ``embeddings.layernorm`` (the patch stem), the final
``layernorm`` of the pooled features, and ``classifier``. Eval mode: drop path is not built.
"""

from __future__ import annotations

import re
from typing import ClassVar

import jax
import jax.numpy as jnp

import js
from js import nn

from ._base import PreTrainedModel, architectures
from ._hf import LabelledConfig
from .convnext import ConvNeXtStage, LayerNorm2d
from .hf_resnet import ConvNetForImageClassification, ConvNetModel

__all__ = [
    "ARCHITECTURES",
    "ConvNextConfig",
    "ConvNextForImageClassification",
    "ConvNextModel",
]

# transformers' names in a stage -> timm's (the modules js builds).
_TIMM_NAMES = {
    "downsampling_layer": "downsample",
    "dwconv": "conv_dw",
    "layernorm": "norm",
    "pwconv1": "mlp.fc1",
    "pwconv2": "mlp.fc2",
    "layer_scale_parameter": "gamma",
}


def _stage_names(names: dict[str, str], block: str, other: str) -> dict[str, str]:
    """Regexes renaming a block's ``<block>.M.<name>`` to ``<other>.M.<names[name]>`` and a
    stage's downsampling layer by ``names`` (transformers' renaming rules: one ``\\1`` group,
    the matched part replaced, the rest of the key kept)."""
    rules = {}
    for old, new in names.items():
        if "downsampl" in old:
            rules[rf"\.{old}\."] = f".{new}."
        else:
            rules[rf"{block}\.(\d+)\.{re.escape(old)}"] = rf"{other}.\1.{new}"
    return rules


class ConvNextConfig(LabelledConfig):
    """transformers' ``ConvNextConfig`` keys and defaults (ConvNeXt-T, from
    ``transformers_defaults.json``): ``num_stages`` stages of ``hidden_sizes`` channels and
    ``depths`` blocks after a ``patch_size`` patch stem."""

    model_type: ClassVar[str] = "convnext"
    attribute_map: ClassVar[dict[str, str]] = {"num_hidden_layers": "num_stages"}


class ConvNextEmbeddings(nn.Module):
    """The patch stem: ``patch_embeddings`` (``patch_size`` conv, stride ``patch_size``) and
    ``layernorm`` over the channels (eps 1e-6)."""

    def __init__(self, config: ConvNextConfig, *, rngs: js.Rngs):
        super().__init__()
        size, patch = config.hidden_sizes[0], config.patch_size
        self.patch_embeddings = nn.Conv2d(config.num_channels, size, patch, patch, rngs=rngs)
        self.layernorm = LayerNorm2d(size, eps=1e-6)

    def forward(self, pixel_values: jax.Array) -> jax.Array:
        """``[B, C, H, W]`` -> ``[B, hidden_sizes[0], H / patch, W / patch]``."""
        return self.layernorm(self.patch_embeddings(pixel_values))


class ConvNextEncoder(nn.Module):
    """``stages``: timm's ``ConvNeXtStage`` (channels-last blocks, 7x7 depthwise convs, eps
    1e-6), the first at stride 1, the others downsampling by 2."""

    def __init__(self, config: ConvNextConfig, *, rngs: js.Rngs):
        super().__init__()
        sizes, depths, count = list(config.hidden_sizes), list(config.depths), config.num_stages
        if config.hidden_act != "gelu" or not len(sizes) == len(depths) == count:
            raise NotImplementedError(
                f"ConvNextConfig: js builds hidden_act 'gelu' with num_stages ({count}) "
                f"hidden_sizes {sizes} and depths {depths}, got hidden_act "
                f"{config.hidden_act!r}. Fix: give one hidden size and depth per stage"
            )
        scale = config.layer_scale_init_value
        args = {"norm_eps": 1e-6, "conv_bias": True, "conv_mlp": False}
        args["ls_init_value"] = scale if scale > 0 else None
        inputs = [sizes[0], *sizes[:-1]]
        self.stages = nn.Sequential(
            *(
                ConvNeXtStage(c, size, 1 if i == 0 else 2, depth, args, 7, rngs=rngs)
                for i, (c, size, depth) in enumerate(zip(inputs, sizes, depths, strict=True))
            )
        )

    def forward(self, x: jax.Array) -> jax.Array:
        """The stages in turn."""
        return self.stages(x)


class ConvNextPreTrainedModel(PreTrainedModel):
    """What the ConvNeXt models share: the config class, the ``convnext`` prefix and
    transformers' stage names mapped to timm's modules (and back on save)."""

    config: ConvNextConfig
    config_class = ConvNextConfig
    base_model_prefix = "convnext"
    key_mapping = _stage_names(_TIMM_NAMES, "layers", "blocks")
    save_key_mapping = _stage_names(
        {new: old for old, new in _TIMM_NAMES.items()}, "blocks", "layers"
    )


class ConvNextModel(ConvNetModel, ConvNextPreTrainedModel):
    """transformers' ``ConvNextModel``: ``embeddings``, ``encoder`` and ``layernorm`` of the
    average-pooled last feature map.

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> ``(last_hidden_state [B, hidden_sizes[-1], h, w],
        pooler_output [B, hidden_sizes[-1]])``.
    """

    stem_name = "embeddings"
    stem_class = ConvNextEmbeddings
    encoder_class = ConvNextEncoder

    def __init__(self, config: ConvNextConfig, *, rngs: js.Rngs):
        super().__init__(config, rngs=rngs)
        self.layernorm = nn.LayerNorm(config.hidden_sizes[-1], eps=config.layer_norm_eps)

    def pool(self, hidden: jax.Array) -> jax.Array:
        """``layernorm`` of the mean over positions, ``[B, C]``."""
        return self.layernorm(jnp.mean(hidden, axis=(2, 3)))


class ConvNextForImageClassification(ConvNetForImageClassification, ConvNextPreTrainedModel):
    """``convnext`` and ``classifier``, a Linear layer on the pooled features (the identity
    with ``num_labels=0``): logits ``[B, num_labels]``."""

    base_model_class = ConvNextModel


ARCHITECTURES = architectures(ConvNextModel, ConvNextForImageClassification)
