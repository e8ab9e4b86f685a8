"""timm's Vision Transformer and DeiT (``timm/models/vision_transformer.py``, ``deit.py``, timm
1.0.31) in js.nn, with timm's module names, so that timm's files load as they are and js writes
folders timm reads.

``patch_embed.proj`` (a strided conv), ``cls_token`` (and DeiT's ``dist_token``, the register
ViTs' ``reg_token``) before the patches, ``pos_embed`` added over all of them (over the patches
only with ``no_embed_class``: DeiT III, the register ViTs; resized to the image's patch grid with
``dynamic_img_size``), pre-norm ``blocks`` (``norm1``, fused
``attn.qkv``, ``attn.proj``, layer scale ``ls1.gamma`` where ``init_values`` is set, ``norm2``,
``mlp.fc1`` / GELU / ``mlp.fc2``, ``ls2.gamma``), then ``norm`` (or ``fc_norm`` after average
pooling) and ``head`` (DeiT's distilled variants add ``head_dist``; eval mode averages the two).
Dropouts are training-only and not built.

Example:
    >>> from js.models.timm_vit import VisionTransformerConfig
    >>> config = VisionTransformerConfig(architecture="deit_small_distilled_patch16_224")
    >>> config.arch_args()["distilled"], config.to_dict()["num_features"]
    (True, 384)
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp

import js
from js import nn
from js.nn import functional as F

from ._timm import TimmConfig, TimmModel, default_cfg, timm_architectures, trunc_normal_init
from ._vision import pair, patch_grid, patchify, resize_positions
from .convnext import Mlp

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "Attention",
    "Block",
    "LayerScale",
    "VisionTransformerConfig",
    "VisionTransformerModel",
]

# global_pool values the ViT head takes (timm's 'token' reads the class token).
VIT_POOL_TYPES = ("token", "avg", "")


# model_args every timm ViT-like constructor takes (ViT, DeiT, EVA)
TRANSFORMER_ARGS = (
    "img_size",
    "patch_size",
    "embed_dim",
    "depth",
    "num_heads",
    "mlp_ratio",
    "qkv_bias",
    "init_values",
    "class_token",
    "dynamic_img_size",
)
# constructor defaults of the options js builds (timm's VisionTransformer's)
_VIT_DEFAULTS = {
    "img_size": 224,
    "mlp_ratio": 4.0,
    "qkv_bias": True,
    "init_values": None,
    "class_token": True,
    "fc_norm": None,
    "distilled": False,
    "reg_tokens": 0,
    "no_embed_class": False,
    "dynamic_img_size": False,
}
# timm's model sizes: width, depth, heads
SIZES = {"tiny": (192, 12, 3), "small": (384, 12, 6), "base": (768, 12, 12)}
# DeiT III (deit.py): size, width, depth, heads, image sizes
_DEIT3 = (
    ("small", 384, 12, 6, (224, 384)),
    ("medium", 512, 12, 8, (224,)),
    ("base", 768, 12, 12, (224, 384)),
    ("large", 1024, 24, 16, (224, 384)),
)
_DEIT3_OPTIONS = {"no_embed_class": True, "init_values": 1e-6}
# timm's register ViTs with average pooling: size, width, depth, heads, init_values, registers
_REGISTER_VITS = (
    ("medium", 512, 12, 8, 1e-5, 1),
    ("medium", 512, 12, 8, 1e-5, 4),
    ("betwixt", 640, 12, 10, 1e-5, 4),
    ("base", 768, 12, 12, None, 4),
)
_REGISTER_OPTIONS = {"class_token": False, "no_embed_class": True, "global_pool": "avg"}
# DINOv2's backbones (518x518 images, no classifier), with or without 4 registers
_DINOV2 = {"img_size": 518, "init_values": 1e-5, "num_classes": 0}
_DINOV2_REGISTERS = {"reg_tokens": 4, "no_embed_class": True}


def arch(patch: int, dim: int, depth: int, heads: int, **extra: Any) -> dict[str, Any]:
    """A registered architecture's constructor arguments (``extra`` after the four sizes)."""
    return {"patch_size": patch, "embed_dim": dim, "depth": depth, "num_heads": heads, **extra}


