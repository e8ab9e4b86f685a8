"""timm's ResNet (``timm/models/resnet.py``, timm 1.0.31) in js.nn, with timm's module names, so
that timm's files (``save_for_hf`` folders) load as they are and js writes folders timm reads.

The plain ResNet / ResNeXt / Wide ResNet variants: a 7x7 stem, max pooling, BasicBlock
(resnet18, resnet34) or Bottleneck (resnet26/50/101/152, resnext, wide_resnet) stages with a
1x1-conv downsample, global pooling and ``fc``. Names as timm's state dict: ``conv1``, ``bn1``,
``layer1.0.conv1``, ``layer2.0.downsample.0`` / ``.1``, ``fc``. Inference follows timm's eval
mode (BatchNorm with running statistics; drop rates are training-only and not built).

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

from ._base import PreTrainedModel
from ._timm import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, POOL_TYPES, TimmConfig, TimmModel
from ._timm import global_pool as _global_pool


def _plain(block: str, layers: tuple[int, ...], **extra: Any) -> dict[str, Any]:
    return {"block": block, "layers": list(layers), **extra}


class ResNetConfig(TimmConfig):
    """timm's ``config.json`` for a ResNet (see ``js.models._timm.TimmConfig``).

    ``architecture`` picks the block and the stage depths as timm registers them; ``model_args``
    may override ``layers``, ``channels``, ``cardinality`` and ``base_width`` (and set
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
        "wide_resnet50_2": _plain("bottleneck", (3, 4, 6, 3), base_width=128),
        "wide_resnet101_2": _plain("bottleneck", (3, 4, 23, 3), base_width=128),
        "resnext50_32x4d": _plain("bottleneck", (3, 4, 6, 3), cardinality=32, base_width=4),
        "resnext101_32x4d": _plain("bottleneck", (3, 4, 23, 3), cardinality=32, base_width=4),
        "resnext101_32x8d": _plain("bottleneck", (3, 4, 23, 3), cardinality=32, base_width=8),
        "resnext101_64x4d": _plain("bottleneck", (3, 4, 23, 3), cardinality=64, base_width=4),
    }
    default_architecture: ClassVar[str] = "resnet50"
    model_arg_names: ClassVar[tuple[str, ...]] = (
        *TimmConfig.model_arg_names,
        "layers",
        "channels",
        "cardinality",
        "base_width",
    )
    pretrained_defaults: ClassVar[dict[str, Any]] = {
        "input_size": [3, 224, 224],
        "pool_size": [7, 7],
        "crop_pct": 0.875,
        "interpolation": "bilinear",
        "mean": IMAGENET_DEFAULT_MEAN,
        "std": IMAGENET_DEFAULT_STD,
        "first_conv": "conv1",
        "classifier": "fc",
    }

    def feature_count(self) -> int:
        """``channels[-1] * expansion`` (512 for resnet18, 2048 for resnet50)."""
        args = self.arch_args()
        channels = args.get("channels", (64, 128, 256, 512))
        return channels[-1] * _BLOCKS[args["block"]].expansion


class BasicBlock(nn.Module):
    """timm's ``BasicBlock``: two 3x3 conv-BN pairs and the shortcut (``expansion = 1``)."""

    expansion: ClassVar[int] = 1

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
        if cardinality != 1 or base_width != 64:
            raise ValueError(
                f"BasicBlock supports cardinality=1 and base_width=64 only (as timm), got "
                f"{cardinality} and {base_width}. Fix: use a Bottleneck architecture"
            )
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, padding=1, bias=False, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(planes)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False, rngs=rngs)
        self.bn2 = nn.BatchNorm2d(planes)
        self.act2 = nn.ReLU()
        self.downsample = downsample

    def forward(self, x: jax.Array) -> jax.Array:
        """``act2(bn2(conv2(act1(bn1(conv1(x))))) + shortcut(x))``, ``[B, C, H, W]``."""
        shortcut = x if self.downsample is None else self.downsample(x)
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        return self.act2(x + shortcut)

    def last_norm(self) -> nn.BatchNorm2d:
        """The residual branch's last BatchNorm (zero-initialised, as timm's)."""
        return self.bn2


