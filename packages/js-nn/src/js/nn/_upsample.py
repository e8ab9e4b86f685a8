"""Resizing: ``interpolate`` (in ``js.nn.functional``) and the ``Upsample`` layer.

Source positions follow PyTorch's CPU kernels (``UpSample.h``) in float32, so indices and
weights agree exactly: with ``scale_factor`` given (and not recomputed) the scale is
``1 / scale_factor``, otherwise ``in / out``; ``align_corners=True`` maps corner to corner with
``(in - 1) / (out - 1)``. Both are gathers with static indices, differentiable in the input.
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from js import Module

from ._checks import check_rank, is_int, layout

_MODES = {"nearest": (3, 4), "linear": (3,), "bilinear": (4,)}
_UNSUPPORTED = ("bicubic", "trilinear", "area", "nearest-exact")


def _check_mode(mode, align_corners) -> None:
    if mode in _UNSUPPORTED:
        raise NotImplementedError(
            f"interpolate: mode={mode!r} is not supported. Fix: use 'nearest', 'linear' or "
            "'bilinear'"
        )
    if mode not in _MODES:
        raise ValueError(
            f"interpolate: mode must be 'nearest', 'linear' or 'bilinear', got {mode!r}"
        )
    if mode == "nearest" and align_corners is not None:
        raise ValueError(
            "interpolate: align_corners can only be set with the interpolating modes 'linear' "
            f"and 'bilinear', got align_corners={align_corners!r} with mode='nearest'. Fix: "
            "leave align_corners=None"
        )


def _spatial(name: str, value, n: int, kind) -> tuple | None:
    if value is None:
        return None
    ok = (
        (lambda v: is_int(v) and v >= 1)
        if kind is int
        else (lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool) and float(v) > 0)
    )
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    if len(values) != n or not all(map(ok, values)):
        what = "positive ints" if kind is int else "positive numbers"
        raise ValueError(
            f"interpolate: {name} must be one or {n} {what} for a {n + 2}-D input, got {value!r}"
        )
    return tuple(kind(v) for v in values)


def _scales(sizes, size, scale_factor, recompute):
    """Output sizes and PyTorch's per-axis float32 scale (``None``: ``in / out``)."""
    if (size is None) == (scale_factor is None):
        which = "only one of" if size is not None else "either"
        raise ValueError(
            f"interpolate: {which} size or scale_factor must be given, got size={size!r}, "
            f"scale_factor={scale_factor!r}"
        )
    if size is not None:
        return size, (None,) * len(sizes)
    outs = tuple(math.floor(n * s) for n, s in zip(sizes, scale_factor, strict=True))
    if min(outs) < 1:
        raise ValueError(f"interpolate: the output size would be {list(outs)}")
    return outs, ((None,) * len(sizes) if recompute else scale_factor)


def _scale(n: int, out: int, factor, align_corners: bool) -> np.float32:
    if align_corners:
        return np.float32((n - 1) / (out - 1)) if out > 1 else np.float32(0)
    return np.float32(1.0 / factor) if factor is not None else np.float32(n) / np.float32(out)


def _nearest_axis(x, axis, n, out, factor):
    dst = np.arange(out, dtype=np.float32)
    index = np.minimum(np.floor(dst * _scale(n, out, factor, False)).astype(np.int64), n - 1)
    return jnp.take(x, jnp.asarray(index), axis=axis)


def _linear_axis(x, axis, n, out, factor, align_corners):
    dst = np.arange(out, dtype=np.float32)
    scale = _scale(n, out, factor, align_corners)
    src = scale * dst if align_corners else np.maximum(scale * (dst + 0.5) - 0.5, 0)
    low = np.minimum(np.floor(src).astype(np.int64), n - 1)
    high = np.minimum(low + 1, n - 1)
    lam = np.clip(src - low, 0, 1).astype(np.float32)
    shape = [1] * x.ndim
    shape[axis] = out
    weight = jnp.asarray(lam, x.dtype).reshape(shape)
    lo, hi = jnp.take(x, jnp.asarray(low), axis=axis), jnp.take(x, jnp.asarray(high), axis=axis)
    return lo * (1 - weight) + hi * weight


