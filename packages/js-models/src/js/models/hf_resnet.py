"""transformers' own ResNet (``model_type`` ``"resnet"``, ``modeling_resnet.py`` in transformers
5.23) in js.nn, with transformers' module names; timm's ResNet is ``js.models.resnet``.

The same network as timm's ResNet v1.5 under other names: the stem
``embedder.embedder.convolution`` / ``.normalization`` (7x7, stride 2, BatchNorm, ReLU) and max
pooling, ``encoder.stages.N.layers.M`` residual layers (``layer.K`` conv-BN(-act) units,
``shortcut`` a strided 1x1 conv and BatchNorm where the shape changes), then global average
pooling. Eval mode: BatchNorm with running statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

import js
from js import nn

from ._base import PreTrainedModel, architectures
from ._hf import LabelledConfig, activation
from ._timm import TimmModel

__all__ = [
    "ARCHITECTURES",
    "ConvNetForImageClassification",
    "ConvNetModel",
    "ResNetConfig",
    "ResNetForImageClassification",
    "ResNetModel",
]


class ResNetConfig(LabelledConfig):
    """transformers' ``ResNetConfig`` keys and defaults (ResNet-50, from
    ``transformers_defaults.json``): ``embedding_size`` stem
    channels, ``hidden_sizes`` and ``depths`` per stage, ``layer_type`` ``"basic"`` or
    ``"bottleneck"``, ``downsample_in_first_stage``, ``downsample_in_bottleneck``."""

    model_type: ClassVar[str] = "resnet"

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        sizes, depths, kind = self.hidden_sizes, self.depths, self.layer_type
        if kind not in ("basic", "bottleneck") or len(sizes) != len(depths):
            raise ValueError(
                f"ResNetConfig: expected layer_type 'basic' or 'bottleneck' and one depth per "
                f"hidden size, got {kind!r}, hidden_sizes {sizes}, depths {depths}. "
                "Fix: correct them in config.json"
            )


class ResNetConvLayer(nn.Module):
    """``activation(normalization(convolution(x)))``: a bias-free conv ("same" padding),
    BatchNorm and the activation (none for the last unit of a residual layer)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        act: Callable[[jax.Array], jax.Array] | None = None,
        *,
        rngs: js.Rngs,
    ):
        super().__init__()
        self.convolution = nn.Conv2d(
            in_channels, out_channels, kernel_size, stride, padding=kernel_size // 2, bias=False,
            rngs=rngs,
        )  # fmt: skip
        self.normalization = nn.BatchNorm2d(out_channels)
        self.act = act

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, in, H, W]`` -> ``[B, out, H / stride, W / stride]``."""
        x = self.normalization(self.convolution(x))
        return x if self.act is None else self.act(x)


class ResNetLayer(nn.Module):
    """A residual layer, ``act(layer(x) + shortcut(x))``: two 3x3 units (``"basic"``) or 1x1
    reduce (``out / 4``), 3x3 and 1x1 expand (``"bottleneck"``; the stride on the 3x3 unit
    unless ``downsample_in_bottleneck``). ``shortcut`` is a 1x1 conv-BN where the shape changes."""

    def __init__(
        self,
        config: ResNetConfig,
        in_channels: int,
        out_channels: int,
        stride: int,
        *,
        rngs: js.Rngs,
    ):
        super().__init__()
        act = activation("ResNetConfig", "hidden_act", config.hidden_act)
        if in_channels != out_channels or stride != 1:
            self.shortcut = ResNetConvLayer(in_channels, out_channels, 1, stride, rngs=rngs)
        else:
            self.shortcut = nn.Identity()
        units = [(in_channels, out_channels, 3, stride), (out_channels, out_channels, 3, 1)]
        if config.layer_type == "bottleneck":
            reduced, first = out_channels // 4, config.downsample_in_bottleneck
            units = [
                (in_channels, reduced, 1, stride if first else 1),
                (reduced, reduced, 3, 1 if first else stride),
                (reduced, out_channels, 1, 1),
            ]
        last = len(units) - 1
        self.layer = nn.Sequential(
            *(
                ResNetConvLayer(*unit, act=None if index == last else act, rngs=rngs)
                for index, unit in enumerate(units)
            )
        )
        self.act = act

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, in, H, W]`` -> ``[B, out, H / stride, W / stride]``."""
        return self.act(self.layer(x) + self.shortcut(x))


