"""timm's EfficientNet and MobileNetV3 (``timm/models/efficientnet.py``, ``mobilenetv3.py``, timm
1.0.31) in js.nn, with timm's module names, so that timm's files load as they are and js writes
folders timm reads.

Both families are built by timm's ``EfficientNetBuilder`` from an ``arch_def``: one list of block
strings per stage, ``"ir_r2_k3_s2_e6_c24_se0.25"`` reading "InvertedResidual, 2 repeats, 3x3
depthwise kernel, stride 2, expansion 6, 24 output channels, squeeze-excite ratio 0.25"
(``ds``: DepthwiseSeparableConv, ``cn``: ConvBnAct; ``_nre`` / ``_nhs``: ReLU / hard-swish for that
block). Channels are scaled by a width multiplier and rounded to multiples of 8 (timm's
``round_channels``), repeats by a depth multiplier (rounded up). Names as timm's state dict:
``conv_stem``, ``bn1``, ``blocks.<stage>.<block>.conv_pw`` / ``conv_dw`` / ``se.conv_reduce`` /
``conv_pwl`` / ``bn3``, ``conv_head``, ``classifier``.

The heads differ: EfficientNet ends its features with ``conv_head`` and ``bn2`` then pools into
``classifier``; MobileNetV3 pools first, then ``conv_head`` (a 1x1 conv with a bias, as a Linear
layer), hard-swish and ``classifier``. Only the PyTorch-trained variants are served: timm's
``tf_*`` ports pad convolutions TensorFlow's ``'same'`` way and are refused. Inference follows
timm's eval mode (BatchNorm with running statistics; drop path and dropout are training-only and
not built).

Example:
    >>> from js.models.timm_efficientnet import MobileNetV3Config, decode_block
    >>> spec = decode_block("ir_r3_k5_s2_e6_c160_se0.25_nhs")
    >>> spec.block_type, spec.repeats, spec.kernel_size, spec.out_chs, spec.act
    ('ir', 3, 5, 160, 'hard_swish')
    >>> stages = MobileNetV3Config(architecture="mobilenetv3_small_050").stages()
    >>> [[block.out_chs for block in stage] for stage in stages]
    [[8], [16, 16], [24, 24, 24], [24, 24], [48, 48, 48], [288]]
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar

import jax

import js
from js import nn

from ._efficientnet_blocks import (
    _ACTIVATIONS,
    _BLOCKS,
    BatchNormAct2d,
    BlockSpec,
    SqueezeExciteRule,
    _conv,
    _scale_depth,
    decode_block,
    make_divisible,
)
from ._timm import POOL_TYPES, TimmConfig, TimmModel, default_cfg, timm_architectures
from ._timm import global_pool as _global_pool

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "EfficientNetConfig",
    "EfficientNetModel",
    "MobileNetV3Config",
    "MobileNetV3Model",
    "decode_block",
]

# timm's arch_def of each family (_gen_efficientnet, _gen_mobilenet_v3): one tuple per stage.
EFFICIENTNET_DEF = (
    ("ds_r1_k3_s1_e1_c16_se0.25",),
    ("ir_r2_k3_s2_e6_c24_se0.25",),
    ("ir_r2_k5_s2_e6_c40_se0.25",),
    ("ir_r3_k3_s2_e6_c80_se0.25",),
    ("ir_r3_k5_s1_e6_c112_se0.25",),
    ("ir_r4_k5_s2_e6_c192_se0.25",),
    ("ir_r1_k3_s1_e6_c320_se0.25",),
)
MOBILENETV3_LARGE_DEF = (
    ("ds_r1_k3_s1_e1_c16_nre",),
    ("ir_r1_k3_s2_e4_c24_nre", "ir_r1_k3_s1_e3_c24_nre"),
    ("ir_r3_k5_s2_e3_c40_se0.25_nre",),
    ("ir_r1_k3_s2_e6_c80", "ir_r1_k3_s1_e2.5_c80", "ir_r2_k3_s1_e2.3_c80"),
    ("ir_r2_k3_s1_e6_c112_se0.25",),
    ("ir_r3_k5_s2_e6_c160_se0.25",),
    ("cn_r1_k1_s1_c960",),
)
MOBILENETV3_SMALL_DEF = (
    ("ds_r1_k3_s2_e1_c16_se0.25_nre",),
    ("ir_r1_k3_s2_e4.5_c24_nre", "ir_r1_k3_s1_e3.67_c24_nre"),
    ("ir_r1_k5_s2_e4_c40_se0.25", "ir_r2_k5_s1_e6_c40_se0.25"),
    ("ir_r2_k5_s1_e3_c48_se0.25",),
    ("ir_r3_k5_s2_e6_c96_se0.25",),
    ("cn_r1_k1_s1_c576",),
)


class _BlockNetConfig(TimmConfig):
    """What the EfficientNet and MobileNetV3 configs share: an architecture is a width and a
    depth multiplier (``channel_multiplier``, ``depth_multiplier``) over the family's
    ``arch_def``; a family names its stem width, activation and SE rule."""

    stem_size: ClassVar[int]
    act: ClassVar[str]
    se_rule: ClassVar[SqueezeExciteRule]
    pretrained_defaults: ClassVar[dict[str, Any]] = default_cfg(
        interpolation="bicubic", first_conv="conv_stem", classifier="classifier"
    )

    def __init__(self, **kwargs: Any):
        name = kwargs.get("architecture", "")
        if name.startswith("tf_"):
            raise NotImplementedError(
                f"{type(self).__name__}: {name!r} is a TensorFlow port, whose convolutions pad "
                "TensorFlow's 'same' way (and BatchNorm uses eps 1e-3); js builds timm's "
                f"PyTorch-padded variants only. Fix: use {name[3:]!r}"
            )
        super().__init__(**kwargs)

    def arch_def(self) -> tuple[tuple[str, ...], ...]:
        """The architecture's block strings, one tuple per stage."""
        raise NotImplementedError(f"{type(self).__name__} does not define arch_def")

    def round_channels(self, channels: int) -> int:
        """timm's ``round_channels``: ``channels`` times the width multiplier, divisible by 8."""
        return make_divisible(channels * self.arch_args()["channel_multiplier"])

    def stem_channels(self) -> int:
        """The stem's output channels (``round_channels(stem_size)``)."""
        return self.round_channels(self.stem_size)

    def head_size(self) -> int:
        """``conv_head``'s output channels."""
        raise NotImplementedError(f"{type(self).__name__} does not define head_size")

    def stages(self) -> list[list[BlockSpec]]:
        """The blocks of each stage, repeats scaled and output channels rounded."""
        depth = self.arch_args()["depth_multiplier"]
        stages = []
        for row in self.arch_def():
            specs = _scale_depth([decode_block(text) for text in row], depth)
            stages.append(
                [replace(spec, out_chs=self.round_channels(spec.out_chs)) for spec in specs]
            )
        return stages


