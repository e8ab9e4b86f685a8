"""timm's ResNet (``timm/models/resnet.py``, timm 1.0.31) in js.nn, with timm's module names, so
that timm's files (``save_for_hf`` folders) load as they are and js writes folders timm reads.

The plain ResNet / ResNeXt / Wide ResNet variants: a 7x7 stem, max pooling, BasicBlock
(resnet18, resnet34) or Bottleneck (resnet26/50/101/152, resnext, wide_resnet) stages with a
1x1-conv downsample, global pooling and ``fc``. Names as timm's state dict: ``conv1``, ``bn1``,
``layer1.0.conv1``, ``layer2.0.downsample.0`` / ``.1``, ``fc``. The Bag-of-Tricks variants
(``resnet50c``/``d``/``s``/``t``, timm's ``stem_type``, ``stem_width``, ``avg_down``) replace
the 7x7 ``conv1`` by three 3x3 convs (``conv1.0``, ``conv1.1`` BN, ``conv1.3``, ``conv1.4`` BN,
``conv1.6``) and, with ``avg_down``, put a 2x2 average pool before the shortcut's 1x1 conv
(``downsample.1`` / ``.2``). Inference follows timm's eval mode (BatchNorm with running
statistics; drop rates are training-only and not built).

Example:
    >>> from js.models.resnet import ResNetConfig, ResNetModel
    >>> ResNetConfig(architecture="resnet18", num_classes=10).arch_args()["layers"]
    [2, 2, 2, 2]
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import jax

import js
from js import nn

from ._timm import POOL_TYPES, TimmConfig, TimmModel, classify, default_cfg, timm_architectures

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "BasicBlock",
    "Bottleneck",
    "ResNetConfig",
    "ResNetModel",
    "avg_down_pool",
]


def _plain(block: str, layers: tuple[int, ...], **extra: Any) -> dict[str, Any]:
    return {"block": block, "layers": list(layers), **extra}


# timm's ResNet arguments js builds from: the stages', then the stem's (and shortcut's)
_STAGE_ARGS = ("layers", "channels", "cardinality", "base_width")
_STEM_ARGS = ("stem_type", "stem_width", "avg_down")


def _deep(block: str, layers: tuple[int, ...], variant: str) -> dict[str, Any]:
    """timm's Bag-of-Tricks variant letters: c, d (deep stem 32, d with ``avg_down``), s (deep
    stem 64), t (tiered deep stem 32, ``avg_down``)."""
    stem = {
        "c": {"stem_width": 32, "stem_type": "deep"},
        "d": {"stem_width": 32, "stem_type": "deep", "avg_down": True},
        "s": {"stem_width": 64, "stem_type": "deep"},
        "t": {"stem_width": 32, "stem_type": "deep_tiered", "avg_down": True},
    }[variant]
    return _plain(block, layers, **stem)


class ResNetConfig(TimmConfig):
    """timm's ``config.json`` for a ResNet (see ``js.models._timm.TimmConfig``).

    ``architecture`` picks the block and the stage depths as timm registers them; ``model_args``
    may override ``layers``, ``channels``, ``cardinality``, ``base_width``, ``stem_type``
    (``''``, ``'deep'``, ``'deep_tiered'``), ``stem_width`` and ``avg_down`` (and set
    ``in_chans``, ``num_classes``, ``global_pool``), as ``timm.create_model`` keyword arguments.

    Example:
        >>> ResNetConfig(architecture="resnet50", num_classes=0).to_dict()["num_features"]
        2048
    """

    architectures: ClassVar[dict[str, dict[str, Any]]] = {
        "resnet18": _plain("basic", (2, 2, 2, 2)),
        "resnet34": _plain("basic", (3, 4, 6, 3)),
        "resnet26": _plain("bottleneck", (2, 2, 2, 2)),
        "resnet50": _plain("bottleneck", (3, 4, 6, 3)),
        "resnet101": _plain("bottleneck", (3, 4, 23, 3)),
        "resnet152": _plain("bottleneck", (3, 8, 36, 3)),
        "resnet200": _plain("bottleneck", (3, 24, 36, 3)),
        "resnet10t": _deep("basic", (1, 1, 1, 1), "t"),
        "resnet14t": _deep("bottleneck", (1, 1, 1, 1), "t"),
        "resnet18d": _deep("basic", (2, 2, 2, 2), "d"),
        "resnet34d": _deep("basic", (3, 4, 6, 3), "d"),
        "resnet26d": _deep("bottleneck", (2, 2, 2, 2), "d"),
        "resnet26t": _deep("bottleneck", (2, 2, 2, 2), "t"),
        "resnet50c": _deep("bottleneck", (3, 4, 6, 3), "c"),
        "resnet50d": _deep("bottleneck", (3, 4, 6, 3), "d"),
        "resnet50s": _deep("bottleneck", (3, 4, 6, 3), "s"),
        "resnet50t": _deep("bottleneck", (3, 4, 6, 3), "t"),
        "resnet101c": _deep("bottleneck", (3, 4, 23, 3), "c"),
        "resnet101d": _deep("bottleneck", (3, 4, 23, 3), "d"),
        "resnet101s": _deep("bottleneck", (3, 4, 23, 3), "s"),
        "resnet152c": _deep("bottleneck", (3, 8, 36, 3), "c"),
        "resnet152d": _deep("bottleneck", (3, 8, 36, 3), "d"),
        "resnet152s": _deep("bottleneck", (3, 8, 36, 3), "s"),
        "resnet200d": _deep("bottleneck", (3, 24, 36, 3), "d"),
        "wide_resnet50_2": _plain("bottleneck", (3, 4, 6, 3), base_width=128),
        "wide_resnet101_2": _plain("bottleneck", (3, 4, 23, 3), base_width=128),
        "resnext50_32x4d": _plain("bottleneck", (3, 4, 6, 3), cardinality=32, base_width=4),
        "resnext101_32x4d": _plain("bottleneck", (3, 4, 23, 3), cardinality=32, base_width=4),
        "resnext101_32x8d": _plain("bottleneck", (3, 4, 23, 3), cardinality=32, base_width=8),
        "resnext101_64x4d": _plain("bottleneck", (3, 4, 23, 3), cardinality=64, base_width=4),
    }
    default_architecture: ClassVar[str] = "resnet50"
    model_arg_names: ClassVar[tuple[str, ...]] = (*_STAGE_ARGS, *_STEM_ARGS)
    pretrained_defaults: ClassVar[dict[str, Any]] = default_cfg(first_conv="conv1", classifier="fc")

    def feature_count(self) -> int:
        """``channels[-1] * expansion`` (512 for resnet18, 2048 for resnet50)."""
        args = self.arch_args()
        channels = args.get("channels", (64, 128, 256, 512))
        return channels[-1] * _BLOCKS[args["block"]].expansion

    def to_dict(self) -> dict[str, Any]:
        """timm's ``config.json``; a config made in js with a deep stem names ``conv1.0`` as
        its ``first_conv``, as timm's pretrained configs of those variants do."""
        values = super().to_dict()
        if self.arch_args().get("stem_type") and getattr(self, "pretrained_cfg", None) is None:
            values["pretrained_cfg"]["first_conv"] = "conv1.0"
        return values