def _family() -> dict[str, dict[str, Any]]:
    """timm's registered ViT and DeiT 224x224 architectures of the three sizes (and ViT-Large),
    DeiT III's, the register ViTs' (``reg_tokens``, average pooling, 256x256) and DINOv2's."""
    archs: dict[str, dict[str, Any]] = {}
    for size, (dim, depth, heads) in SIZES.items():
        for patch in (16, 32) if size != "tiny" else (16,):
            archs[f"vit_{size}_patch{patch}_224"] = arch(patch, dim, depth, heads)
        archs[f"deit_{size}_patch16_224"] = arch(16, dim, depth, heads)
        archs[f"deit_{size}_distilled_patch16_224"] = arch(16, dim, depth, heads, distilled=True)
    archs["vit_large_patch16_224"] = arch(16, 1024, 24, 16)
    for size, dim, depth, heads, images in _DEIT3:
        for image in images:
            sizes = arch(16, dim, depth, heads, img_size=image)
            archs[f"deit3_{size}_patch16_{image}"] = {**sizes, **_DEIT3_OPTIONS}
    for size, dim, depth, heads, scale, count in _REGISTER_VITS:
        sizes = arch(16, dim, depth, heads, img_size=256, reg_tokens=count, init_values=scale)
        archs[f"vit_{size}_patch16_reg{count}_gap_256"] = {**sizes, **_REGISTER_OPTIONS}
    for size, (dim, depth, heads) in {**SIZES, "large": (1024, 24, 16)}.items():
        if size != "tiny":
            archs[f"vit_{size}_patch14_dinov2"] = {**arch(14, dim, depth, heads), **_DINOV2}
            registers = {**archs[f"vit_{size}_patch14_dinov2"], **_DINOV2_REGISTERS}
            archs[f"vit_{size}_patch14_reg4_dinov2"] = registers
    return archs


class VisionTransformerConfig(TimmConfig):
    """timm's ``config.json`` for a ViT or DeiT (see ``js.models._timm.TimmConfig``).

    ``architecture`` picks the patch size, width, depth and heads as timm registers them
    (``deit_*_distilled_*`` adds the distillation token); ``model_args`` may override those and
    ``img_size``, ``mlp_ratio``, ``qkv_bias``, ``init_values`` (layer scale), ``class_token``,
    ``fc_norm``, ``reg_tokens``, ``no_embed_class`` and ``dynamic_img_size``. ``global_pool`` is
    ``'token'`` (timm's default; the register ViTs' is ``'avg'``), ``'avg'`` or ``''``;
    ``num_classes`` 1000 (DINOv2's: 0).
    """

    defaults = {"num_classes": 1000, "global_pool": "token"}
    architectures = _family()
    default_architecture = "vit_base_patch16_224"
    model_arg_names = (*TRANSFORMER_ARGS, "fc_norm", "reg_tokens", "no_embed_class")
    pool_types = VIT_POOL_TYPES
    pretrained_defaults = default_cfg(
        interpolation="bicubic",
        crop_pct=0.9,
        first_conv="patch_embed.proj",
        classifier="head",
        fixed_input_size=True,
    )

    def __init__(self, **kwargs: Any):
        # an architecture registered with its own pooling or classes (the register ViTs' 'avg',
        # DINOv2's 0, as timm's pretrained configs) defaults to them
        registered = self.architectures.get(kwargs.get("architecture", self.default_architecture))
        for key in ("num_classes", "global_pool"):
            if registered and key in registered:
                kwargs.setdefault(key, registered[key])
        super().__init__(**kwargs)
        pool = self.global_pool
        if self.arch_args().get("distilled") and pool != "token":
            raise ValueError(
                "VisionTransformerConfig: DeiT's distilled head reads the class and distillation "
                f"tokens, not global_pool {pool!r}. Fix: pass global_pool='token'"
            )

    def feature_count(self) -> int:
        """``embed_dim`` (192 for vit_tiny_patch16_224, 768 for vit_base_patch16_224)."""
        return int(self.arch_args()["embed_dim"])

    def to_dict(self) -> dict[str, Any]:
        """timm's ``config.json``; a config made in js records the architecture's image size as
        ``pretrained_cfg["input_size"]``, from which timm (``fixed_input_size``) sets
        ``img_size`` (256 for the register ViTs, 384 for ``deit3_*_384``)."""
        values = super().to_dict()
        if getattr(self, "pretrained_cfg", None) is None:
            image = {**_VIT_DEFAULTS, **self.arch_args()}["img_size"]
            values["pretrained_cfg"]["input_size"][1:] = pair(
                type(self).__name__, "img_size", image
            )
        return values


