"""The blocks of timm's EfficientNet and MobileNetV3 (``timm/models/_efficientnet_blocks.py`` and
``_efficientnet_builder.py``, timm 1.0.31): the ``arch_def`` block strings decoded into
``BlockSpec`` records, timm's channel rounding, and the block modules (``ConvBnAct``,
``DepthwiseSeparableConv``, ``InvertedResidual`` with ``SqueezeExcite``) under timm's names.
``timm_efficientnet`` builds the two families from them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp

import js
from js import nn

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


__all__ = [
    "BatchNormAct2d",
    "BlockSpec",
    "ConvBnAct",
    "DepthwiseSeparableConv",
    "InvertedResidual",
    "SqueezeExcite",
    "decode_block",
    "make_divisible",
]