class _ResidualBlock(nn.Module):
    """What timm's ``BasicBlock`` and ``Bottleneck`` share: a residual branch of conv-BN-ReLU
    layers ``conv1``, ``bn1``, ``act1``, ``conv2``, ... (the last ReLU after the sum) and the
    shortcut, ``x`` or ``downsample(x)``. A block is its convolutions (``_convs``).

    Args:
        inplanes: the input channels.
        planes: the block's base width; it outputs ``planes * expansion`` channels.
        stride: the stride of the block's strided conv (and of ``downsample``).
        downsample: the shortcut's conv-BN (timm's ``downsample_conv``), or ``None`` for ``x``.
        cardinality: the 3x3 conv's groups (ResNeXt).
        base_width: the width of each group at ``planes=64`` (Wide ResNet, ResNeXt).
        rngs: ``js.Rngs`` with ``params``.

    Shape:
        ``[B, inplanes, H, W]`` -> ``[B, planes * expansion, H / stride, W / stride]``.
    """

    expansion: ClassVar[int]

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        cardinality: int = 1,
        base_width: int = 64,
        *,
        rngs: js.Rngs,
    ):
        super().__init__()
        convs = self._convs(inplanes, planes, stride, cardinality, base_width, rngs)
        for index, conv in enumerate(convs, start=1):  # timm's order: conv1, bn1, act1, conv2, ...
            setattr(self, f"conv{index}", conv)
            setattr(self, f"bn{index}", nn.BatchNorm2d(conv.out_channels))
            setattr(self, f"act{index}", nn.ReLU())
        self.num_convs = len(convs)
        self.downsample = downsample

    def _convs(
        self,
        inplanes: int,
        planes: int,
        stride: int,
        cardinality: int,
        base_width: int,
        rngs: js.Rngs,
    ) -> list[nn.Conv2d]:
        """The residual branch's convolutions, in order (each gets a BatchNorm and a ReLU)."""
        raise NotImplementedError(f"{type(self).__name__} does not define _convs")

    def _layer(self, kind: str, index: int) -> nn.Module:
        return getattr(self, f"{kind}{index}")  # conv1, bn1, act1, ... as timm names them

    def forward(self, x: jax.Array) -> jax.Array:
        """``act_n(bn_n(conv_n(...act1(bn1(conv1(x))))) + shortcut(x))``, ``[B, C, H, W]``."""
        shortcut = x if self.downsample is None else self.downsample(x)
        for index in range(1, self.num_convs + 1):
            x = self._layer("bn", index)(self._layer("conv", index)(x))
            if index == self.num_convs:  # the shortcut joins before the last ReLU
                x = x + shortcut
            x = self._layer("act", index)(x)
        return x

    def last_norm(self) -> nn.BatchNorm2d:
        """The residual branch's last BatchNorm (zero-initialised, as timm's)."""
        norm = self._layer("bn", self.num_convs)
        assert isinstance(norm, nn.BatchNorm2d)  # as __init__ builds it
        return norm

    @classmethod
    def _stage(
        cls,
        inplanes: int,
        planes: int,
        depth: int,
        stride: int,
        avg_down: bool,
        *,
        rngs: js.Rngs,
        **kwargs: int,
    ) -> nn.Sequential:
        """timm's ``make_blocks`` for one stage of ``depth`` blocks (output stride 32): the
        first block's shortcut is a strided 1x1 conv and BatchNorm (``downsample_conv``), or
        with ``avg_down`` a 2x2 average pool (``Identity`` at stride 1), then an unstrided 1x1
        conv and BatchNorm (``downsample_avg``)."""
        outplanes = planes * cls.expansion
        downsample = None
        if stride != 1 or inplanes != outplanes:
            conv_stride = 1 if avg_down else stride
            layers = [
                nn.Conv2d(inplanes, outplanes, 1, conv_stride, bias=False, rngs=rngs),
                nn.BatchNorm2d(outplanes),
            ]
            if avg_down:
                layers.insert(0, avg_down_pool(stride))
            downsample = nn.Sequential(*layers)
        blocks = [cls(inplanes, planes, stride, downsample, **kwargs, rngs=rngs)]
        for _ in range(1, depth):
            blocks.append(cls(outplanes, planes, 1, None, **kwargs, rngs=rngs))
        return nn.Sequential(*blocks)