def _multipliers(channel: float, depth: float = 1.0) -> dict[str, float]:
    return {"channel_multiplier": channel, "depth_multiplier": depth}


class EfficientNetConfig(_BlockNetConfig):
    """timm's ``config.json`` for an EfficientNet (see ``js.models._timm.TimmConfig``):
    ``architecture`` picks the width and depth multipliers as timm registers them
    (``efficientnet_b0`` ... ``b8``, ``l2``); swish activations, sigmoid-gated SE layers."""

    architectures: ClassVar[dict[str, dict[str, Any]]] = {
        "efficientnet_b0": _multipliers(1.0, 1.0),
        "efficientnet_b1": _multipliers(1.0, 1.1),
        "efficientnet_b2": _multipliers(1.1, 1.2),
        "efficientnet_b3": _multipliers(1.2, 1.4),
        "efficientnet_b4": _multipliers(1.4, 1.8),
        "efficientnet_b5": _multipliers(1.6, 2.2),
        "efficientnet_b6": _multipliers(1.8, 2.6),
        "efficientnet_b7": _multipliers(2.0, 3.1),
        "efficientnet_b8": _multipliers(2.2, 3.6),
        "efficientnet_l2": _multipliers(4.3, 5.3),
    }
    default_architecture: ClassVar[str] = "efficientnet_b0"
    stem_size: ClassVar[int] = 32
    act: ClassVar[str] = "swish"
    se_rule: ClassVar[SqueezeExciteRule] = SqueezeExciteRule(
        gate="sigmoid", act=None, from_expansion=False, divisible=False
    )

    def arch_def(self) -> tuple[tuple[str, ...], ...]:
        return EFFICIENTNET_DEF

    def head_size(self) -> int:
        """``round_channels(1280)`` (1280 for efficientnet_b0)."""
        return self.round_channels(1280)

    def feature_count(self) -> int:
        """``conv_head``'s channels: ``head_size()``."""
        return self.head_size()


