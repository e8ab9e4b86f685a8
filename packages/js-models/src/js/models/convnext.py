"""timm's ConvNeXt (``timm/models/convnext.py``, timm 1.0.31) in js.nn, with timm's module names,
so that timm's files load as they are and js writes folders timm reads.

The patch-stem ConvNeXt: ``stem`` (4x4 conv, LayerNorm2d), four ``stages`` (a LayerNorm2d + 2x2
conv ``downsample`` from the second on, then ``blocks``: 7x7 depthwise ``conv_dw``, ``norm``,
``mlp.fc1`` / GELU / ``mlp.fc2``, layer scale ``gamma``, residual) and ``head`` (pool,
``head.norm``, ``head.fc``). The small timm variants (atto, femto, pico, nano) use
``conv_mlp=True`` (LayerNorm2d and 1x1 convs over ``[B, C, H, W]``); tiny and up use
``conv_mlp=False`` (channels-last LayerNorm and Linear layers): each builds the layers its file
holds. ConvNeXt V2 (``convnextv2_*``, timm's ``use_grn=True, ls_init_value=None``) adds a
Global Response Norm between the MLP's layers (``mlp.grn.weight`` / ``.bias``) and has no
``gamma``. Eval mode: drop path and head dropout are training-only and not built.

Example:
    >>> from js.models.convnext import ConvNeXtConfig
    >>> for name in ("convnext_atto", "convnext_tiny"):
    ...     print(name, ConvNeXtConfig(architecture=name).arch_args()["conv_mlp"])
    convnext_atto True
    convnext_tiny False
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp

import js
from js import nn

from ._timm import TimmConfig, TimmModel, default_cfg, timm_architectures, trunc_normal_init
from ._timm import global_pool as _global_pool

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "ConvNeXtBlock",
    "ConvNeXtConfig",
    "ConvNeXtModel",
    "ConvNeXtStage",
    "GlobalResponseNorm",
    "LayerNorm2d",
    "Mlp",
]


def _arch(depths: tuple[int, ...], dims: tuple[int, ...], **extra: Any) -> dict[str, Any]:
    return {"depths": list(depths), "dims": list(dims), "conv_mlp": False, **extra}


_SMALL = {"conv_mlp": True}
_V2 = {"use_grn": True, "ls_init_value": None}


def _family() -> dict[str, dict[str, Any]]:
    """timm's registered ConvNeXt (V1) and ConvNeXt V2 architectures."""
    archs = {
        "convnext_atto": _arch((2, 2, 6, 2), (40, 80, 160, 320), **_SMALL),
        "convnext_femto": _arch((2, 2, 6, 2), (48, 96, 192, 384), **_SMALL),
        "convnext_pico": _arch((2, 2, 6, 2), (64, 128, 256, 512), **_SMALL),
        "convnext_nano": _arch((2, 2, 8, 2), (80, 160, 320, 640), **_SMALL),
        "convnext_tiny": _arch((3, 3, 9, 3), (96, 192, 384, 768)),
        "convnext_small": _arch((3, 3, 27, 3), (96, 192, 384, 768)),
        "convnext_base": _arch((3, 3, 27, 3), (128, 256, 512, 1024)),
        "convnext_large": _arch((3, 3, 27, 3), (192, 384, 768, 1536)),
        "convnext_xlarge": _arch((3, 3, 27, 3), (256, 512, 1024, 2048)),
        "convnext_xxlarge": _arch((3, 4, 30, 3), (384, 768, 1536, 3072), norm_eps=1e-5),
    }
    # ConvNeXt V2: V1's sizes (and huge) with the GRN and without layer scale
    for size in ("atto", "femto", "pico", "nano", "tiny", "small", "base", "large"):
        archs[f"convnextv2_{size}"] = archs[f"convnext_{size}"] | _V2
    archs["convnextv2_huge"] = _arch((3, 3, 27, 3), (352, 704, 1408, 2816), **_V2)
    return archs