class BasicBlock(_ResidualBlock):
    """timm's ``BasicBlock``: ``act2(bn2(conv2(act1(bn1(conv1(x))))) + shortcut(x))``, two 3x3
    convs, the first strided (``expansion = 1``; ``cardinality=1`` and ``base_width=64`` only)."""

    expansion: ClassVar[int] = 1

    def _convs(self, inplanes, planes, stride, cardinality, base_width, rngs):
        if cardinality != 1 or base_width != 64:
            raise ValueError(
                f"BasicBlock supports cardinality=1 and base_width=64 only (as timm), got "
                f"{cardinality} and {base_width}. Fix: use a Bottleneck architecture"
            )
        return [
            nn.Conv2d(inplanes, planes, 3, stride, padding=1, bias=False, rngs=rngs),
            nn.Conv2d(planes, planes, 3, padding=1, bias=False, rngs=rngs),
        ]


class Bottleneck(_ResidualBlock):
    """timm's ``Bottleneck`` (ResNet v1.5: the stride on the 3x3 conv; ``expansion = 4``): 1x1
    reduce to ``width``, 3x3 (strided, ``cardinality`` groups), 1x1 expand, plus the shortcut."""

    expansion: ClassVar[int] = 4

    def _convs(self, inplanes, planes, stride, cardinality, base_width, rngs):
        width = int(math.floor(planes * (base_width / 64)) * cardinality)
        return [
            nn.Conv2d(inplanes, width, 1, bias=False, rngs=rngs),
            nn.Conv2d(
                width, width, 3, stride, padding=1, groups=cardinality, bias=False, rngs=rngs
            ),
            nn.Conv2d(width, planes * self.expansion, 1, bias=False, rngs=rngs),
        ]


def avg_down_pool(stride: int) -> nn.Module:
    """timm's ``downsample_avg`` pool (ResNet-D, RegNet's ``downsample='avg'``): the
    shortcut's 2x2 mean at ``stride`` 2 (partial windows at the edge), ``Identity`` at 1."""
    if stride == 1:
        return nn.Identity()
    return nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False)


