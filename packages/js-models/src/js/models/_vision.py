"""What the vision towers share (ViT, DINOv2, CLIP, SigLIP): image and patch sizes read as
transformers reads them, the pixel check, patches, the learnt position table resized to the
patch grid of an image of another size (transformers' ``interpolate_pos_encoding``), and the
models' one ``forward`` of images.

Resizing is PyTorch's ``F.interpolate(mode="bicubic", align_corners=False)``, as transformers
calls it (DINOv2 with registers with ``antialias=True``). Both are separable, so a grid
``[h, w, D]`` becomes ``A [H, h] @ grid @ B [W, w]^T``, the two matrices built on the host in
NumPy (sizes are static under tracing) with the taps of PyTorch's CPU kernels: Keys' cubic with
``a = -0.75`` at ``scale * (i + 0.5) - 0.5``, edge taps clamped; with antialias PIL's cubic
(``a = -0.5``), widened by the scale when shrinking, each row normalised. The resize runs in
float32 (as DINOv2 does; ViT and CLIP resize in the table's dtype) and casts back.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from js import Rngs, nn

from ._encoder import EncoderConfig, EncoderPreTrainedModel


def pair(owner: str, key: str, value: Any) -> tuple[int, int]:
    """``image_size``/``patch_size``: an int or a pair, as transformers reads them."""
    pair = tuple(value) if isinstance(value, Sequence) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ValueError(
            f"{owner}: {key} must be a positive int or a pair of them, got {value!r}. "
            f"Fix: set {key} in config.json, e.g. 224"
        )
    return pair  # type: ignore[return-value]


def patch_grid(image: Sequence[int], patch: Sequence[int]) -> tuple[int, int]:
    """``(rows, columns)`` of the patches of an ``image`` (height, width) cut into ``patch``
    (height, width) patches, as a strided convolution cuts it."""
    return image[0] // patch[0], image[1] // patch[1]


def check_pixels(config: EncoderConfig, pixel_values: Any, *, any_size: bool) -> jax.Array:
    """``pixel_values`` as an array ``[B, C, H, W]``: of the configured size, or with
    ``any_size`` of any size holding a patch; else a ValueError saying what to change."""
    pixel_values = jnp.asarray(pixel_values)
    owner, C = config.owner(), config.num_channels
    H, W = pair(owner, "image_size", config.image_size)
    got = list(pixel_values.shape)
    if any_size:
        fits = (
            pixel_values.ndim == 4
            and got[1] == C
            and min(patch_grid(got[2:], pair(owner, "patch_size", config.patch_size))) > 0
        )
        want, fix = f"[batch, {C}, height, width], a patch ({config.patch_size}) or more", ""
    else:
        fits, want = pixel_values.shape[1:] == (C, H, W), f"[batch, {C}, {H}, {W}]"
        fix = "resize to image_size (or pass interpolate_pos_encoding=True) and "
    if not fits:
        raise ValueError(
            f"{owner}: pixel_values must be {want} (channels first, as in transformers), got "
            f"{got}. Fix: {fix}put channels before height and width (x.transpose(0, 3, 1, 2) "
            "for NHWC)"
        )
    return pixel_values


def patchify(projection: nn.Conv2d, pixel_values: jax.Array) -> jax.Array:
    """``[B, C, H, W]`` images through ``projection`` (a strided convolution, in its dtype):
    ``[B, (H / P) * (W / P), hidden]``, the patches row by row."""
    patches = projection(pixel_values.astype(projection.weight.value.dtype))  # [B, D, H/P, W/P]
    B, D = patches.shape[:2]
    return patches.reshape(B, D, -1).transpose(0, 2, 1)  # [B, patches, hidden]


def prepend(token: jax.Array, embeddings: jax.Array) -> jax.Array:
    """``embeddings`` ``[B, N, D]`` after a learnt ``token`` of ``D`` features (``[D]`` or
    ``[1, 1, D]``), the same in every row: ``[B, 1 + N, D]``."""
    B, _, D = embeddings.shape
    tokens = jnp.broadcast_to(token.reshape(1, 1, D), (B, 1, D))
    return jnp.concatenate([tokens, embeddings], axis=1)


def _cubic(x: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances ``x``."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


@functools.lru_cache(maxsize=64)
def _bicubic(size: int, new: int, antialias: bool) -> np.ndarray:
    """The ``[new, size]`` float32 matrix of PyTorch's bicubic resize of one axis."""
    scale = float(np.float32(size) / np.float32(new))  # PyTorch's float32 in / out
    weights = np.zeros((new, size))
    for i in range(new):
        if antialias:  # PIL's filter over every input the (widened) kernel covers
            support, stretch = (2.0 * scale, 1.0 / scale) if scale >= 1 else (2.0, 1.0)
            center = scale * (i + 0.5)
            lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), size)
            taps = _cubic((np.arange(lo, hi) - center + 0.5) * stretch, -0.5)
            weights[i, lo:hi] = taps / taps.sum()
            continue
        source = scale * (i + 0.5) - 0.5
        start = min(int(np.floor(source)), size - 1)
        t = min(max(source - start, 0.0), 1.0)
        taps = _cubic(np.array([t + 1, t, 1 - t, 2 - t]), -0.75)
        np.add.at(weights[i], np.clip(np.arange(start - 1, start + 3), 0, size - 1), taps)
    return weights.astype(np.float32)