class ResNetStage(nn.Module):
    """``layers``: ``depth`` residual layers, the first changing channels and stride."""

    def __init__(
        self, config: ResNetConfig, in_channels: int, out_channels: int, stride: int, depth: int,
        *, rngs: js.Rngs,
    ):  # fmt: skip
        super().__init__()
        channels = [in_channels] + [out_channels] * (depth - 1)
        self.layers = nn.Sequential(
            *(
                ResNetLayer(config, c, out_channels, stride if i == 0 else 1, rngs=rngs)
                for i, c in enumerate(channels)
            )
        )

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, in, H, W]`` -> ``[B, out, H / stride, W / stride]``."""
        return self.layers(x)


class ResNetEmbeddings(nn.Module):
    """The stem: ``embedder`` (7x7 stride-2 conv, BatchNorm, activation), 3x3 stride-2 max pool."""

    def __init__(self, config: ResNetConfig, *, rngs: js.Rngs):
        super().__init__()
        act = activation("ResNetConfig", "hidden_act", config.hidden_act)
        self.embedder = ResNetConvLayer(
            config.num_channels, config.embedding_size, 7, 2, act=act, rngs=rngs
        )
        self.pooler = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, pixel_values: jax.Array) -> jax.Array:
        """``[B, C, H, W]`` -> ``[B, embedding_size, H / 4, W / 4]``."""
        return self.pooler(self.embedder(pixel_values))


class ResNetEncoder(nn.Module):
    """``stages``: one per ``depths`` entry; the first stride 2 only with
    ``downsample_in_first_stage``, the others stride 2."""

    def __init__(self, config: ResNetConfig, *, rngs: js.Rngs):
        super().__init__()
        sizes, depths = list(config.hidden_sizes), list(config.depths)
        inputs = [config.embedding_size, *sizes[:-1]]
        strides = [2 if config.downsample_in_first_stage else 1] + [2] * (len(sizes) - 1)
        self.stages = nn.Sequential(
            *(
                ResNetStage(config, *stage, rngs=rngs)
                for stage in zip(inputs, sizes, strides, depths, strict=True)
            )
        )

    def forward(self, x: jax.Array) -> jax.Array:
        """The stages in turn."""
        return self.stages(x)


class ConvNetModel(PreTrainedModel):
    """transformers' convolutional base models (ResNet, ConvNeXt): a stem (``stem_class`` at
    ``stem_name``), ``encoder`` (``encoder_class``), and ``pool`` of the last feature map."""

    stem_name: ClassVar[str]
    stem_class: ClassVar[Callable[..., nn.Module]]
    encoder_class: ClassVar[Callable[..., nn.Module]]

    def __init__(self, config: LabelledConfig, *, rngs: js.Rngs):
        super().__init__(config)
        setattr(self, self.stem_name, self.stem_class(config, rngs=rngs))
        self.encoder = self.encoder_class(config, rngs=rngs)

    def pool(self, hidden: jax.Array) -> jax.Array:
        """``pooler_output`` of the last feature map ``[B, C, h, w]``."""
        raise NotImplementedError(f"{type(self).__name__} does not define pool")

    def forward(self, pixel_values: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(last_hidden_state [B, C, h, w], pooler_output)`` of images ``[B, C, H, W]``."""
        stem = getattr(self, self.stem_name)
        hidden = self.encoder(stem(jnp.asarray(pixel_values)))
        return hidden, self.pool(hidden)


class ConvNetForImageClassification(PreTrainedModel):
    """A ``base_model_class`` model at ``base_model_prefix`` and ``classifier``, a Linear layer
    (the identity with ``num_labels=0``) on its pooled features: logits ``[B, num_labels]``."""

    base_model_class: ClassVar[type[ConvNetModel]]

    def __init__(self, config: LabelledConfig, *, rngs: js.Rngs):
        super().__init__(config)
        n = config.num_labels
        setattr(self, self.base_model_prefix, self.base_model_class(config, rngs=rngs))
        linear = nn.Linear(config.hidden_sizes[-1], n, rngs=rngs) if n > 0 else nn.Identity()
        self.classifier = self.head(linear)

    def head(self, linear: nn.Module) -> nn.Module:
        """``classifier`` around its Linear layer (itself here)."""
        return linear

    def forward(self, pixel_values: jax.Array) -> jax.Array:
        """Logits ``[B, num_labels]`` of images ``[B, C, H, W]``."""
        return self.classifier(getattr(self, self.base_model_prefix)(pixel_values)[1])


class ResNetPreTrainedModel(PreTrainedModel):
    """What the ResNet models share: the config class, the ``resnet`` prefix, and
    BatchNorm's ``num_batches_tracked`` counters skipped on load (js keeps none)."""

    config: ResNetConfig
    config_class = ResNetConfig
    base_model_prefix = "resnet"
    ignore_on_load = TimmModel.ignore_on_load  # BatchNorm's counters, as timm's ResNet


class ResNetModel(ConvNetModel, ResNetPreTrainedModel):
    """transformers' ``ResNetModel``: ``embedder``, ``encoder`` and global average pooling.

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> ``(last_hidden_state [B, hidden_sizes[-1], H / 32,
        W / 32], pooler_output [B, hidden_sizes[-1], 1, 1])``.
    """

    stem_name = "embedder"
    stem_class = ResNetEmbeddings
    encoder_class = ResNetEncoder

    def pool(self, hidden: jax.Array) -> jax.Array:
        """Global average pooling, ``[B, C, 1, 1]`` (transformers' ``AdaptiveAvgPool2d``)."""
        return jnp.mean(hidden, axis=(2, 3), keepdims=True)


class ResNetForImageClassification(ConvNetForImageClassification, ResNetPreTrainedModel):
    """``resnet`` and ``classifier.1``, a Linear layer on the pooled features (``classifier.0``
    is a parameter-free flatten); ``num_labels=0`` makes it the identity.

    Example:
        >>> import jax.numpy as jnp, js
        >>> config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
        ...                       layer_type="basic", num_labels=3)
        >>> model = ResNetForImageClassification(config, rngs=js.Rngs(params=0)).eval()
        >>> model(jnp.ones((2, 3, 32, 32))).shape
        (2, 3)
    """

    base_model_class = ResNetModel

    def head(self, linear: nn.Module) -> nn.Module:
        """``Flatten`` then the Linear layer, as transformers' ``nn.Sequential``."""
        return nn.Sequential(nn.Flatten(), linear)


ARCHITECTURES = architectures(ResNetModel, ResNetForImageClassification)