def _stem(args: dict[str, Any], rngs: js.Rngs) -> tuple[nn.Module, int]:
    """timm's ``conv1`` and its output channels: one 7x7 stride-2 conv (64 channels), or for a
    ``'deep'`` stem three 3x3 convs, the first stride 2, with BatchNorm and ReLU between them
    (widths ``stem_width``, ``stem_width``, ``2 * stem_width``; ``'deep_tiered'`` narrows the
    first to ``3 * (stem_width // 4)``)."""
    stem_type, width = args.get("stem_type", ""), args.get("stem_width", 64)
    in_chans = args["in_chans"]
    if stem_type not in ("", "deep", "deep_tiered"):
        raise ValueError(
            f"ResNetModel: stem_type {stem_type!r} is not one of ['', 'deep', 'deep_tiered']. "
            "Fix: pass one of those in model_args"
        )
    if not stem_type:
        return nn.Conv2d(in_chans, 64, 7, 2, padding=3, bias=False, rngs=rngs), 64
    first = 3 * (width // 4) if stem_type == "deep_tiered" else width
    conv1 = nn.Sequential(
        nn.Conv2d(in_chans, first, 3, 2, padding=1, bias=False, rngs=rngs),
        nn.BatchNorm2d(first),
        nn.ReLU(),
        nn.Conv2d(first, width, 3, padding=1, bias=False, rngs=rngs),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1, bias=False, rngs=rngs),
    )
    return conv1, 2 * width


_BLOCKS: dict[str, type[_ResidualBlock]] = {
    "basic": BasicBlock,
    "bottleneck": Bottleneck,
}


class ResNetModel(TimmModel):
    """timm's ``ResNet``: ``logits = fc(pool(layer4(...layer1(maxpool(act1(bn1(conv1(x))))))))``.

    ``num_classes=0`` builds no ``fc`` (``fc`` is ``Identity``): the output is the pooled
    features ``[B, num_features]``, or the feature map with ``global_pool=''``.

    Built from a ``ResNetConfig``; random weights are timm's: Kaiming normal (fan-out) for every
    conv, the last BatchNorm of each block zeroed.

    Shape:
        input ``[B, in_chans, H, W]``; output ``[B, num_classes]``.
    """

    config_class: ClassVar[type[ResNetConfig]] = ResNetConfig
    config: ResNetConfig

    def _build(self, args: dict[str, Any], rngs: js.Rngs) -> None:
        """The stem, ``layer1`` ... ``layer4`` and ``fc`` (timm's ``ResNet.__init__``)."""
        block = _BLOCKS[args["block"]]
        channels = list(args.get("channels", (64, 128, 256, 512)))
        layers = list(args["layers"])
        if len(channels) != len(layers):
            raise ValueError(
                f"ResNetModel: channels {channels} and layers {layers} differ in length. "
                "Fix: give one channel count per stage"
            )
        self.pool_type = args["global_pool"]
        self.conv1, inplanes = _stem(args, rngs)
        self.bn1 = nn.BatchNorm2d(inplanes)
        self.act1 = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        for index, (planes, depth) in enumerate(zip(channels, layers, strict=True)):
            stage = block._stage(
                inplanes,
                planes,
                depth,
                1 if index == 0 else 2,
                args.get("avg_down", False),
                rngs=rngs,
                cardinality=args.get("cardinality", 1),
                base_width=args.get("base_width", 64),
            )
            setattr(self, f"layer{index + 1}", stage)
            inplanes = planes * block.expansion
        self.num_stages = len(layers)
        self.num_features = inplanes
        pooled = self.num_features * POOL_TYPES[self.pool_type]
        num_classes = self.num_classes
        self.fc = nn.Linear(pooled, num_classes, rngs=rngs) if num_classes > 0 else nn.Identity()

    def _init_module(self, module: nn.Module, rngs: js.Rngs) -> None:
        """Kaiming normal (fan-out) for every conv; each block's last BatchNorm weight zeroed
        (timm's ``zero_init_last``)."""
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu", rngs=rngs)
        elif isinstance(module, _ResidualBlock):
            weight = module.last_norm().weight
            if weight is not None:
                nn.init.zeros_(weight)

    def forward_features(self, x: jax.Array) -> jax.Array:
        """The stem (``conv1``, ``bn1``, ``act1``, ``maxpool``), then ``layer1`` ... ``layer4``."""
        x = self.maxpool(self.act1(self.bn1(self.conv1(x))))
        for index in range(self.num_stages):
            x = getattr(self, f"layer{index + 1}")(x)
        return x

    def forward_head(self, x: jax.Array, pre_logits: bool = False) -> jax.Array:
        """Global pooling, then ``fc`` unless ``pre_logits``."""
        return classify(x, self.pool_type, self.fc, pre_logits)


ARCHITECTURES = timm_architectures(ResNetModel)
DEFAULT_ARCHITECTURE = ResNetConfig.default_architecture