def resize_positions(
    table: jax.Array,
    grid: tuple[int, int],
    new_grid: tuple[int, int],
    *,
    leading: int = 0,
    antialias: bool = False,
) -> jax.Array:
    """A learnt position table for another patch grid, as transformers'
    ``interpolate_pos_encoding`` makes it; the table itself where the grid is the same.

    Args:
        table: ``[1, leading + h * w, D]``: ``leading`` positions of their own ([CLS]), then
            the ``grid`` ``(h, w)`` row by row.
        new_grid: ``(H, W)``, the patch grid of the images.
        antialias: PyTorch's ``antialias`` (DINOv2 with registers).

    Returns:
        ``[1, leading + H * W, D]``.
    """
    if tuple(new_grid) == tuple(grid):
        return table
    (h, w), (H, W) = grid, new_grid
    D = table.shape[-1]
    patches = table[0, leading:].reshape(h, w, D).astype(jnp.float32)
    rows, cols = _bicubic(h, H, antialias), _bicubic(w, W, antialias)
    resized = jnp.einsum("Hh,Ww,hwd->HWd", rows, cols, patches, precision="highest")
    resized = resized.reshape(1, H * W, D).astype(table.dtype)
    return jnp.concatenate([table[:, :leading], resized], axis=1)  # [1, leading + H * W, D]


class VisionPreTrainedModel(EncoderPreTrainedModel):
    """What every model of a vision tower shares: ``forward`` of images (checked, embedded by
    the base model's ``embeddings``, then ``from_embeddings``). A family whose positions are
    resized for any image (DINOv2: transformers' has no flag) sets ``always_interpolate``."""

    always_interpolate: ClassVar[bool] = False

    def forward(
        self,
        pixel_values: jax.Array,
        interpolate_pos_encoding: bool | None = None,
        *,
        rngs: Rngs | None = None,
    ) -> Any:
        """Encode (a base model) or classify (a head model) a batch of images.

        Args:
            pixel_values: ``[B, C, H, W]`` float images of ``config.image_size``, normalised as
                the model's image processor does.
            interpolate_pos_encoding: take images of another size: the learnt positions are
                resized (bicubic) to their patch grid, as in transformers (DINOv2 always).
            rngs: a ``dropout`` stream, needed in training mode with dropout only.

        Returns:
            A base model: ``(last_hidden_state [B, N, hidden], pooler_output or None)``; a
            classifier: logits ``[B, num_labels]``.
        """
        any_size = self.always_interpolate or bool(interpolate_pos_encoding)
        pixel_values = check_pixels(self.config, pixel_values, any_size=any_size)
        hidden = self.base_model.embeddings(pixel_values, rngs=rngs)  # [B, N, hidden]
        return self.from_embeddings(hidden, None, rngs=rngs)


__all__ = [
    "VisionPreTrainedModel",
    "check_pixels",
    "pair",
    "patch_grid",
    "patchify",
    "prepend",
    "resize_positions",
]