class ConvNeXtConfig(TimmConfig):
    """timm's ``config.json`` for a ConvNeXt (see ``js.models._timm.TimmConfig``).

    ``architecture`` picks ``depths``, ``dims`` and ``conv_mlp`` as timm registers them;
    ``model_args`` may override those and ``kernel_sizes``, ``patch_size``, ``ls_init_value``
    (``None``: no layer scale), ``norm_eps``, ``conv_bias``, ``use_grn`` (as
    ``timm.create_model`` keyword arguments).

    Example:
        >>> ConvNeXtConfig(architecture="convnext_atto").to_dict()["num_features"]
        320
    """

    architectures: ClassVar[dict[str, dict[str, Any]]] = _family()
    default_architecture: ClassVar[str] = "convnext_tiny"
    model_arg_names: ClassVar[tuple[str, ...]] = (
        "depths",
        "dims",
        "conv_mlp",
        "kernel_sizes",
        "patch_size",
        "ls_init_value",
        "norm_eps",
        "conv_bias",
        "use_grn",
    )
    pretrained_defaults: ClassVar[dict[str, Any]] = default_cfg(
        interpolation="bicubic", first_conv="stem.0", classifier="head.fc"
    )

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if self.global_pool == "catavgmax":
            raise ValueError(
                "ConvNeXtConfig: global_pool 'catavgmax' doubles the pooled width, which timm's "
                "ConvNeXt head refuses. Fix: pass global_pool='avg'"
            )

    def feature_count(self) -> int:
        """``dims[-1]`` (320 for convnext_atto, 768 for convnext_tiny)."""
        return int(self.arch_args()["dims"][-1])


class LayerNorm2d(nn.LayerNorm):
    """timm's ``LayerNorm2d``: LayerNorm over the channels of ``[B, C, H, W]`` (eps 1e-6)."""

    def forward(self, x: jax.Array) -> jax.Array:
        """Normalise each position's ``C`` values; ``[B, C, H, W]`` in and out."""
        return jnp.transpose(super().forward(jnp.transpose(x, (0, 2, 3, 1))), (0, 3, 1, 2))


