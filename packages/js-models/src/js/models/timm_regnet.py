"""timm's RegNet X and Y (``timm/models/regnet.py``, timm 1.0.31) in js.nn, with timm's module
names, so that timm's files load as they are and js writes folders timm reads.

A RegNet is a few numbers (``RegNetCfg``: ``depth`` blocks whose widths grow linearly from
``w0`` by ``wa`` per block, quantised to powers of ``wm``; ``group_size`` channels per group;
``se_ratio``, 0 for RegNetX), from which ``stage_plan`` derives four stages. Names as timm's
state dict: ``stem.conv`` / ``stem.bn`` (3x3 stride-2 conv, BatchNorm, ReLU), stages ``s1`` ...
``s4`` of blocks ``b1`` ... ``bN`` (``conv1`` 1x1, ``conv2`` 3x3 grouped and strided, RegNetY's
``se.fc1`` / ``se.fc2``, ``conv3`` 1x1, each a ``conv`` and a ``bn``; ``downsample.conv`` /
``.bn`` on the first block's shortcut, ``downsample.1.conv`` / ``.bn`` after the pool
``downsample.0`` with ``downsample='avg'``), ``head.fc``. Eval mode: drop path and dropout are
not built.

Example:
    >>> from js.models.timm_regnet import RegNetConfig, stage_plan
    >>> stage = stage_plan(RegNetConfig(architecture="regnety_002"))[3]
    >>> stage.out_chs, stage.depth, stage.group_size, stage.se_ratio
    (368, 7, 8, 0.25)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

import js
from js import nn

from ._timm import ClassifierHead, TimmConfig, TimmModel, default_cfg, timm_architectures
from .resnet import avg_down_pool

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "Bottleneck",
    "ConvNormAct",
    "RegNetConfig",
    "RegNetModel",
    "RegStage",
    "SEModule",
    "StagePlan",
    "stage_plan",
]

# timm's model_cfgs: name -> _FIELDS; every RegNetY adds an SE (se_ratio 0.25).
_FIELDS = ("w0", "wa", "wm", "group_size", "depth")
_CFGS = {
    "regnetx_002": (24, 36.44, 2.49, 8, 13),
    "regnetx_004": (24, 24.48, 2.54, 16, 22),
    "regnetx_006": (48, 36.97, 2.24, 24, 16),
    "regnetx_008": (56, 35.73, 2.28, 16, 16),
    "regnetx_016": (80, 34.01, 2.25, 24, 18),
    "regnetx_032": (88, 26.31, 2.25, 48, 25),
    "regnetx_040": (96, 38.65, 2.43, 40, 23),
    "regnetx_064": (184, 60.83, 2.07, 56, 17),
    "regnetx_080": (80, 49.56, 2.88, 120, 23),
    "regnetx_120": (168, 73.36, 2.37, 112, 19),
    "regnetx_160": (216, 55.59, 2.1, 128, 22),
    "regnetx_320": (320, 69.86, 2.0, 168, 23),
    "regnety_002": (24, 36.44, 2.49, 8, 13),
    "regnety_004": (48, 27.89, 2.09, 8, 16),
    "regnety_006": (48, 32.54, 2.32, 16, 15),
    "regnety_008": (56, 38.84, 2.4, 16, 14),
    "regnety_016": (48, 20.71, 2.65, 24, 27),
    "regnety_032": (80, 42.63, 2.66, 24, 21),
    "regnety_040": (96, 31.41, 2.24, 64, 22),
    "regnety_064": (112, 33.22, 2.27, 72, 25),
    "regnety_080": (192, 76.82, 2.19, 56, 17),
    "regnety_120": (168, 73.36, 2.37, 112, 19),
    "regnety_160": (200, 106.23, 2.48, 112, 18),
    "regnety_320": (232, 115.89, 2.53, 232, 20),
    "regnety_640": (352, 147.48, 2.4, 328, 20),
    "regnety_1280": (456, 160.83, 2.52, 264, 27),
    "regnety_2560": (640, 230.83, 2.53, 373, 27),
}
# the other RegNetCfg fields js builds from, with timm's defaults
_CFG_DEFAULTS = {
    "bottle_ratio": 1.0,
    "se_ratio": 0.0,
    "group_min_ratio": 0.0,
    "stem_width": 32,
    "downsample": "conv1x1",
}


def _family() -> dict[str, dict[str, Any]]:
    """``_CFGS`` as constructor arguments, and the ``_tv`` variants (torchvision's rounding of
    the group widths, ``group_min_ratio=0.9``)."""
    archs: dict[str, dict[str, Any]] = {}
    for name, numbers in _CFGS.items():
        archs[name] = dict(zip(_FIELDS, numbers, strict=True))
        if name.startswith("regnety_"):
            archs[name]["se_ratio"] = 0.25
    for name in ("regnetx_004", "regnety_008", "regnety_080"):
        archs[f"{name}_tv"] = archs[name] | {"group_min_ratio": 0.9}
    return archs


class RegNetConfig(TimmConfig):
    """timm's ``config.json`` for a RegNet X or Y (see ``js.models._timm.TimmConfig``).

    ``architecture`` picks timm's ``RegNetCfg``; ``model_args`` may override its ``depth``,
    ``w0``, ``wa``, ``wm``, ``group_size``, ``bottle_ratio``, ``se_ratio``, ``group_min_ratio``,
    ``stem_width`` and ``downsample`` (``'conv1x1'``, or ``'avg'``: ResNet-D's pooled shortcut),
    as timm overlays ``create_model`` keyword arguments onto the cfg.
    """

    architectures = _family()
    default_architecture = "regnety_032"
    model_arg_names = (*_FIELDS, *_CFG_DEFAULTS)
    pretrained_defaults = default_cfg(
        first_conv="stem.conv",
        classifier="head.fc",
        test_input_size=[3, 288, 288],
        crop_pct=0.95,
        test_crop_pct=1.0,
        interpolation="bicubic",
    )

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        stage_plan(self)  # a cfg without four stages fails here, not when the model is built

    def feature_count(self) -> int:
        """The last stage's width (368 for regnetx_002, 1512 for regnety_032)."""
        return stage_plan(self)[-1].out_chs


@dataclasses.dataclass(frozen=True)
class StagePlan:
    """One RegNet stage: ``depth`` blocks of ``out_chs`` channels, whose 3x3 convs have
    ``group_size`` channels a group and whose bottleneck is ``bottle_ratio * out_chs`` wide;
    ``se_ratio`` is the SE's width over a block's input channels (0: no SE), ``downsample`` the
    first block's shortcut (``'conv1x1'`` or ``'avg'``)."""

    out_chs: int
    depth: int
    group_size: int
    bottle_ratio: float
    se_ratio: float
    downsample: str


def _round_to_group(width: int, group: int, min_ratio: float) -> int:
    """A bottleneck width made a multiple of its group size: timm's ``quantize_float`` (nearest),
    or with ``min_ratio`` its ``make_divisible`` (torchvision's rounding, never below
    ``min_ratio`` of the width)."""
    if not min_ratio:
        return int(round(width / group) * group)
    rounded = max(min_ratio, int(width + group / 2) // group * group)
    round_limit = 0.9  # make_divisible's default: never more than 10% below the width
    return int(rounded + group if rounded < round_limit * width else rounded)


def stage_plan(config: RegNetConfig) -> list[StagePlan]:
    """The four stages of a RegNet (timm's ``generate_regnet`` and
    ``adjust_widths_groups_comp``, in float32 as timm's torch computes them).

    Raises:
        ValueError: the cfg gives other than four distinct stage widths, or ``downsample`` is
            not ``'conv1x1'`` or ``'avg'``.
    """
    args = {**_CFG_DEFAULTS, **config.arch_args()}
    if args["downsample"] not in ("conv1x1", "avg"):
        raise ValueError(
            f"RegNetConfig {config.architecture!r}: downsample {args['downsample']!r} is not "
            "supported (timm's RegNet X and Y use 'conv1x1'). Fix: pass 'conv1x1' or 'avg'"
        )
    f32 = np.float32
    blocks = np.arange(args["depth"], dtype=f32) * f32(args["wa"]) + f32(args["w0"])
    exps = np.round(np.log(blocks / f32(args["w0"])) / f32(math.log(args["wm"])))
    quant = 8
    widths = np.round(f32(args["w0"]) * np.power(f32(args["wm"]), exps) / quant) * quant
    stage_widths, depths = np.unique(widths.astype(np.int64), return_counts=True)
    if len(stage_widths) != 4:
        cfg = {key: args[key] for key in ("w0", "wa", "wm", "depth")}
        raise ValueError(
            f"RegNetConfig {config.architecture!r}: {cfg} gives {len(stage_widths)} stage "
            f"widths {stage_widths.tolist()}; timm's RegNet needs 4. Fix: change depth, w0, wa "
            "or wm in model_args"
        )
    ratio = args["bottle_ratio"]
    plan = []
    for width, depth in zip(stage_widths.tolist(), depths.tolist(), strict=True):
        bottleneck = int(width * ratio)
        group = min(args["group_size"], bottleneck)
        bottleneck = _round_to_group(bottleneck, group, args["group_min_ratio"])
        out_chs = int(bottleneck / ratio)
        plan.append(StagePlan(out_chs, depth, group, ratio, args["se_ratio"], args["downsample"]))
    return plan


class ConvNormAct(nn.Module):
    """timm's ``ConvNormAct``: ``act(bn(conv(x)))``, ``conv`` (timm's are bias-free, padded
    ``kernel_size // 2``), then BatchNorm over its output channels and ReLU (none with
    ``apply_act=False``)."""

    def __init__(self, conv: nn.Conv2d, *, apply_act: bool = True):
        super().__init__()
        self.conv = conv
        self.bn = nn.BatchNorm2d(conv.out_channels)
        self.act = nn.ReLU() if apply_act else nn.Identity()

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, in_channels, H, W]`` -> ``[B, out_channels, H / stride, W / stride]``."""
        return self.act(self.bn(self.conv(x)))


class SEModule(nn.Module):
    """timm's ``SEModule``: ``x * sigmoid(fc2(relu(fc1(mean_hw(x)))))``, 1x1 convs with biases.

    Shape:
        ``[B, channels, H, W]`` in and out.
    """

    def __init__(self, channels: int, rd_channels: int, *, rngs: js.Rngs):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, rd_channels, 1, rngs=rngs)
        self.act = nn.ReLU()
        self.fc2 = nn.Conv2d(rd_channels, channels, 1, rngs=rngs)
        self.gate = nn.Sigmoid()

    def forward(self, x: jax.Array) -> jax.Array:
        """Each channel scaled by its gate in (0, 1)."""
        scale = x.mean(axis=(2, 3), keepdims=True)  # [B, C, 1, 1]
        return x * self.gate(self.fc2(self.act(self.fc1(scale))))


class Bottleneck(nn.Module):
    """timm's RegNet ``Bottleneck``: ``relu(conv3(se(conv2(conv1(x)))) + downsample(x))``,
    ``conv2`` grouped and strided, the SE after it (RegNetY).

    Args:
        in_chs: input channels. stage: the stage's widths and options (``StagePlan``).
        stride: ``conv2``'s stride (and the shortcut's). rngs: ``js.Rngs`` with ``params``.
    """

    def __init__(self, in_chs: int, stage: StagePlan, stride: int, *, rngs: js.Rngs):
        super().__init__()
        out_chs = stage.out_chs
        width = int(round(out_chs * stage.bottle_ratio))
        groups = width // stage.group_size
        self.conv1 = ConvNormAct(nn.Conv2d(in_chs, width, 1, bias=False, rngs=rngs))
        conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False, rngs=rngs)
        self.conv2 = ConvNormAct(conv2)
        se_width = int(round(in_chs * stage.se_ratio))
        self.se = SEModule(width, se_width, rngs=rngs) if stage.se_ratio else None
        conv3 = nn.Conv2d(width, out_chs, 1, bias=False, rngs=rngs)
        self.conv3 = ConvNormAct(conv3, apply_act=False)
        self.act3 = nn.ReLU()
        self.downsample = _shortcut(in_chs, stage, stride, rngs)

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, in_chs, H, W]`` -> ``[B, stage.out_chs, H / stride, W / stride]``."""
        branch = self.conv2(self.conv1(x))
        if self.se is not None:
            branch = self.se(branch)
        return self.act3(self.conv3(branch) + self.downsample(x))


