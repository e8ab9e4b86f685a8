"""timm's EVA-02 (``timm/models/eva.py``'s ``Eva`` with the ``eva02_*`` options, timm 1.0.31) on
the timm ViT skeleton (``timm_vit.py``), with timm's module names.

What EVA-02 changes in the ViT: the attention has no key bias (``attn.q_bias`` / ``attn.v_bias``
beside a bias-free fused ``attn.qkv``, or with ``qkv_fused=False`` ``attn.q_proj`` /
``attn.k_proj`` / ``attn.v_proj``), rotates the patches' queries and keys by an axial rotary
embedding (not the class token's), and with ``scale_attn_inner`` normalises its output
(``attn.norm``); the MLP is SwiGLU (packed ``mlp.fc1``, or with ``scale_mlp`` ``mlp.fc1_g`` /
``mlp.fc1_x`` / ``mlp.norm``, then ``mlp.fc2``); layer scale is ``gamma_1`` / ``gamma_2``; the
head averages the patches (``fc_norm``, ``head``).

The rotary embedding is timm's ``RotaryEmbeddingCat`` (``in_pixels=False``): head width ``D``,
``D / 4`` frequencies ``1 / temperature ** (i / (D / 4))`` (``F.rope_inv_freq(D / 2)``), patch
row and column ``t`` (plus ``rope_grid_offset``) rescaled to ``ref_feat_shape`` (``t / grid *
ref``), the angles ``[row * freqs, column * freqs]``, tables computed on the host in float32.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import js
from js import nn
from js.nn import functional as F

from ._timm import timm_architectures
from .convnext import Mlp
from .timm_vit import (
    SIZES,
    TRANSFORMER_ARGS,
    VIT_POOL_TYPES,
    Attention,
    Block,
    Rope,
    VisionTransformerConfig,
    VisionTransformerModel,
    arch,
)

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCHITECTURE",
    "EvaAttention",
    "EvaBlock",
    "EvaConfig",
    "EvaModel",
    "SwiGLU",
    "rope_tables",
]

OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
# Eva's constructor defaults for the options the ViT skeleton does not have
_EVA_DEFAULTS = {
    "qkv_fused": True,
    "swiglu_mlp": False,
    "scale_mlp": False,
    "scale_attn_inner": False,
    "use_rot_pos_emb": False,
    "ref_feat_shape": None,
    "rope_temperature": 10000.0,
    "rope_grid_offset": 0.0,
    "use_fc_norm": None,
    "num_reg_tokens": 0,
    "no_embed_class": False,
}
# what every EVA-02 sets (ref_feat_shape: the 224 / 14 pretraining grid)
_EVA02 = {"mlp_ratio": 4 * 2 / 3, "swiglu_mlp": True, "use_rot_pos_emb": True}
# EVA-CLIP's image towers: base and large with attn.norm, pooling the class token
_CLIP = {"scale_attn_inner": True, "global_pool": "token"}


def _family() -> dict[str, dict[str, Any]]:
    """timm's registered EVA-02 image models (base and large: separate q/k/v, MLP norm): the
    224x224 masked-image-modelling backbones (no classifier, as timm's pretrained configs), the
    336/448 ImageNet classifiers, and EVA-CLIP's image towers (512 / 768 embedding outputs)."""
    archs: dict[str, dict[str, Any]] = {}
    for size, (dim, depth, heads) in {**SIZES, "large": (1024, 24, 16)}.items():
        big = size in ("base", "large")
        extra = {"qkv_fused": False, "scale_mlp": True} if big else {}
        for image in (224, 448 if big else 336):
            sizes = arch(14, dim, depth, heads, img_size=image, ref_feat_shape=(16, 16))
            classes = {"num_classes": 0} if image == 224 else {}
            archs[f"eva02_{size}_patch14_{image}"] = {**sizes, **_EVA02, **extra, **classes}
    towers = (("base", 16, 224, 512), ("large", 14, 224, 768), ("large", 14, 336, 768))
    for size, patch, image, outputs in towers:
        tower = {**archs[f"eva02_{size}_patch14_224"], "patch_size": patch, "img_size": image}
        archs[f"eva02_{size}_patch{patch}_clip_{image}"] = {
            **tower,
            **_CLIP,
            "num_classes": outputs,
        }
    return archs


class EvaConfig(VisionTransformerConfig):
    """timm's ``config.json`` for an EVA-02 model (see ``js.models._timm.TimmConfig``).

    ``architecture`` picks the sizes as timm registers them; ``model_args`` may override those
    and ``qkv_fused``, ``swiglu_mlp``, ``scale_mlp``, ``scale_attn_inner``, ``use_rot_pos_emb``,
    ``ref_feat_shape``, ``rope_temperature``, ``rope_grid_offset``, ``use_fc_norm``,
    ``num_reg_tokens``, ``no_embed_class`` and ``dynamic_img_size`` (other image sizes: the
    position table resized, the rotary tables computed for the grid).
    ``global_pool`` is ``'avg'`` (timm's default; the CLIP towers' is ``'token'``), ``'token'``
    or ``''``; ``num_classes`` defaults to the architecture's (see ``_family``).
    """

    defaults = {"num_classes": 1000, "global_pool": "avg"}
    architectures = _family()
    default_architecture = "eva02_base_patch14_224"
    model_arg_names = (*TRANSFORMER_ARGS, *_EVA_DEFAULTS)
    pool_types = VIT_POOL_TYPES
    pretrained_defaults = {
        **VisionTransformerConfig.pretrained_defaults,
        "mean": OPENAI_CLIP_MEAN,
        "std": OPENAI_CLIP_STD,
    }


def rope_tables(
    grid: tuple[int, int],
    head_dim: int,
    prefix_tokens: int,
    temperature: float = 10000.0,
    ref_feat_shape: tuple[int, int] | None = None,
    grid_offset: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """EVA's rotary ``(cos, sin)``, each ``[prefix_tokens + rows * columns, head_dim]`` float32,
    in ``rotate_pairs``' order (evens then odds); the prefix tokens' rows leave them as they are.

    Example:
        >>> cos, sin = rope_tables((2, 2), 8, 1, ref_feat_shape=(16, 16))
        >>> cos.shape, cos[0].tolist() == [1.0] * 8, sin[0].tolist() == [0.0] * 8
        ((5, 8), True, True)
    """
    freqs = np.asarray(F.rope_inv_freq(head_dim // 2, float(temperature)))
    axes = []
    for axis, size in enumerate(grid):
        t = np.arange(size, dtype=np.float32) + np.float32(grid_offset)
        if ref_feat_shape is not None:  # EVA's rescale of a fine-tuned grid to the pretraining one
            t = t / np.float32(size) * np.float32(ref_feat_shape[axis])
        axes.append(t)
    rows, columns = np.meshgrid(*axes, indexing="ij")  # each [rows, columns]
    angles = np.concatenate(
        [rows.reshape(-1, 1) * freqs, columns.reshape(-1, 1) * freqs], axis=-1
    )  # [patches, head_dim / 2]
    angles = np.concatenate([angles, angles], axis=-1)  # [patches, head_dim]
    keep = np.zeros((prefix_tokens, head_dim), np.float32)
    cos = np.concatenate([keep + 1, np.cos(angles)]).astype(np.float32)
    sin = np.concatenate([keep, np.sin(angles)]).astype(np.float32)
    return cos, sin


class EvaAttention(Attention):
    """timm's ``EvaAttention``: no key bias, rotary queries and keys, ``norm`` if
    ``scale_attn_inner``."""

    def __init__(self, args: dict[str, Any], *, rngs: js.Rngs):
        dim, bias, fused = args["embed_dim"], args["qkv_bias"], args["qkv_fused"]
        super().__init__(dim, args["num_heads"], False, rngs=rngs)
        if not fused:
            self.qkv = None
            self.q_proj = nn.Linear(dim, dim, bias=bias, rngs=rngs)
            self.k_proj = nn.Linear(dim, dim, bias=False, rngs=rngs)
            self.v_proj = nn.Linear(dim, dim, bias=bias, rngs=rngs)
        self.q_bias = nn.Parameter(jnp.zeros((dim,))) if bias and fused else None
        self.v_bias = nn.Parameter(jnp.zeros((dim,))) if bias and fused else None
        if args["scale_attn_inner"]:
            self.norm = nn.LayerNorm(dim, eps=1e-6)

    def project(self, x: jax.Array) -> jax.Array:
        """``[B, N, dim]`` -> ``[B, N, 3 * dim]``; the key bias is zero (timm's ``k_bias``)."""
        if self.qkv is None:
            return jnp.concatenate([self.q_proj(x), self.k_proj(x), self.v_proj(x)], axis=-1)
        if self.q_bias is None or self.v_bias is None:
            return self.qkv(x)
        q_bias = self.q_bias.value
        return self.qkv(x) + jnp.concatenate([q_bias, jnp.zeros_like(q_bias), self.v_bias.value])


class SwiGLU(nn.Module):
    """timm's ``SwiGLU`` (``fc1_g``, ``fc1_x``, ``norm``, ``fc2``: EVA-02 with ``scale_mlp``)
    or, ``packed``, timm's ``GluMlp`` as EVA-02 builds it without (one ``fc1``, the gate its
    first half): ``fc2(norm(silu(gate) * x))``, ``norm`` a LayerNorm with ``scale_mlp``."""

    def __init__(self, dim: int, hidden: int, *, packed: bool, scale_mlp: bool, rngs: js.Rngs):
        super().__init__()
        self.packed = packed
        if packed:
            self.fc1 = nn.Linear(dim, 2 * hidden, rngs=rngs)
        else:
            self.fc1_g = nn.Linear(dim, hidden, rngs=rngs)
            self.fc1_x = nn.Linear(dim, hidden, rngs=rngs)
        self.norm = nn.LayerNorm(hidden, eps=1e-6) if scale_mlp else nn.Identity()
        self.fc2 = nn.Linear(hidden, dim, rngs=rngs)

    def forward(self, x: jax.Array) -> jax.Array:
        """``[..., dim]`` in and out."""
        if self.packed:
            gate, x = jnp.split(self.fc1(x), 2, axis=-1)
        else:
            gate, x = self.fc1_g(x), self.fc1_x(x)
        return self.fc2(self.norm(F.silu(gate) * x))


class EvaBlock(Block):
    """timm's ``EvaBlock``: the ViT block with ``EvaAttention``, a SwiGLU MLP and layer scale
    ``gamma_1`` / ``gamma_2`` (parameters, where ``init_values`` is set)."""

    def _attention(self, args: dict[str, Any], rngs: js.Rngs) -> Attention:
        return EvaAttention(args, rngs=rngs)

    def _mlp(self, args: dict[str, Any], rngs: js.Rngs) -> nn.Module:
        dim, scale_mlp = args["embed_dim"], args["scale_mlp"]
        hidden = int(dim * args["mlp_ratio"])
        if not args["swiglu_mlp"]:
            if scale_mlp:
                raise NotImplementedError(
                    "EvaModel: scale_mlp without swiglu_mlp (a GELU MLP with a norm) is not "
                    "supported. Fix: export the model with swiglu_mlp=True or scale_mlp=False"
                )
            return Mlp(dim, hidden, False, rngs=rngs)
        return SwiGLU(dim, hidden, packed=not scale_mlp, scale_mlp=scale_mlp, rngs=rngs)

    def _add_layer_scales(self, dim: int, init_values: float | None) -> None:
        start = None if init_values is None else jnp.full((dim,), init_values)
        self.gamma_1 = None if start is None else nn.Parameter(start)
        self.gamma_2 = None if start is None else nn.Parameter(start)

    def scale(self, branch: int, x: jax.Array) -> jax.Array:
        """Branch ``x`` times ``gamma_1`` (attention) or ``gamma_2`` (MLP), if set."""
        gamma = (self.gamma_1, self.gamma_2)[branch]
        return x if gamma is None else x * gamma.value


class EvaModel(VisionTransformerModel):
    """timm's ``Eva`` with EVA-02's options (rotary embedding, SwiGLU, no key bias).

    Images ``[B, in_chans, img_size, img_size]`` give logits ``[B, num_classes]`` (features
    ``[B, embed_dim]`` with ``num_classes=0``). Random weights are the ViT's (timm's EVA also
    rescales ``proj`` and ``fc2`` by depth and shrinks the head).
    """

    config_class = EvaConfig
    block_class = EvaBlock

    def _build(self, args: dict[str, Any], rngs: js.Rngs) -> None:
        """The ViT's layers with EVA's blocks; the rotary settings kept for ``rope``."""
        args = {**_EVA_DEFAULTS, **args}
        args["fc_norm"], args["reg_tokens"] = args["use_fc_norm"], args["num_reg_tokens"]
        super()._build(args, rngs)
        self.head_dim = args["embed_dim"] // args["num_heads"]
        self.use_rope = bool(args["use_rot_pos_emb"])
        ref = args["ref_feat_shape"]
        # rope_tables' temperature, ref_feat_shape and grid_offset (a tuple: a static attribute)
        self.rope_settings = (
            float(args["rope_temperature"]),
            None if ref is None else tuple(ref),
            float(args["rope_grid_offset"]),
        )

    def rope(self, grid: tuple[int, int]) -> Rope:
        """The rotary tables of the patch grid (host constants), if ``use_rot_pos_emb``."""
        if not self.use_rope:
            return None
        prefix = self.num_prefix_tokens  # the class and register tokens: not rotated
        cos, sin = rope_tables(grid, self.head_dim, prefix, *self.rope_settings)
        return jnp.asarray(cos), jnp.asarray(sin)


ARCHITECTURES = timm_architectures(EvaModel)
DEFAULT_ARCHITECTURE = EvaConfig.default_architecture