class GlobalResponseNorm(nn.Module):
    """timm's ``GlobalResponseNorm`` (ConvNeXt V2, https://arxiv.org/abs/2301.00808):
    ``x + bias + weight * x * n``, ``n`` each channel's spatial L2 norm over the mean of those
    norms across channels (``+ eps``).

    Args:
        dim: the channels. eps: added to the mean norm (1e-6).
        channels_last: ``[B, H, W, C]`` input (timm's Linear MLP), else ``[B, C, H, W]``.

    Weights: ``weight`` and ``bias`` ``[dim]``, zeros (the layer starts as the identity).
    """

    def __init__(self, dim: int, eps: float = 1e-6, channels_last: bool = True):
        super().__init__()
        self.eps = eps
        self.channels_last = channels_last
        self.weight = nn.Parameter(jnp.zeros((dim,)))
        self.bias = nn.Parameter(jnp.zeros((dim,)))

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, H, W, C]`` (``channels_last``) or ``[B, C, H, W]`` in and out."""
        spatial, channel = ((1, 2), -1) if self.channels_last else ((2, 3), 1)
        shape = (1, 1, 1, -1) if self.channels_last else (1, -1, 1, 1)
        norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=spatial, keepdims=True))  # [B, 1, 1, C]
        norm = norm / (jnp.mean(norm, axis=channel, keepdims=True) + self.eps)
        weight, bias = self.weight.value.reshape(shape), self.bias.value.reshape(shape)
        return x + (bias + weight * (x * norm))


class Mlp(nn.Module):
    """timm's ``Mlp``: ``fc2(gelu(fc1(x)))``, 1x1 convs (``use_conv``) or Linear layers; with
    ``use_grn`` timm's ``GlobalResponseNormMlp``, ``fc2(grn(gelu(fc1(x))))``."""

    def __init__(
        self, features: int, hidden: int, use_conv: bool, use_grn: bool = False, *, rngs: js.Rngs
    ):
        super().__init__()
        if use_conv:
            self.fc1 = nn.Conv2d(features, hidden, 1, rngs=rngs)
            self.fc2 = nn.Conv2d(hidden, features, 1, rngs=rngs)
        else:
            self.fc1 = nn.Linear(features, hidden, rngs=rngs)
            self.fc2 = nn.Linear(hidden, features, rngs=rngs)
        self.act = nn.GELU()
        self.grn = GlobalResponseNorm(hidden, channels_last=not use_conv) if use_grn else None

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, C, H, W]`` (convs) or ``[..., C]`` (Linear; ``[B, H, W, C]`` with the GRN)."""
        x = self.act(self.fc1(x))
        return self.fc2(x if self.grn is None else self.grn(x))


class ConvNeXtBlock(nn.Module):
    """timm's ``ConvNeXtBlock``: ``x + gamma * mlp(norm(conv_dw(x)))`` (channels kept; no
    ``gamma`` when ``ls_init_value`` is None; ``use_grn``: ConvNeXt V2's MLP)."""

    def __init__(
        self,
        dim: int,
        kernel_size: int,
        conv_mlp: bool,
        ls_init_value: float | None,
        eps: float,
        conv_bias: bool,
        use_grn: bool = False,
        *,
        rngs: js.Rngs,
    ):
        super().__init__()
        self.use_conv_mlp = conv_mlp
        padding = kernel_size // 2
        self.conv_dw = nn.Conv2d(
            dim, dim, kernel_size, padding=padding, groups=dim, bias=conv_bias, rngs=rngs
        )
        self.norm = LayerNorm2d(dim, eps=eps) if conv_mlp else nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, 4 * dim, conv_mlp, use_grn, rngs=rngs)
        has_gamma = ls_init_value is not None
        self.gamma = nn.Parameter(jnp.full((dim,), ls_init_value or 0.0)) if has_gamma else None

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, C, H, W]`` in and out."""
        shortcut = x
        x = self.conv_dw(x)
        if self.use_conv_mlp:
            x = self.mlp(self.norm(x))
        else:  # channels last for LayerNorm and Linear, as timm
            x = jnp.transpose(self.mlp(self.norm(jnp.transpose(x, (0, 2, 3, 1)))), (0, 3, 1, 2))
        if self.gamma is not None:
            x = x * self.gamma.value.reshape(1, -1, 1, 1)
        return x + shortcut


class ConvNeXtStage(nn.Module):
    """timm's ``ConvNeXtStage``: ``downsample`` (LayerNorm2d, 2x2 stride-2 conv) then ``blocks``."""

    def __init__(
        self,
        in_chs: int,
        out_chs: int,
        stride: int,
        depth: int,
        args: dict[str, Any],
        kernel_size: int,
        *,
        rngs: js.Rngs,
    ):
        super().__init__()
        eps, bias = args["norm_eps"], args["conv_bias"]
        if in_chs != out_chs or stride > 1:
            kernel = 2 if stride > 1 else 1
            self.downsample = nn.Sequential(
                LayerNorm2d(in_chs, eps=eps),
                nn.Conv2d(in_chs, out_chs, kernel, stride, bias=bias, rngs=rngs),
            )
        else:
            self.downsample = nn.Identity()
        self.blocks = nn.Sequential(
            *(
                ConvNeXtBlock(
                    out_chs,
                    kernel_size,
                    args["conv_mlp"],
                    args["ls_init_value"],
                    eps,
                    bias,
                    args.get("use_grn", False),
                    rngs=rngs,
                )
                for _ in range(depth)
            )
        )

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, in_chs, H, W]`` -> ``[B, out_chs, H / stride, W / stride]``."""
        return self.blocks(self.downsample(x))


class NormMlpClassifierHead(nn.Module):
    """timm's ``NormMlpClassifierHead`` without a hidden layer: pool, ``norm``, ``fc``."""

    def __init__(
        self, features: int, num_classes: int, pool_type: str, eps: float, *, rngs: js.Rngs
    ):
        super().__init__()
        self.pool_type = pool_type
        self.norm = LayerNorm2d(features, eps=eps)
        if num_classes <= 0:
            self.fc = nn.Identity()
        elif pool_type:
            self.fc = nn.Linear(features, num_classes, rngs=rngs)
        else:  # timm's head on an unpooled map is a 1x1 conv
            self.fc = nn.Conv2d(features, num_classes, 1, rngs=rngs)

    def forward(self, x: jax.Array, pre_logits: bool = False) -> jax.Array:
        """``[B, C, H, W]`` -> ``[B, num_classes]`` (``[B, C]`` features with ``pre_logits``)."""
        x = _global_pool(x, self.pool_type)
        if self.pool_type:  # the pooled [B, C] as a 1x1 map, for LayerNorm2d
            x = self.norm(x[:, :, None, None])[:, :, 0, 0]
        else:
            x = self.norm(x)
        return x if pre_logits else self.fc(x)