class MobileNetV3Config(_BlockNetConfig):
    """timm's ``config.json`` for a MobileNetV3 (see ``js.models._timm.TimmConfig``):
    ``architecture`` picks the large or small ``arch_def`` and the width multiplier
    (``mobilenetv3_large_100``: 1.0); ``model_args`` may set ``depth_multiplier``. Hard-swish
    activations (ReLU where a block says ``_nre``), ReLU and hard-sigmoid in the SE layers."""

    architectures: ClassVar[dict[str, dict[str, Any]]] = {
        "mobilenetv3_large_075": _multipliers(0.75),
        "mobilenetv3_large_100": _multipliers(1.0),
        "mobilenetv3_small_050": _multipliers(0.5),
        "mobilenetv3_small_075": _multipliers(0.75),
        "mobilenetv3_small_100": _multipliers(1.0),
    }
    default_architecture: ClassVar[str] = "mobilenetv3_large_100"
    model_arg_names: ClassVar[tuple[str, ...]] = ("depth_multiplier",)
    stem_size: ClassVar[int] = 16
    act: ClassVar[str] = "hard_swish"
    se_rule: ClassVar[SqueezeExciteRule] = SqueezeExciteRule(
        gate="hard_sigmoid", act="relu", from_expansion=True, divisible=True
    )

    def arch_def(self) -> tuple[tuple[str, ...], ...]:
        return MOBILENETV3_SMALL_DEF if "small" in self.architecture else MOBILENETV3_LARGE_DEF

    def stem_channels(self) -> int:
        """16, rounded with the width multiplier unless it is under 0.75 (timm's ``fix_stem``)."""
        fixed = self.arch_args()["channel_multiplier"] < 0.75
        return self.stem_size if fixed else super().stem_channels()

    def head_size(self) -> int:
        """timm's ``head_hidden_size``: 1024 (small) or 1280."""
        return 1024 if "small" in self.architecture else 1280

    def feature_count(self) -> int:
        """The last block's channels (960 for mobilenetv3_large_100)."""
        return self.stages()[-1][-1].out_chs


