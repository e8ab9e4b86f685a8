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
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

import js
from js import nn

from ._timm import POOL_TYPES, TimmConfig, TimmModel, default_cfg, timm_architectures
from ._timm import global_pool as _global_pool

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "BatchNormAct2d",
    "BlockSpec",
    "ConvBnAct",
    "DepthwiseSeparableConv",
    "EfficientNetConfig",
    "EfficientNetModel",
    "InvertedResidual",
    "MobileNetV3Config",
    "MobileNetV3Model",
    "SqueezeExcite",
    "decode_block",
    "make_divisible",
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
# the block strings' activation codes (``_nre``) -> activation names
_BLOCK_ACTS = {"re": "relu", "r6": "relu6", "hs": "hard_swish", "sw": "swish"}


def make_divisible(value: float, divisor: int = 8, round_limit: float = 0.9) -> int:
    """timm's ``make_divisible``: ``value`` to the nearest multiple of ``divisor`` (at least
    ``divisor``), one more step up where rounding down would lose over ``1 - round_limit``.

    Example:
        >>> make_divisible(16 * 4.5), make_divisible(24 * 3.67), make_divisible(4)
        (72, 88, 8)
    """
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < round_limit * value else rounded


@dataclass(frozen=True)
class BlockSpec:
    """One block string of an ``arch_def`` (timm's ``_decode_block_str``): the block type
    (``'ds'``, ``'ir'``, ``'cn'``), its repeats, depthwise (``cn``: the only) kernel size, stride,
    expansion ratio, output channels, squeeze-excite ratio (0: none), activation (``None``: the
    model's) and forced skip (``_skip`` / ``_noskip``; ``None``: the block type's rule)."""

    block_type: str
    repeats: int
    kernel_size: int
    stride: int
    exp_ratio: float
    out_chs: int
    se_ratio: float
    act: str | None
    skip: bool | None


def decode_block(text: str) -> BlockSpec:
    """The ``BlockSpec`` of a timm block string such as ``"ds_r1_k3_s1_e1_c16_se0.25"``."""
    block_type, *ops = text.split("_")
    options: dict[str, str] = {}
    act, skip = None, None
    for op in ops:
        if op in ("skip", "noskip"):
            skip = op == "skip"
        elif op.startswith("n") and op[1:] in _BLOCK_ACTS:
            act = _BLOCK_ACTS[op[1:]]
        else:
            key, value, *_ = [*re.split(r"(\d.*)", op), ""]
            options[key] = value
    unknown = sorted(set(options) - {"r", "k", "s", "e", "c", "se"})
    if block_type not in ("ds", "ir", "cn") or unknown or "." in options.get("k", ""):
        raise NotImplementedError(
            f"decode_block: {text!r} needs timm features js does not build (block type "
            f"{block_type!r}, options {unknown}, or mixed kernels). Fix: use an arch_def of 'ds', "
            "'ir' and 'cn' blocks with options r, k, s, e, c, se and n (activation)"
        )
    return BlockSpec(
        block_type=block_type,
        repeats=int(options["r"]),
        kernel_size=int(options["k"]),
        stride=int(options["s"]),
        exp_ratio=float(options.get("e", 1.0)),
        out_chs=int(options["c"]),
        se_ratio=float(options.get("se", 0.0)),
        act=act,
        skip=skip,
    )


def _scale_depth(specs: list[BlockSpec], depth_multiplier: float) -> list[BlockSpec]:
    """timm's ``_scale_stage_depth`` (``'ceil'``): the stage's repeats scaled and rounded up,
    shared out over its block strings from the last, one block per repeat."""
    repeats = [spec.repeats for spec in specs]
    left, scaled_left = sum(repeats), int(math.ceil(sum(repeats) * depth_multiplier))
    scaled = []
    for count in reversed(repeats):
        share = max(1, round(count / left * scaled_left))
        scaled.append(share)
        left, scaled_left = left - count, scaled_left - share
    return [spec for spec, count in zip(specs, reversed(scaled), strict=True) for _ in range(count)]