class ConvNeXtModel(TimmModel):
    """timm's ``ConvNeXt`` (patch stem, ``head_norm_first=False``).

    ``num_classes=0`` builds no ``head.fc``: the output is the pooled, normalised features
    ``[B, num_features]``.

    Built from a ``ConvNeXtConfig``; random weights are timm's: truncated normal (std 0.02) for
    convs and Linear layers, zero biases, ``gamma`` = ``ls_init_value``.

    Shape:
        input ``[B, in_chans, H, W]`` with H, W multiples of 32; output ``[B, num_classes]``.

    Example:
        >>> import js
        >>> tiny = {"depths": [1, 1, 1, 1], "dims": [8, 8, 8, 16]}
        >>> config = ConvNeXtConfig(architecture="convnext_atto", num_classes=3, model_args=tiny)
        >>> model = ConvNeXtModel(config, rngs=js.Rngs(params=0))
        >>> model.num_features, [name for name in model.state_dict() if name.startswith("head")]
        (16, ['head.norm.weight', 'head.norm.bias', 'head.fc.weight', 'head.fc.bias'])
    """

    config_class: ClassVar[type[ConvNeXtConfig]] = ConvNeXtConfig
    config: ConvNeXtConfig

    def _build(self, args: dict[str, Any], rngs: js.Rngs) -> None:
        """``stem``, ``stages`` and ``head`` (timm's ``ConvNeXt.__init__``)."""
        args = {"ls_init_value": 1e-6, "norm_eps": 1e-6, "conv_bias": True, **args}
        args["norm_eps"] = 1e-6 if args["norm_eps"] is None else args["norm_eps"]
        dims, depths = list(args["dims"]), list(args["depths"])
        kernel_sizes = args.get("kernel_sizes", 7)
        if isinstance(kernel_sizes, int):
            kernel_sizes = [kernel_sizes] * len(depths)
        if not len(dims) == len(depths) == len(kernel_sizes) == 4:
            raise ValueError(
                f"ConvNeXtModel: expected 4 stages, got depths {depths}, dims {dims}, "
                f"kernel_sizes {kernel_sizes}. Fix: give four of each"
            )
        patch = args.get("patch_size", 4)
        self.stem = nn.Sequential(
            nn.Conv2d(args["in_chans"], dims[0], patch, patch, bias=args["conv_bias"], rngs=rngs),
            LayerNorm2d(dims[0], eps=args["norm_eps"]),
        )
        stages, previous = [], dims[0]
        for index in range(4):
            stride = 1 if index == 0 else 2
            stages.append(
                ConvNeXtStage(
                    previous, dims[index], stride, depths[index], args, kernel_sizes[index],
                    rngs=rngs,
                )
            )  # fmt: skip
            previous = dims[index]
        self.stages = nn.Sequential(*stages)
        self.num_features = previous
        self.head = NormMlpClassifierHead(
            previous, self.num_classes, args["global_pool"], args["norm_eps"], rngs=rngs
        )

    _init_module = trunc_normal_init

    def forward_features(self, x: jax.Array) -> jax.Array:
        """``stem``, then the four ``stages``."""
        return self.stages(self.stem(x))


ARCHITECTURES = timm_architectures(ConvNeXtModel)
DEFAULT_ARCHITECTURE = ConvNeXtConfig.default_architecture