class _BlockNetModel(TimmModel):
    """What timm's ``EfficientNet`` and ``MobileNetV3`` share: ``conv_stem`` (3x3, stride 2),
    ``bn1`` and ``blocks`` (a ``Sequential`` of stages), built by timm's ``EfficientNetBuilder``
    rules, and timm's ``_init_weight_goog`` initial weights. A family writes its head
    (``_build_head``, ``forward_features``, ``forward_head``)."""

    config: _BlockNetConfig
    classifier: nn.Module  # set by _build_head: Linear, or Identity without classes

    def _build(self, args: dict[str, Any], rngs: js.Rngs) -> None:
        config = self.config
        stem = config.stem_channels()
        self.conv_stem = _conv(args["in_chans"], stem, 3, 2, rngs=rngs)
        self.bn1 = BatchNormAct2d(stem, config.act)
        stages, in_chs = [], stem
        for stage in config.stages():
            blocks = []
            for index, spec in enumerate(stage):  # only a stage's first block strides
                stride = spec.stride if index == 0 else 1
                spec = replace(spec, stride=stride, act=spec.act or config.act)
                blocks.append(_BLOCKS[spec.block_type](spec, in_chs, config.se_rule, rngs=rngs))
                in_chs = spec.out_chs
            stages.append(nn.Sequential(*blocks))
        self.blocks = nn.Sequential(*stages)
        self.pool_type = args["global_pool"]
        self._build_head(in_chs, rngs)

    def _build_head(self, in_chs: int, rngs: js.Rngs) -> None:
        """The layers after ``blocks`` (whose last stage gives ``in_chs`` channels)."""
        raise NotImplementedError(f"{type(self).__name__} does not define _build_head")

    def _classifier(self, features: int, rngs: js.Rngs) -> nn.Module:
        if self.num_classes <= 0:
            return nn.Identity()
        return nn.Linear(features, self.num_classes, rngs=rngs)

    def _classify(self, x: jax.Array, pre_logits: bool) -> jax.Array:
        return x if pre_logits else self.classifier(x)

    def _init_module(self, module: nn.Module, rngs: js.Rngs) -> None:
        """timm's ``_init_weight_goog``: convs normal with std ``sqrt(2 / fan_out)`` (fan-out per
        group), Linear layers uniform in ``±1 / sqrt(out_features)``, biases zero."""
        if isinstance(module, nn.Conv2d):
            out_chs, _, height, width = module.weight.value.shape
            std = math.sqrt(2.0 / (height * width * out_chs // module.groups))
            nn.init.normal_(module.weight, 0.0, std, rngs=rngs)
        elif isinstance(module, nn.Linear):
            bound = 1.0 / math.sqrt(module.weight.value.shape[0])
            nn.init.uniform_(module.weight, -bound, bound, rngs=rngs)
        else:
            return
        if module.bias is not None:
            nn.init.zeros_(module.bias)

    def _trunk(self, x: jax.Array) -> jax.Array:
        return self.blocks(self.bn1(self.conv_stem(x)))


class EfficientNetModel(_BlockNetModel):
    """timm's ``EfficientNet``: ``classifier(pool(bn2(conv_head(blocks(bn1(conv_stem(x)))))))``,
    logits ``[B, num_classes]`` of images ``[B, in_chans, H, W]``.

    ``num_classes=0`` builds no ``classifier``: the output is the pooled ``conv_head`` features
    ``[B, num_features]``.
    """

    config_class: ClassVar[type[EfficientNetConfig]] = EfficientNetConfig

    def _build_head(self, in_chs: int, rngs: js.Rngs) -> None:
        self.num_features = self.config.head_size()
        self.conv_head = _conv(in_chs, self.num_features, 1, rngs=rngs)
        self.bn2 = BatchNormAct2d(self.num_features, self.config.act)
        self.classifier = self._classifier(self.num_features * POOL_TYPES[self.pool_type], rngs)

    def forward_features(self, x: jax.Array) -> jax.Array:
        """The stem, ``blocks``, then ``conv_head`` and ``bn2``."""
        return self.bn2(self.conv_head(self._trunk(x)))

    def forward_head(self, x: jax.Array, pre_logits: bool = False) -> jax.Array:
        """Global pooling, then ``classifier`` unless ``pre_logits``."""
        return self._classify(_global_pool(x, self.pool_type), pre_logits)


class MobileNetV3Model(_BlockNetModel):
    """timm's ``MobileNetV3``: ``classifier(act2(conv_head(pool(blocks(bn1(conv_stem(x)))))))``,
    logits ``[B, num_classes]`` of images ``[B, in_chans, H, W]``; ``conv_head`` is a 1x1 conv
    with a bias on the pooled features (timm's "efficient head").

    ``num_classes=0`` builds no ``classifier``: the output is ``act2(conv_head(...))``, ``[B,
    1280]`` (``[B, 1024]`` for the small models).
    """

    config_class: ClassVar[type[MobileNetV3Config]] = MobileNetV3Config

    def _build_head(self, in_chs: int, rngs: js.Rngs) -> None:
        self.num_features = in_chs
        hidden = self.config.head_size()
        pooled = in_chs * POOL_TYPES[self.pool_type]
        self.conv_head = nn.Conv2d(pooled, hidden, 1, rngs=rngs)
        self.act2 = _ACTIVATIONS[self.config.act]()
        self.classifier = self._classifier(hidden, rngs)

    def forward_features(self, x: jax.Array) -> jax.Array:
        """The stem, then ``blocks``."""
        return self._trunk(x)

    def forward_head(self, x: jax.Array, pre_logits: bool = False) -> jax.Array:
        """Global pooling, ``conv_head``, ``act2`` (flattened to ``[B, 1280]``), then
        ``classifier`` unless ``pre_logits``."""
        if not self.pool_type:
            return self._classify(self.act2(self.conv_head(x)), pre_logits)
        pooled = _global_pool(x, self.pool_type)[:, :, None, None]  # [B, C, 1, 1] for conv_head
        return self._classify(self.act2(self.conv_head(pooled))[:, :, 0, 0], pre_logits)


ARCHITECTURES = timm_architectures(EfficientNetModel) | timm_architectures(MobileNetV3Model)
DEFAULT_ARCHITECTURE = EfficientNetConfig.default_architecture