class LayerScale(nn.Module):
    """timm's ``LayerScale``: ``x * gamma``, ``gamma`` starting at ``init_values``."""

    def __init__(self, dim: int, init_values: float):
        super().__init__()
        self.gamma = nn.Parameter(jnp.full((dim,), init_values))

    def forward(self, x: jax.Array) -> jax.Array:
        """``[..., dim]`` in and out."""
        return x * self.gamma.value


# EVA's rotary tables (cos, sin), each [tokens, head_dim], or None (ViT: no rotary embedding)
Rope = tuple[jax.Array, jax.Array] | None


def rotate_pairs(x: jax.Array, rope: tuple[jax.Array, jax.Array]) -> jax.Array:
    """timm's interleaved rotary embedding (``apply_rot_embed_cat``: features ``2i, 2i + 1``
    rotate together) through js.nn's rotate-half kernel: the features are reordered to
    ``evens, odds`` first, which leaves the products of queries and keys (both reordered)
    unchanged. ``rope`` is in that order; ``x`` ``[B, heads, N, head_dim]`` in and out."""
    halves = jnp.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)
    return F.apply_rotary_pos_emb(halves, *rope)


class Attention(nn.Module):
    """timm's ``Attention``: fused ``qkv``, js.nn's attention kernel, ``norm`` (an identity
    here; EVA's ``scale_attn_inner``), ``proj``."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool, *, rngs: js.Rngs):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias, rngs=rngs)
        self.norm = nn.Identity()
        self.proj = nn.Linear(dim, dim, rngs=rngs)

    def project(self, x: jax.Array) -> jax.Array:
        """Queries, keys and values side by side: ``[B, N, dim]`` -> ``[B, N, 3 * dim]``."""
        return self.qkv(x)

    def forward(self, x: jax.Array, rope: Rope = None) -> jax.Array:
        """``[B, N, dim]`` in and out; ``rope`` rotates queries and keys (EVA)."""
        B, N, C = x.shape
        qkv = self.project(x).reshape(B, N, 3, self.num_heads, C // self.num_heads)
        q, k, v = jnp.transpose(qkv, (2, 0, 3, 1, 4))  # each [B, heads, N, head_dim]
        if rope is not None:
            q, k = rotate_pairs(q, rope), rotate_pairs(k, rope)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(self.norm(jnp.transpose(out, (0, 2, 1, 3)).reshape(B, N, C)))


class Block(nn.Module):
    """timm's pre-norm ``Block``: ``x + ls1(attn(norm1(x)))``, then ``x + ls2(mlp(norm2(x)))``.

    EVA's block changes the parts: ``_attention``, ``_mlp`` and the layer scales
    (``_add_layer_scales``, ``scale``).
    """

    def __init__(self, args: dict[str, Any], *, rngs: js.Rngs):
        super().__init__()
        dim = args["embed_dim"]
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = self._attention(args, rngs)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = self._mlp(args, rngs)
        self._add_layer_scales(dim, args["init_values"])

    def _attention(self, args: dict[str, Any], rngs: js.Rngs) -> Attention:
        return Attention(args["embed_dim"], args["num_heads"], args["qkv_bias"], rngs=rngs)

    def _mlp(self, args: dict[str, Any], rngs: js.Rngs) -> nn.Module:
        dim = args["embed_dim"]
        return Mlp(dim, int(dim * args["mlp_ratio"]), False, rngs=rngs)

    def _add_layer_scales(self, dim: int, init_values: float | None) -> None:
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()

    def scale(self, branch: int, x: jax.Array) -> jax.Array:
        """Branch ``x``'s layer scale (0: attention, 1: MLP)."""
        return (self.ls1, self.ls2)[branch](x)

    def forward(self, x: jax.Array, rope: Rope = None) -> jax.Array:
        """``[B, N, dim]`` in and out (``rope``: the attention's rotary tables)."""
        x = x + self.scale(0, self.attn(self.norm1(x), rope))
        return x + self.scale(1, self.mlp(self.norm2(x)))