def _shortcut(in_chs: int, stage: StagePlan, stride: int, rngs: js.Rngs) -> nn.Module:
    """timm's ``create_shortcut``: ``x`` where the shape stays, else a strided 1x1 conv and
    BatchNorm (``'conv1x1'``) or the 2x2 average pool, then an unstrided one (``'avg'``)."""
    if in_chs == stage.out_chs and stride == 1:
        return nn.Identity()
    conv_stride = stride if stage.downsample == "conv1x1" else 1
    conv = nn.Conv2d(in_chs, stage.out_chs, 1, conv_stride, bias=False, rngs=rngs)
    if stage.downsample == "conv1x1":
        return ConvNormAct(conv, apply_act=False)
    return nn.Sequential(avg_down_pool(stride), ConvNormAct(conv, apply_act=False))


class RegStage(nn.Module):
    """timm's ``RegStage``: blocks ``b1`` ... ``bN``, the first strided (stride 2)."""

    def __init__(self, in_chs: int, stage: StagePlan, *, rngs: js.Rngs):
        super().__init__()
        self.depth = stage.depth
        for index in range(self.depth):
            first = index == 0
            block_in = in_chs if first else stage.out_chs
            block = Bottleneck(block_in, stage, 2 if first else 1, rngs=rngs)
            setattr(self, f"b{index + 1}", block)

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, C_in, H, W]`` -> ``[B, out_chs, H / 2, W / 2]``."""
        for index in range(self.depth):
            x = getattr(self, f"b{index + 1}")(x)
        return x


class RegNetModel(TimmModel):
    """timm's ``RegNet`` (X and Y): ``head(s4(s3(s2(s1(stem(x))))))``.

    ``num_classes=0`` builds no ``head.fc``: the output is the pooled features
    ``[B, num_features]``.

    Built from a ``RegNetConfig``; random weights are timm's: convs normal with std
    ``sqrt(2 / fan_out)`` (``fan_out = k * k * out_channels / groups``), Linear normal (std
    0.01), biases zero, each block's ``conv3.bn`` weight zero.

    Shape:
        input ``[B, in_chans, H, W]``; output ``[B, num_classes]``.
    """

    config_class = RegNetConfig
    config: RegNetConfig

    def _build(self, args: dict[str, Any], rngs: js.Rngs) -> None:
        """``stem``, ``s1`` ... ``s4`` and ``head`` (timm's ``RegNet.__init__``)."""
        args = {**_CFG_DEFAULTS, **args}
        stem = nn.Conv2d(args["in_chans"], args["stem_width"], 3, 2, 1, bias=False, rngs=rngs)
        self.stem = ConvNormAct(stem)
        previous = args["stem_width"]
        for index, stage in enumerate(stage_plan(self.config)):
            setattr(self, f"s{index + 1}", RegStage(previous, stage, rngs=rngs))
            previous = stage.out_chs
        self.num_features = previous
        self.head = ClassifierHead(previous, self.num_classes, args["global_pool"], rngs=rngs)

    def _init_module(self, module: nn.Module, rngs: js.Rngs) -> None:
        """timm's ``regnet._init_weights`` (with ``zero_init_last``)."""
        if isinstance(module, nn.Conv2d):
            fan_out = math.prod(module.kernel_size) * module.out_channels // module.groups
            nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / fan_out), rngs=rngs)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, 0.01, rngs=rngs)
        elif isinstance(module, Bottleneck) and module.conv3.bn.weight is not None:
            nn.init.zeros_(module.conv3.bn.weight)
        bias = getattr(module, "bias", None)
        if isinstance(module, (nn.Conv2d, nn.Linear)) and bias is not None:
            nn.init.zeros_(bias)

    def forward_features(self, x: jax.Array) -> jax.Array:
        """``stem``, then ``s1`` ... ``s4``."""
        x = self.stem(x)
        for index in range(4):
            x = getattr(self, f"s{index + 1}")(x)
        return x


ARCHITECTURES = timm_architectures(RegNetModel)
DEFAULT_ARCHITECTURE = RegNetConfig.default_architecture