class Bottleneck(nn.Module):
    """timm's ``Bottleneck`` (ResNet v1.5: the stride on the 3x3 conv; ``expansion = 4``)."""

    expansion: ClassVar[int] = 4

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
        width = int(math.floor(planes * (base_width / 64)) * cardinality)
        outplanes = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(width)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(
            width, width, 3, stride, padding=1, groups=cardinality, bias=False, rngs=rngs
        )
        self.bn2 = nn.BatchNorm2d(width)
        self.act2 = nn.ReLU()
        self.conv3 = nn.Conv2d(width, outplanes, 1, bias=False, rngs=rngs)
        self.bn3 = nn.BatchNorm2d(outplanes)
        self.act3 = nn.ReLU()
        self.downsample = downsample

    def forward(self, x: jax.Array) -> jax.Array:
        """1x1 reduce, 3x3 (strided), 1x1 expand, plus the shortcut; ``[B, C, H, W]``."""
        shortcut = x if self.downsample is None else self.downsample(x)
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.act2(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        return self.act3(x + shortcut)

    def last_norm(self) -> nn.BatchNorm2d:
        """The residual branch's last BatchNorm (zero-initialised, as timm's)."""
        return self.bn3


_BLOCKS: dict[str, type[BasicBlock] | type[Bottleneck]] = {
    "basic": BasicBlock,
    "bottleneck": Bottleneck,
}


def _make_stage(
    block: type[BasicBlock] | type[Bottleneck],
    inplanes: int,
    planes: int,
    depth: int,
    stride: int,
    cardinality: int,
    base_width: int,
    rngs: js.Rngs,
) -> nn.Sequential:
    """timm's ``make_blocks`` for one stage (output stride 32, ``downsample_conv``)."""
    downsample = None
    if stride != 1 or inplanes != planes * block.expansion:
        downsample = nn.Sequential(
            nn.Conv2d(inplanes, planes * block.expansion, 1, stride, bias=False, rngs=rngs),
            nn.BatchNorm2d(planes * block.expansion),
        )
    blocks = []
    for index in range(depth):
        blocks.append(
            block(
                inplanes,
                planes,
                stride if index == 0 else 1,
                downsample if index == 0 else None,
                cardinality,
                base_width,
                rngs=rngs,
            )
        )
        inplanes = planes * block.expansion
    return nn.Sequential(*blocks)


class ResNetModel(TimmModel):
    """timm's ``ResNet``: ``logits = fc(pool(layer4(...layer1(maxpool(act1(bn1(conv1(x))))))))``.

    ``num_classes=0`` builds no ``fc`` (``fc`` is ``Identity``): the output is the pooled
    features ``[B, num_features]``, or the feature map with ``global_pool=''``.

    Args:
        config: a ``ResNetConfig`` (timm's ``config.json``).
        rngs: ``js.Rngs`` with ``params``, for the random initial weights (timm's: Kaiming
            normal, fan-out, for every conv; the last BatchNorm of each block zeroed).

    Shape:
        input ``[B, in_chans, H, W]``; output ``[B, num_classes]``.
    """

    config_class: ClassVar[type[ResNetConfig]] = ResNetConfig
    config: ResNetConfig

    def __init__(self, config: ResNetConfig, *, rngs: js.Rngs):
        super().__init__(config)
        args = config.arch_args()
        block = _BLOCKS[args["block"]]
        channels = list(args.get("channels", (64, 128, 256, 512)))
        layers = list(args["layers"])
        if len(channels) != len(layers):
            raise ValueError(
                f"ResNetModel: channels {channels} and layers {layers} differ in length. "
                "Fix: give one channel count per stage"
            )
        self.num_classes, self.pool_type = args["num_classes"], args["global_pool"]
        self.conv1 = nn.Conv2d(args["in_chans"], 64, 7, 2, padding=3, bias=False, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(64)
        self.act1 = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        inplanes = 64
        for index, (planes, depth) in enumerate(zip(channels, layers, strict=True)):
            stage = _make_stage(
                block,
                inplanes,
                planes,
                depth,
                1 if index == 0 else 2,
                args.get("cardinality", 1),
                args.get("base_width", 64),
                rngs,
            )
            setattr(self, f"layer{index + 1}", stage)
            inplanes = planes * block.expansion
        self.num_stages = len(layers)
        self.num_features = inplanes
        pooled = self.num_features * POOL_TYPES[self.pool_type]
        num_classes = self.num_classes
        self.fc = nn.Linear(pooled, num_classes, rngs=rngs) if num_classes > 0 else nn.Identity()
        self._init_weights(rngs)

    def _init_weights(self, rngs: js.Rngs) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(
                    module.weight, mode="fan_out", nonlinearity="relu", rngs=rngs
                )
            norm = module.last_norm() if isinstance(module, (BasicBlock, Bottleneck)) else None
            if norm is not None and norm.weight is not None:  # timm's zero_init_last
                nn.init.zeros_(norm.weight)

    def forward_features(self, x: jax.Array) -> jax.Array:
        """The last feature map ``[B, num_features, H / 32, W / 32]``."""
        x = self.maxpool(self.act1(self.bn1(self.conv1(x))))
        for index in range(self.num_stages):
            x = getattr(self, f"layer{index + 1}")(x)
        return x

    def forward_head(self, x: jax.Array, pre_logits: bool = False) -> jax.Array:
        """Global pooling, then ``fc`` unless ``pre_logits``."""
        x = _global_pool(x, self.pool_type)
        return x if pre_logits else self.fc(x)

    def forward(self, pixel_values: jax.Array) -> jax.Array:
        """Logits ``[B, num_classes]`` of images ``[B, C, H, W]`` (features if no head).

        Example:
            >>> import jax.numpy as jnp, js
            >>> config = ResNetConfig(architecture="resnet18", num_classes=10, model_args={
            ...     "layers": [1, 1, 1, 1], "channels": [8, 8, 8, 8]})
            >>> model = ResNetModel(config, rngs=js.Rngs(params=0)).eval()
            >>> forward = js.jit(lambda model, pixels: model(pixels))  # one compiled program
            >>> forward(model, jnp.ones((2, 3, 32, 32))).shape
            (2, 10)
        """
        return self.forward_head(self.forward_features(pixel_values))


ARCHITECTURES: dict[str, type[PreTrainedModel]] = dict.fromkeys(
    ResNetConfig.architectures, ResNetModel
)
DEFAULT_ARCHITECTURE: str = "resnet50"

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "BasicBlock",
    "Bottleneck",
    "ResNetConfig",
    "ResNetModel",
]