class PatchEmbed(nn.Module):
    """timm's ``PatchEmbed``: ``proj``, a ``patch_size``-strided conv, as a token sequence."""

    def __init__(self, in_chans: int, dim: int, patch: int, *, rngs: js.Rngs):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, patch, patch, rngs=rngs)

    def forward(self, x: jax.Array) -> jax.Array:
        """``[B, C, H, W]`` -> ``[B, (H / patch) * (W / patch), dim]``."""
        return patchify(self.proj, x)


class VisionTransformerModel(TimmModel):
    """timm's ``VisionTransformer`` (and DeiT's ``VisionTransformerDistilled``).

    Images ``[B, in_chans, img_size, img_size]`` give logits ``[B, num_classes]``, or with
    ``num_classes=0`` (no ``head``) the pooled features ``[B, embed_dim]``. Random weights are
    timm's kind: truncated normal (std 0.02) for ``pos_embed``, Linear layers and the patch conv
    (as ConvNeXt's), ``cls_token`` / ``dist_token`` / ``reg_token`` N(0, 1e-6^2), zero biases.
    """

    config_class = VisionTransformerConfig
    block_class: ClassVar[type[Block]] = Block
    _init_module = trunc_normal_init

    def _build(self, args: dict[str, Any], rngs: js.Rngs) -> None:
        """``patch_embed``, the tokens, ``pos_embed``, ``blocks``, ``norm`` / ``fc_norm``, heads."""
        args = {**_VIT_DEFAULTS, **args}
        dim, image, self.patch = args["embed_dim"], args["img_size"], args["patch_size"]
        height, width = (image, image) if isinstance(image, int) else image
        self.grid = patch_grid((height, width), (self.patch, self.patch))
        self.distilled, self.pool_type = bool(args["distilled"]), args["global_pool"]
        self.dynamic_img_size = bool(args["dynamic_img_size"])
        self.patch_embed = PatchEmbed(args["in_chans"], dim, self.patch, rngs=rngs)
        self._build_tokens(args, dim)
        self.blocks = nn.Sequential(
            *(self.block_class(args, rngs=rngs) for _ in range(args["depth"]))
        )
        use_fc_norm = self.pool_type == "avg" if args["fc_norm"] is None else args["fc_norm"]
        self.norm = nn.Identity() if use_fc_norm else nn.LayerNorm(dim, eps=1e-6)
        self.fc_norm = nn.LayerNorm(dim, eps=1e-6) if use_fc_norm else nn.Identity()
        self.num_features = dim
        head = nn.Linear(dim, self.num_classes, rngs=rngs) if self.num_classes > 0 else None
        self.head = head or nn.Identity()
        if self.distilled:
            self.head_dist = nn.Linear(dim, self.num_classes, rngs=rngs) if head else nn.Identity()
        for token in (self.cls_token, self.dist_token, self.reg_token):
            if token is not None:
                nn.init.normal_(token, std=1e-6, rngs=rngs)
        nn.init.trunc_normal_(self.pos_embed, std=0.02, rngs=rngs)

    def _build_tokens(self, args: dict[str, Any], dim: int) -> None:
        """The class, distillation (DeiT) and register tokens and ``pos_embed`` (over the
        patches only with ``no_embed_class``: DeiT III, the register ViTs)."""
        self.cls_token = nn.Parameter(jnp.zeros((1, 1, dim))) if args["class_token"] else None
        self.dist_token = nn.Parameter(jnp.zeros((1, 1, dim))) if self.distilled else None
        registers = args["reg_tokens"]
        self.reg_token = nn.Parameter(jnp.zeros((1, registers, dim))) if registers else None
        self.num_prefix_tokens = int(args["class_token"]) + int(self.distilled) + registers
        self.no_embed_class = bool(args["no_embed_class"])
        self.embedded_prefix = 0 if self.no_embed_class else self.num_prefix_tokens
        tokens = self.grid[0] * self.grid[1] + self.embedded_prefix
        self.pos_embed = nn.Parameter(jnp.zeros((1, tokens, dim)))

    def forward_features(self, x: jax.Array) -> jax.Array:
        """The tokens after ``norm``: ``[B, prefix tokens + patches, embed_dim]`` (class,
        distillation, registers, then the patches, as timm)."""
        grid = self._grid(x.shape)
        x = self.patch_embed(x)
        pos_embed = self.pos_embed.value
        if grid != self.grid:  # timm's dynamic_img_size: bicubic, antialiased
            pos_embed = resize_positions(
                pos_embed, self.grid, grid, leading=self.embedded_prefix, antialias=True
            )
        tokens = (self.cls_token, self.dist_token, self.reg_token)
        prefix = [token.value for token in tokens if token is not None]
        prefix = [jnp.broadcast_to(token, (x.shape[0], *token.shape[1:])) for token in prefix]
        if self.no_embed_class:
            x = x + pos_embed
        x = jnp.concatenate([*prefix, x], axis=1)
        if not self.no_embed_class:
            x = x + pos_embed
        rope = self.rope(grid)
        for block in self.blocks:
            x = block(x, rope)
        return self.norm(x)

    def _grid(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """The patch grid of images of ``shape``; another than ``img_size``'s only with
        ``dynamic_img_size``."""
        grid = patch_grid(shape[2:], (self.patch, self.patch))
        if grid != self.grid and not self.dynamic_img_size:
            raise ValueError(
                f"{type(self).__name__}: images {list(shape)} give a {grid} patch grid, the "
                f"model's is {self.grid} (img_size). Fix: resize the images, or build the model "
                "with model_args dynamic_img_size=True"
            )
        return grid

    def rope(self, grid: tuple[int, int]) -> Rope:
        """The blocks' rotary tables for a patch ``grid``: none for ViT (EVA computes them)."""
        return None

    def forward_head(self, x: jax.Array, pre_logits: bool = False) -> jax.Array:
        """Pool (class token, or the patches' mean), ``fc_norm``, then ``head`` unless
        ``pre_logits``; DeiT's distilled head averages ``head`` on the class token and
        ``head_dist`` on the distillation token."""
        if self.distilled:
            if pre_logits:
                return (x[:, 0] + x[:, 1]) / 2
            return (self.head(x[:, 0]) + self.head_dist(x[:, 1])) / 2
        if self.pool_type == "token":
            x = x[:, 0]
        elif self.pool_type == "avg":
            x = jnp.mean(x[:, self.num_prefix_tokens :], axis=1)
        x = self.fc_norm(x)
        return x if pre_logits else self.head(x)


ARCHITECTURES = timm_architectures(VisionTransformerModel)
DEFAULT_ARCHITECTURE = VisionTransformerConfig.default_architecture
