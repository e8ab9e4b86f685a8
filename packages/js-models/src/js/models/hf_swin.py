"""transformers' Swin Transformer (Liu et al., 2021; ``model_type`` ``"swin"``,
``modeling_swin.py`` in transformers 5.23): ``SwinModel`` and ``SwinForImageClassification``.

Swin is ViT's pre-norm encoder block run inside windows: each stage's blocks attend within
``window_size`` x ``window_size`` windows of the patch grid (padded to whole windows), every
odd block on windows shifted by ``window_size // 2`` (a cyclic roll, with a mask of -100
between positions the roll brought together), each head adding a learnt bias per relative
position; between stages ``downsample`` merges 2x2 patches (``norm``, then ``reduction`` to
twice the width). A stage whose grid is one window is not shifted; a grid smaller than the
window is refused (transformers 5.23 cannot run it either).

The blocks are the encoder skeleton's (``_encoder.py``) in its pre-norm arrangement at the
files' names (``layers.N.blocks.M.attention.self.query``, ``intermediate.dense``,
``output.dense``, ``layernorm_before``/``_after``), each stage's blocks built from
``SwinConfig.stage(N)``, the config as its width and heads make it. transformers 5 renamed the
modules (``attention.q_proj``, ``mlp.fc1``) but writes the older names; ``key_mapping`` reads
its module names too. ``relative_position_index`` is computed, not stored (older files hold it:
skipped on load). Eval mode: drop path is not built; masked-image modelling is not ported.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from js import Module, Parameter, Rngs, nn

from . import _encoder as skeleton
from ._base import architectures
from ._encoder_heads import EncoderHeadModel
from ._vision import VisionPreTrainedModel, resize_positions
from .vit import ViTPatchEmbeddings

__all__ = [
    "ARCHITECTURES",
    "SwinConfig",
    "SwinForImageClassification",
    "SwinModel",
]


class SwinConfig(skeleton.EncoderConfig):
    """transformers' ``SwinConfig`` keys and defaults (Swin-T, window 7, 224): ``embed_dim``
    channels after the ``patch_size`` stem, doubling at each of the ``len(depths)`` stages,
    ``num_heads`` per stage, ``mlp_ratio``, ``window_size``, ``use_absolute_embeddings``.
    ``hidden_size`` (the last stage's width) and ``num_layers`` follow from them, as in
    transformers; ``num_attention_heads`` is ``num_heads``.

    Example:
        >>> config = SwinConfig(embed_dim=16, depths=[2, 2], num_heads=[2, 4])
        >>> config.hidden_size, config.stage(1).num_attention_heads
        (32, 4)
    """

    model_type = "swin"
    pre_norm = True
    attribute_map = {"num_attention_heads": "num_heads", "num_hidden_layers": "num_layers"}

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.num_layers = len(self.depths)
        self.hidden_size = int(self.embed_dim * 2 ** (self.num_layers - 1))

    def stage(self, index: int) -> SwinConfig:
        """The config as the blocks of stage ``index`` read it: ``hidden_size`` its width
        (``embed_dim * 2 ** index``), ``num_attention_heads`` its heads, ``intermediate_size``
        ``mlp_ratio`` times the width."""
        config = copy.copy(self)
        config.hidden_size = int(self.embed_dim * 2**index)
        config.num_heads = self.num_heads[index]
        config.intermediate_size = int(self.mlp_ratio * config.hidden_size)
        return config

    def validate(self) -> None:
        heads, depths = list(self.num_heads), list(self.depths)
        if len(heads) != len(depths):
            raise ValueError(
                f"{self.owner()}: num_heads {heads} must give one head count per stage of "
                f"depths {depths}. Fix: correct num_heads in config.json"
            )
        for index, count in enumerate(heads):
            width = self.stage(index).hidden_size
            if width % count:
                raise ValueError(
                    f"{self.owner()}: stage {index} is {width} wide (embed_dim * 2**{index}), "
                    f"not a multiple of num_heads[{index}]={count}. Fix: choose heads dividing it"
                )


@functools.lru_cache(maxsize=32)
def _relative_position_index(window: int) -> np.ndarray:
    """``[window**2, window**2]``: the row of the bias table for each pair of positions in a
    window, ``(dh + window - 1) * (2 * window - 1) + dw + window - 1`` (transformers')."""
    rows, cols = np.meshgrid(np.arange(window), np.arange(window), indexing="ij")
    coords = np.stack([rows.ravel(), cols.ravel()])  # [2, N]
    dh, dw = coords[:, :, None] - coords[:, None, :]  # [N, N] each
    return (dh + window - 1) * (2 * window - 1) + dw + window - 1


@functools.lru_cache(maxsize=32)
def _shift_mask(height: int, width: int, window: int, shift: int) -> np.ndarray:
    """``[windows, 1, N, N]`` float32: -100 between positions of a shifted window that the roll
    brought from different regions of the (padded) grid, else 0 (transformers' values)."""

    def regions(size: int) -> np.ndarray:  # 0, 1, 2: before the window, in it, in the shift
        index = np.arange(size)
        return (index >= size - window).astype(np.int64) + (index >= size - shift)

    grid = regions(height)[:, None] * 3 + regions(width)[None, :]  # [H, W]
    windows = _partition(grid[None, :, :, None], window)[..., 0]  # [windows, N]
    seams = windows[:, None, :, None] != windows[:, None, None, :]  # [windows, 1, N, N]
    return np.where(seams, -100.0, 0.0).astype(np.float32)


def _partition(x: Any, window: int) -> Any:
    """``[B, H, W, C]`` -> ``[B * windows, window**2, C]``, the windows row by row."""
    B, H, W, C = x.shape
    x = x.reshape(B, H // window, window, W // window, window, C)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, window * window, C)


def _merge(windows: jax.Array, window: int, height: int, width: int) -> jax.Array:
    """``_partition`` undone: ``[B * windows, window**2, C]`` -> ``[B, H, W, C]``."""
    C = windows.shape[-1]
    x = windows.reshape(-1, height // window, width // window, window, window, C)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, height, width, C)


def _pad_grid(x: jax.Array, multiple: int) -> jax.Array:
    """A grid ``[B, H, W, C]`` zero-padded after its end to whole ``multiple``s of H and W."""
    _, H, W, _ = x.shape
    return jnp.pad(x, ((0, 0), (0, -H % multiple), (0, -W % multiple), (0, 0)))


class SwinSelfAttention(skeleton.EncoderSelfAttention):
    """The skeleton's self-attention with a learnt bias per head and relative position within
    the window, added to the scores with the (shift) mask.

    Weights:
        ``relative_position_bias_table`` ``[(2 * window - 1) ** 2, heads]``, zeros.
    """

    def __init__(self, config: SwinConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.window_size = config.window_size
        table = ((2 * config.window_size - 1) ** 2, config.num_attention_heads)
        self.relative_position_bias_table = Parameter(jnp.zeros(table))

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        """``hidden_states`` ``[B * windows, N, C]``; ``mask`` None or
        ``[B * windows, 1, N, N]``."""
        index = _relative_position_index(self.window_size)  # [N, N]
        bias = self.relative_position_bias_table.value[index].transpose(2, 0, 1)[None]
        mask = bias if mask is None else bias + mask  # [1 | B * windows, heads, N, N]
        return super().forward(hidden_states, mask, rngs=rngs)


class SwinAttention(skeleton.EncoderAttention):
    """``self`` (``SwinSelfAttention``) and its ``output`` block."""

    self_attention_class = SwinSelfAttention


class SwinLayer(skeleton.EncoderLayer):
    """ViT's pre-norm block with the attention inside (shifted) windows: the normed grid and
    its residual are padded to whole windows, rolled by ``-shift_size`` and cut into windows;
    the attention's output (residual added) is put back, rolled back and cropped.

    Shape:
        ``[B, H, W, C]`` -> ``[B, H, W, C]`` (``mask`` unused: the shift mask is the layer's).
    """

    attention_class = SwinAttention

    def __init__(self, config: SwinConfig, *, shift_size: int, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        self.window_size, self.shift_size = config.window_size, shift_size

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None = None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        B, H, W, C = hidden_states.shape
        before, after = self.layernorm_before, self.layernorm_after
        assert before is not None and after is not None  # SwinConfig.pre_norm
        window = self.window_size  # no larger than the grid (SwinEncoder checks)
        shift = self.shift_size if min(H, W) > window else 0  # one window: unshifted

        def windows(x: jax.Array) -> jax.Array:  # [B * windows, window**2, C]
            x = jnp.roll(_pad_grid(x, window), (-shift, -shift), axis=(1, 2))
            return _partition(x, window)

        normed = before(hidden_states)
        Hp, Wp = H + -H % window, W + -W % window  # padded to whole windows
        shifted = None  # [B * windows, 1, N, N]: -100 across the seams the roll made
        if shift:
            shifted = jnp.tile(_shift_mask(Hp, Wp, window, shift), (B, 1, 1, 1))
        attended = self.attention(windows(normed), shifted, windows(hidden_states), rngs=rngs)
        x = jnp.roll(_merge(attended, window, Hp, Wp), (shift, shift), axis=(1, 2))[:, :H, :W]
        return self.output(self.intermediate(after(x)), x, rngs=rngs)


class SwinPatchMerging(Module):
    """2x2 neighbouring patches concatenated (the grid padded to even sizes), ``norm`` and
    ``reduction`` (bias-free) to twice the width.

    Shape:
        ``[B, H, W, C]`` -> ``[B, ceil(H / 2), ceil(W / 2), 2C]``.
    """

    def __init__(self, dim: int, *, rngs: Rngs):
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False, rngs=rngs)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x: jax.Array) -> jax.Array:
        x = _pad_grid(x, 2)
        # transformers' order: (row, column) offsets (0, 0), (1, 0), (0, 1), (1, 1)
        x = jnp.concatenate([x[:, r::2, c::2] for c in range(2) for r in range(2)], axis=-1)
        return self.reduction(self.norm(x))


class SwinStage(Module):
    """``blocks`` (every odd one shifted by ``window_size // 2``) and, but in the last stage,
    ``downsample``.

    Shape:
        ``[B, H, W, C]`` -> ``[B, ceil(H / 2), ceil(W / 2), 2C]`` (the last: ``[B, H, W, C]``).
    """

    def __init__(self, config: SwinConfig, index: int, *, rngs: Rngs):
        super().__init__()
        stage, shift = config.stage(index), config.window_size // 2
        self.blocks = nn.ModuleList(
            [
                SwinLayer(stage, shift_size=shift if i % 2 else 0, rngs=rngs)
                for i in range(config.depths[index])
            ]
        )
        last = index == config.num_layers - 1
        self.downsample = None if last else SwinPatchMerging(stage.hidden_size, rngs=rngs)

    def forward(self, x: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        for block in self.blocks:
            x = block(x, rngs=rngs)
        return x if self.downsample is None else self.downsample(x)


class SwinEncoder(Module):
    """``layers``: one ``SwinStage`` per ``depths`` entry.

    Shape:
        the embedded grid ``[B, h, w, embed_dim]`` -> ``[B, h' * w', hidden]``, the last
        stage's grid row by row.
    """

    def __init__(self, config: SwinConfig, *, rngs: Rngs):
        super().__init__()
        stages = range(config.num_layers)
        self.layers = nn.ModuleList([SwinStage(config, i, rngs=rngs) for i in stages])
        self.window_size = config.window_size

    def forward(
        self, hidden_states: jax.Array, mask: jax.Array | None, *, rngs: Rngs | None = None
    ) -> jax.Array:
        h, w = grid = hidden_states.shape[1:3]
        for _ in self.layers[1:]:  # the last stage's grid: halved (rounding up) per merge
            h, w = -(-h // 2), -(-w // 2)
        if min(h, w) < self.window_size:
            raise NotImplementedError(
                f"SwinModel: the last stage's patch grid would be {h}x{w} (from {grid[0]}x"
                f"{grid[1]}), smaller than window_size={self.window_size}; transformers cannot "
                "run it either (the bias tables are the window's). Fix: give larger images"
            )
        for stage in self.layers:
            hidden_states = stage(hidden_states, rngs=rngs)
        B, _, _, C = hidden_states.shape
        return hidden_states.reshape(B, -1, C)


class SwinPatchEmbeddings(ViTPatchEmbeddings):
    """ViT's strided-convolution patches (``projection``, to ``embed_dim``), the images first
    padded after their end to whole patches, kept as a grid.

    Shape:
        ``[B, C, H, W]`` -> ``[B, ceil(H / P), ceil(W / P), embed_dim]``.
    """

    def forward(self, pixel_values: jax.Array) -> jax.Array:
        (P, Q), (H, W) = self.patch_size, pixel_values.shape[2:]
        pixels = pixel_values.astype(self.projection.weight.value.dtype)
        pixels = jnp.pad(pixels, ((0, 0), (0, 0), (0, -H % P), (0, -W % Q)))
        return self.projection(pixels).transpose(0, 2, 3, 1)  # [B, h, w, embed_dim]


class SwinEmbeddings(Module):
    """``patch_embeddings``, ``norm`` (eps 1e-5) and, with ``use_absolute_embeddings``, learnt
    ``position_embeddings`` (``[1, patches, embed_dim]``, zeros; resized bicubically to the
    patch grid of images of another size), then dropout.

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> ``[B, h, w, embed_dim]``.
    """

    def __init__(self, config: SwinConfig, *, rngs: Rngs):
        super().__init__()
        # ViT's patch embeddings read the EncoderConfig keys SwinConfig has, its stem's width
        # as hidden_size
        stem = config.stage(0)
        self.patch_embeddings = SwinPatchEmbeddings(stem, rngs=rngs)  # type: ignore[arg-type]
        patches, D = self.patch_embeddings.num_patches, config.embed_dim
        absolute = config.use_absolute_embeddings
        self.position_embeddings = Parameter(jnp.zeros((1, patches, D))) if absolute else None
        self.norm = nn.LayerNorm(D)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, pixel_values: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        embeddings = self.norm(self.patch_embeddings(pixel_values))  # [B, h, w, D]
        B, h, w, D = embeddings.shape
        if self.position_embeddings is not None:
            table, grid = self.position_embeddings.value, self.patch_embeddings.grid
            embeddings = embeddings + resize_positions(table, grid, (h, w)).reshape(1, h, w, D)
        return self.dropout(embeddings, rngs=rngs)


# transformers 5's module names in a block -> the files' (its "swin" WeightRenaming, reversed)
_NEW_NAMES = {
    "attention.q_proj": "attention.self.query",
    "attention.k_proj": "attention.self.key",
    "attention.v_proj": "attention.self.value",
    "attention.relative_position_bias.relative_position_bias_table": (
        "attention.self.relative_position_bias_table"
    ),
    "attention.o_proj": "attention.output.dense",
    "mlp.fc1": "intermediate.dense",
    "mlp.fc2": "output.dense",
}


class SwinPreTrainedModel(VisionPreTrainedModel):
    """What the Swin models share: the config class, the ``swin`` prefix, transformers 5's
    module names read, ``relative_position_index`` skipped; images of any size (padded)."""

    config: SwinConfig
    config_class = SwinConfig
    base_model_prefix = "swin"
    always_interpolate = True
    key_mapping = {
        rf"blocks\.(\d+)\.{re.escape(new)}": rf"blocks.\1.{old}" for new, old in _NEW_NAMES.items()
    }
    ignore_on_load = (r"relative_position_index$",)


class SwinModel(skeleton.EncoderModel, SwinPreTrainedModel):
    """transformers' ``SwinModel``: ``embeddings``, ``encoder``, the final ``layernorm`` and,
    with ``add_pooling_layer``, ``pooler`` (the mean over positions).

    Shape:
        ``pixel_values`` ``[B, C, H, W]`` -> ``(last_hidden_state [B, h * w, hidden],
        pooler_output [B, hidden] or None)``, ``h, w`` the last stage's grid (``H / 32`` for
        Swin-T).
    """

    embeddings_class = SwinEmbeddings
    encoder_class = SwinEncoder
    final_norm_name = "layernorm"
    pooler_class = None  # transformers' pooler, AdaptiveAvgPool1d(1), holds no weights

    def __init__(self, config: SwinConfig, add_pooling_layer: bool = True, *, rngs: Rngs):
        super().__init__(config, add_pooling_layer, rngs=rngs)
        self.add_pooling_layer = add_pooling_layer

    def pool(self, hidden: jax.Array) -> jax.Array | None:
        """The mean of the final states over positions ``[B, hidden]`` (with
        ``add_pooling_layer``, else None)."""
        return jnp.mean(hidden, axis=1) if self.add_pooling_layer else None


class SwinForImageClassification(EncoderHeadModel, SwinPreTrainedModel):
    """``swin`` and ``classifier``, a Linear layer on the pooled output (the identity with
    ``num_labels=0``): logits ``[B, num_labels]``."""

    def __init__(self, config: SwinConfig, *, rngs: Rngs):
        super().__init__(config, rngs=rngs)
        n, H = config.num_labels, config.hidden_size
        self.classifier = nn.Linear(H, n, rngs=rngs) if n > 0 else nn.Identity()

    def add_pooling_layer(self) -> bool:
        return True

    def outputs(self, hidden: jax.Array, pooled: jax.Array | None, *, rngs: Rngs | None) -> Any:
        """The logits ``[B, num_labels]`` of the pooled output."""
        return self.classifier(pooled)


ARCHITECTURES = architectures(SwinModel, SwinForImageClassification)