def interpolate(
    input: jax.Array,
    size: int | tuple[int, ...] | None = None,
    scale_factor: float | tuple[float, ...] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> jax.Array:
    """Resize the spatial axes of ``[B, C, L]`` or ``[B, C, H, W]``, as PyTorch's.

    Args:
        input: the array. size: the output spatial size (an int or a tuple), or
            scale_factor: the multiplier (a number or a tuple; output ``floor(n * s)``);
            exactly one of them.
        mode: ``'nearest'`` (3-D or 4-D), ``'linear'`` (3-D) or ``'bilinear'`` (4-D).
        align_corners: for the linear modes: map the corner pixels' centres onto each other
            (True) or the corners of the grid (False, the default).
        recompute_scale_factor: compute the scale from the sizes even if scale_factor is given.
        antialias: only False.

    Example:
        >>> import jax.numpy as jnp
        >>> import js.nn.functional as F
        >>> F.interpolate(jnp.array([[[1.0, 2.0]]]), scale_factor=2).tolist()
        [[[1.0, 1.0, 2.0, 2.0]]]
        >>> F.interpolate(jnp.array([[[1.0, 2.0]]]), size=3, mode="linear",
        ...               align_corners=True).tolist()
        [[[1.0, 1.5, 2.0]]]
    """
    _check_mode(mode, align_corners)
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    ranks = _MODES[mode]
    spatial = ("L",) if ranks == (3,) else ("H", "W") if ranks == (4,) else ("...",)
    check_rank(f"interpolate(mode={mode!r})", input, ranks, layout("B", "C", *spatial))
    n = input.ndim - 2
    sizes = input.shape[2:]
    size, factor = _spatial("size", size, n, int), _spatial("scale_factor", scale_factor, n, float)
    outs, factors = _scales(sizes, size, factor, bool(recompute_scale_factor))
    y = input
    for axis, (m, out, f) in enumerate(zip(sizes, outs, factors, strict=True), start=2):
        if mode == "nearest":
            y = _nearest_axis(y, axis, m, out, f)
        else:
            y = _linear_axis(y, axis, m, out, f, bool(align_corners))
    return y


class Upsample(Module):
    """Resize the spatial axes by ``scale_factor`` or to ``size`` (``F.interpolate``).

    Args:
        size: the output spatial size, or scale_factor: the multiplier; exactly one.
        mode: ``'nearest'`` (default), ``'linear'`` (``[B, C, L]``) or ``'bilinear'``
            (``[B, C, H, W]``). align_corners: for the linear modes (False when None), as in
            PyTorch. recompute_scale_factor: as in ``F.interpolate``.

    Shape:
        input ``[B, C, L]`` or ``[B, C, H, W]``, output ``[B, C, *size]`` or
        ``[B, C, floor(H * scale_factor), ...]``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.Upsample(scale_factor=2, mode="bilinear")(jnp.ones((1, 3, 4, 4))).shape
        (1, 3, 8, 8)
    """

    def __init__(
        self,
        size: int | tuple[int, ...] | list[int] | None = None,
        scale_factor: float | tuple[float, ...] | list[float] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ):
        super().__init__()
        _check_mode(mode, align_corners)
        if (size is None) == (scale_factor is None):
            raise ValueError(
                f"Upsample: give exactly one of size and scale_factor, got size={size!r}, "
                f"scale_factor={scale_factor!r}"
            )
        # Sizes and factors are checked against the input's rank at the call.
        self.size = tuple(size) if isinstance(size, list) else size
        if isinstance(scale_factor, (list, tuple)):
            scale_factor = tuple(scale_factor)
        elif isinstance(scale_factor, numbers.Real) and not isinstance(scale_factor, bool):
            scale_factor = float(scale_factor)  # a NumPy scalar too
        self.scale_factor = scale_factor
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x: jax.Array) -> jax.Array:
        return interpolate(
            x,
            self.size,
            self.scale_factor,
            self.mode,
            self.align_corners,
            self.recompute_scale_factor,
        )

    def extra_repr(self) -> str:
        what = (
            f"size={self.size}" if self.size is not None else (f"scale_factor={self.scale_factor}")
        )
        return f"{what}, mode={self.mode!r}"