class HardSwish(nn.Module):
    """PyTorch's ``Hardswish``: ``x * relu6(x + 3) / 6`` elementwise; any shape."""

    def forward(self, x: jax.Array) -> jax.Array:
        return jax.nn.hard_silu(x)


class HardSigmoid(nn.Module):
    """PyTorch's ``Hardsigmoid``: ``relu6(x + 3) / 6`` elementwise; any shape."""

    def forward(self, x: jax.Array) -> jax.Array:
        return jax.nn.hard_sigmoid(x)


_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "swish": nn.SiLU,
    "hard_swish": HardSwish,
    "sigmoid": nn.Sigmoid,
    "hard_sigmoid": HardSigmoid,
}


class BatchNormAct2d(nn.BatchNorm2d):
    """timm's ``BatchNormAct2d``: BatchNorm then ``act`` (``None``: none), ``[B, C, H, W]``."""

    def __init__(self, num_features: int, act: str | None):
        super().__init__(num_features)
        self.act = _ACTIVATIONS[act]() if act else nn.Identity()

    def forward(self, x: jax.Array) -> jax.Array:
        return self.act(super().forward(x))


def _conv(
    in_chs: int, out_chs: int, kernel_size: int, stride: int = 1, groups: int = 1, *, rngs: js.Rngs
) -> nn.Conv2d:
    """timm's ``create_conv2d`` with ``pad_type=''``: PyTorch's symmetric padding
    ``((stride - 1) + (kernel_size - 1)) // 2``, no bias."""
    padding = ((stride - 1) + (kernel_size - 1)) // 2
    return nn.Conv2d(
        in_chs, out_chs, kernel_size, stride, padding=padding, groups=groups, bias=False, rngs=rngs
    )


@dataclass(frozen=True)
class SqueezeExciteRule:
    """How a family sizes and gates its ``SqueezeExcite`` layers (timm's builder arguments)."""

    gate: str  # the gate activation
    act: str | None  # the reduce activation; None: the block's
    from_expansion: bool  # the ratio is of the expanded channels (timm's se_from_exp)
    divisible: bool  # reduced channels by make_divisible (MobileNetV3), else round()

    def channels(self, mid_chs: int, spec: BlockSpec) -> int:
        """The reduced channels of a block with ``mid_chs`` channels at its SE layer."""
        ratio = spec.se_ratio if self.from_expansion else spec.se_ratio / spec.exp_ratio
        return make_divisible(mid_chs * ratio) if self.divisible else round(mid_chs * ratio)


class SqueezeExcite(nn.Module):
    """timm's ``SqueezeExcite``: ``x * gate(conv_expand(act1(conv_reduce(mean_hw(x)))))``.

    Shape:
        ``[B, C, H, W]`` in and out.
    """

    def __init__(self, in_chs: int, rd_channels: int, act: str | None, gate: str, *, rngs: js.Rngs):
        super().__init__()
        self.conv_reduce = nn.Conv2d(in_chs, rd_channels, 1, rngs=rngs)
        self.act1 = _ACTIVATIONS[act or "relu"]()  # timm's default act_layer
        self.conv_expand = nn.Conv2d(rd_channels, in_chs, 1, rngs=rngs)
        self.gate = _ACTIVATIONS[gate]()

    def forward(self, x: jax.Array) -> jax.Array:
        scale = jnp.mean(x, axis=(2, 3), keepdims=True)  # [B, C, 1, 1]
        return x * self.gate(self.conv_expand(self.act1(self.conv_reduce(scale))))


class _ChainBlock(nn.Module):
    """What timm's blocks share: named layers applied in ``order``, plus the input where the
    block keeps its shape (``has_skip``). A block type writes ``_layers``.

    Args:
        spec: the block's ``BlockSpec``, with its own stride (a stage's first block takes the
            string's, the others 1) and activation (the string's, else the model's).
        in_chs: the input channels.
        se: the family's ``SqueezeExciteRule``.
        rngs: ``js.Rngs`` with ``params``.

    Shape:
        ``[B, in_chs, H, W]`` -> ``[B, spec.out_chs, H / stride, W / stride]``.
    """

    def __init__(self, spec: BlockSpec, in_chs: int, se: SqueezeExciteRule, *, rngs: js.Rngs):
        super().__init__()
        layers = self._layers(spec, in_chs, se, rngs)
        for name, layer in layers.items():
            setattr(self, name, layer)
        self.order = tuple(layers)
        same_shape = spec.stride == 1 and in_chs == spec.out_chs
        self.has_skip = same_shape and self._skips(spec)

    def _layers(
        self, spec: BlockSpec, in_chs: int, se: SqueezeExciteRule, rngs: js.Rngs
    ) -> dict[str, nn.Module]:
        """The block's layers by timm's names, in the order they apply."""
        raise NotImplementedError(f"{type(self).__name__} does not define _layers")

    def _skips(self, spec: BlockSpec) -> bool:
        """Whether a block of unchanged shape adds its input (all but ``_noskip`` ones)."""
        return spec.skip is not False

    @staticmethod
    def _separable(
        spec: BlockSpec, channels: int, se: SqueezeExciteRule, rngs: js.Rngs, names: str
    ) -> dict[str, nn.Module]:
        """What DepthwiseSeparableConv and InvertedResidual end with: the depthwise conv and its
        BatchNorm-act, ``se``, the pointwise projection to ``spec.out_chs`` and its BatchNorm
        (no activation), the four convs and norms named by ``names``."""
        conv_dw, norm_dw, conv_pw, norm_pw = names.split()
        squeeze: nn.Module = nn.Identity()
        if spec.se_ratio:
            act = se.act or spec.act
            squeeze = SqueezeExcite(channels, se.channels(channels, spec), act, se.gate, rngs=rngs)
        return {
            conv_dw: _conv(channels, channels, spec.kernel_size, spec.stride, channels, rngs=rngs),
            norm_dw: BatchNormAct2d(channels, spec.act),
            "se": squeeze,
            conv_pw: _conv(channels, spec.out_chs, 1, rngs=rngs),
            norm_pw: BatchNormAct2d(spec.out_chs, None),
        }

    def forward(self, x: jax.Array) -> jax.Array:
        shortcut = x
        for name in self.order:
            x = getattr(self, name)(x)
        return x + shortcut if self.has_skip else x


class ConvBnAct(_ChainBlock):
    """timm's ``ConvBnAct``: ``bn1(conv(x))`` (plus ``x`` only with ``_skip``)."""

    def _layers(self, spec, in_chs, se, rngs):
        conv = _conv(in_chs, spec.out_chs, spec.kernel_size, spec.stride, rngs=rngs)
        return {"conv": conv, "bn1": BatchNormAct2d(spec.out_chs, spec.act)}

    def _skips(self, spec: BlockSpec) -> bool:
        return spec.skip is True


class DepthwiseSeparableConv(_ChainBlock):
    """timm's ``DepthwiseSeparableConv``: depthwise ``conv_dw``, ``bn1``, ``se``, pointwise
    ``conv_pw``, ``bn2`` (no activation)."""

    def _layers(self, spec, in_chs, se, rngs):
        return self._separable(spec, in_chs, se, rngs, "conv_dw bn1 conv_pw bn2")


class InvertedResidual(_ChainBlock):
    """timm's ``InvertedResidual`` (MBConv): pointwise expansion ``conv_pw`` / ``bn1`` to
    ``make_divisible(in_chs * exp_ratio)`` channels, depthwise ``conv_dw`` / ``bn2``, ``se``,
    pointwise projection ``conv_pwl`` / ``bn3`` (no activation)."""

    def _layers(self, spec, in_chs, se, rngs):
        mid = make_divisible(in_chs * spec.exp_ratio)
        expansion = {
            "conv_pw": _conv(in_chs, mid, 1, rngs=rngs),
            "bn1": BatchNormAct2d(mid, spec.act),
        }
        return expansion | self._separable(spec, mid, se, rngs, "conv_dw bn2 conv_pwl bn3")


_BLOCKS: dict[str, type[_ChainBlock]] = {
    "ds": DepthwiseSeparableConv,
    "ir": InvertedResidual,
    "cn": ConvBnAct,
}


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
