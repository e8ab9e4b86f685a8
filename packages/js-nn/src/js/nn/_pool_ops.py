"""Pooling kernels behind ``js.nn.functional``'s ``max_pool*``/``avg_pool*``/``adaptive_*``.

Window arithmetic is PyTorch's (``aten/src/ATen/native/Pool.h``): output sizes, ``ceil_mode``'s
rule that the last window starts inside the input or the left padding, padding at most half
the kernel, and AvgPool's divisors (``count_include_pad``; a ``ceil_mode`` overhang beyond the
padding never counts).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._checks import as_tuple, is_int


def check_pool_padding(layer: str, kernel: tuple[int, ...], padding: tuple[int, ...]) -> None:
    """PyTorch's rule: each padding at most half its kernel size (``padding <= kernel // 2``)."""
    if any(p > k // 2 for k, p in zip(kernel, padding, strict=True)):
        raise ValueError(
            f"{layer}: padding {padding} must be at most half the kernel size {kernel} "
            "(PyTorch's rule: padding <= kernel_size // 2). Fix: lower padding or widen the kernel"
        )


def pool_geometry(layer, sizes, kernel, stride, padding, dilation, ceil_mode):
    """PyTorch's pooling output sizes and the ``(low, high)`` padding that yields them.

    ``out = (n + 2p - d(k - 1) - 1 [+ s - 1 with ceil_mode]) // s + 1``; with ``ceil_mode``
    the last window must start inside the input or the left padding, else it is dropped.
    """
    check_pool_padding(layer, kernel, padding)
    outs, pads = [], []
    for n, k, s, p, d in zip(sizes, kernel, stride, padding, dilation, strict=True):
        window = d * (k - 1) + 1
        out = (n + 2 * p - window + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= n + p:
            out -= 1
        outs.append(out)
        pads.append((p, max(p, (out - 1) * s + window - n - p)))
    if min(outs) < 1:
        raise ValueError(
            f"{layer}: the output size would be {outs} for spatial size {list(sizes)}, kernel "
            f"{tuple(kernel)}, stride {tuple(stride)}, padding {tuple(padding)}, dilation "
            f"{tuple(dilation)}. Fix: use a larger input or a smaller kernel"
        )
    return outs, pads


def _pool_args(n, kernel_size, stride, padding, dilation):
    kernel = as_tuple(kernel_size, n)
    stride = kernel if stride is None else as_tuple(stride, n)
    return kernel, stride, as_tuple(padding, n), as_tuple(dilation, n)


def _reduce(input, init, op, kernel, stride, dilation, pads, outs):
    y = lax.reduce_window(
        input,
        init,
        op,
        (1, 1) + kernel,
        (1, 1) + stride,
        [(0, 0), (0, 0), *pads],
        window_dilation=(1, 1) + dilation,
    )
    return y[(slice(None), slice(None), *(slice(0, o) for o in outs))]


def _first_max(windows, tangent):
    """The maximum over the last axis and the tangent of its *first* maximum, in window order
    (PyTorch's rule: a tie does not split the gradient)."""
    first = jnp.argmax(windows, axis=-1)[..., None] == jnp.arange(windows.shape[-1])
    zero = jnp.zeros((), tangent.dtype)
    return jnp.max(windows, axis=-1), jnp.sum(jnp.where(first, tangent, zero), axis=-1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _tiled_max(windows, axes: tuple[int, ...]):
    """The maximum over the window ``axes`` of a reshaped input: one reduction forward, as
    hand-written JAX writes it; the argmax is built only when a derivative is taken."""
    return jnp.max(windows, axis=axes)


@_tiled_max.defjvp
def _tiled_max_jvp(axes, primals, tangents):
    kept = [a for a in range(primals[0].ndim) if a not in axes]

    def taps(x):  # the window axes last, flattened in row-major order: [..., K]
        x = x.transpose(*kept, *axes)
        return x.reshape(*x.shape[: len(kept)], -1)

    return _first_max(taps(primals[0]), taps(tangents[0]))


def _max_pool_tiled(input, kernel):
    """Non-overlapping max pooling (stride == kernel) as a reshape and a maximum per window.

    Same values and gradients as ``reduce_window`` (the whole gradient goes to the first
    maximum of a window, as in PyTorch), but the backward pass is an elementwise select instead
    of XLA's ``select_and_scatter``, which is slow on the CPU (measured: a [64, 32, 28, 28]
    ReLU + 2x2 pool forward and backward 40 ms -> 6.5 ms; see docs/benchmarks.md).
    """
    B, C, H, W = input.shape
    kh, kw = kernel
    ho, wo = H // kh, W // kw  # VALID windows: a remainder row or column is dropped
    windows = input[:, :, : ho * kh, : wo * kw].reshape(B, C, ho, kh, wo, kw)
    return _tiled_max(windows, (3, 5))


def _lowest(dtype):
    # A NumPy scalar stays concrete under jit: lax.reduce_window then recognises the max monoid.
    return np.array(-np.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).min, dtype)


def max_pool(layer, input, kernel_size, stride, padding, dilation, ceil_mode):
    """Max pooling over every axis after the first two; errors name ``layer``."""
    n = input.ndim - 2
    kernel, stride, padding, dilation = _pool_args(n, kernel_size, stride, padding, dilation)
    outs, pads = pool_geometry(layer, input.shape[2:], kernel, stride, padding, dilation, ceil_mode)
    sizes = input.shape[2:]
    whole = all(o == m // k for o, m, k in zip(outs, sizes, kernel, strict=True))
    if n == 2 and whole and stride == kernel and max(padding) == 0 and max(dilation) == 1:
        return _max_pool_tiled(input, kernel)
    return _max_pool_windows(input, (kernel, stride, dilation, tuple(pads), tuple(outs)))


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _max_pool_windows(input, geometry):
    """Any max pooling (``geometry``: kernel, stride, dilation, pads, outs): ``reduce_window``
    forward, padding ``-inf`` so that it never wins. Its derivative comes from the window taps
    (``[B, C, *outs, prod(kernel)]``) and a select of the first maximum: PyTorch's rule, for any
    dilation (JAX has no gradient for a dilated max ``reduce_window``), and 1.6x faster forward
    and backward on the CPU than XLA's ``select_and_scatter`` (ResNet's 3x3/2 stem pool)."""
    kernel, stride, dilation, pads, outs = geometry
    return _reduce(input, _lowest(input.dtype), lax.max, kernel, stride, dilation, pads, outs)


@_max_pool_windows.defjvp
def _max_pool_windows_jvp(geometry, primals, tangents):
    (input,), (tangent,) = primals, tangents
    zero = np.array(0, tangent.dtype)
    return _first_max(_taps(input, _lowest(input.dtype), geometry), _taps(tangent, zero, geometry))


def _taps(x, pad_value, geometry):
    """The window taps of ``x`` padded with ``pad_value``, stacked last: ``[B, C, *outs, K]``."""
    kernel, stride, dilation, pads, outs = geometry
    padded = lax.pad(x, pad_value, [(0, 0, 0), (0, 0, 0), *((lo, hi, 0) for lo, hi in pads)])
    taps = []
    for offsets in np.ndindex(*kernel):
        index = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, n, s in zip(offsets, dilation, outs, stride, strict=True)
        )
        taps.append(padded[(slice(None), slice(None), *index)])
    return jnp.stack(taps, axis=-1)


def max_pool1d(
    input: jax.Array,
    kernel_size: int | tuple[int, ...],
    stride: int | tuple[int, ...] | None = None,
    padding: int | tuple[int, ...] = 0,
    dilation: int | tuple[int, ...] = 1,
    ceil_mode: bool = False,
) -> jax.Array:
    """Maximum over ``kernel_size`` windows of ``[B, C, L]`` (PyTorch's arguments and sizes;
    the padding is -inf, so it never wins)."""
    return max_pool("max_pool1d", input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d(
    input: jax.Array,
    kernel_size: int | tuple[int, ...],
    stride: int | tuple[int, ...] | None = None,
    padding: int | tuple[int, ...] = 0,
    dilation: int | tuple[int, ...] = 1,
    ceil_mode: bool = False,
) -> jax.Array:
    """Maximum over ``kernel_size`` windows of an NCHW input (``stride`` defaults to it).

    PyTorch's arguments and output sizes (see ``pool_geometry``); the padding is -inf.
    """
    return max_pool("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode)


def _avg_counts(n, k, s, p, out, count_include_pad) -> np.ndarray:
    """How many elements PyTorch divides each window's sum by, along one axis."""
    starts = np.arange(out) * s - p
    ends = np.minimum(starts + k, n + p)  # padding counts, the ceil_mode overhang does not
    if count_include_pad:
        return ends - starts
    return np.minimum(ends, n) - np.maximum(starts, 0)


def avg_pool(
    layer, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None
):
    """Average pooling over every axis after the first two; errors name ``layer``."""
    n = input.ndim - 2
    kernel, stride, padding, ones = _pool_args(n, kernel_size, stride, padding, 1)
    outs, pads = pool_geometry(layer, input.shape[2:], kernel, stride, padding, ones, ceil_mode)
    total = _reduce(input, np.array(0, input.dtype), lax.add, kernel, stride, ones, pads, outs)
    if divisor_override is not None:
        return total / divisor_override
    counts = [
        _avg_counts(size, k, s, p, o, count_include_pad)
        for size, k, s, p, o in zip(input.shape[2:], kernel, stride, padding, outs, strict=True)
    ]
    divisor = counts[0] if n == 1 else np.outer(counts[0], counts[1])
    return total / jnp.asarray(divisor, input.dtype)


def avg_pool1d(
    input: jax.Array,
    kernel_size: int | tuple[int, ...],
    stride: int | tuple[int, ...] | None = None,
    padding: int | tuple[int, ...] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> jax.Array:
    """Mean over ``kernel_size`` windows of ``[B, C, L]``, with PyTorch's arguments."""
    return avg_pool("avg_pool1d", input, kernel_size, stride, padding, ceil_mode, count_include_pad)


def avg_pool2d(
    input: jax.Array,
    kernel_size: int | tuple[int, ...],
    stride: int | tuple[int, ...] | None = None,
    padding: int | tuple[int, ...] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> jax.Array:
    """Mean over ``kernel_size`` windows of an NCHW input (``stride`` defaults to it).

    PyTorch's arguments: zero ``padding`` counts in the mean when ``count_include_pad``; a
    ``ceil_mode`` window that overhangs the padded input divides by its part inside it.
    """
    return avg_pool(
        "avg_pool2d",
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


def adaptive_avg_pool(layer, input, output_size):
    sizes = input.shape[2:]
    n = len(sizes)
    wanted = (output_size,) * n if is_int(output_size) else tuple(output_size)
    outs = tuple(size if o is None else int(o) for o, size in zip(wanted, sizes, strict=True))
    if any(size % o for size, o in zip(sizes, outs, strict=True)):
        raise NotImplementedError(
            f"{layer}: output_size {outs} must divide the input's spatial size {list(sizes)} "
            "(equal windows; PyTorch's overlapping windows for other sizes are not supported). "
            "Fix: choose an output size that divides the input, or use an AvgPool layer"
        )
    # [B, C, o1, size1 / o1, (o2, size2 / o2)]: the mean over each block of equal size
    blocks = sum(((o, size // o) for o, size in zip(outs, sizes, strict=True)), ())
    y = input.reshape(input.shape[:2] + blocks)
    return jnp.mean(y, axis=tuple(range(3, 3 + 2 * n, 2)))


def adaptive_avg_pool1d(input: jax.Array, output_size: int) -> jax.Array:
    """Mean over ``output_size`` equal windows of ``[B, C, L]``; it must divide L."""
    return adaptive_avg_pool("adaptive_avg_pool1d", input, output_size)


def adaptive_avg_pool2d(
    input: jax.Array, output_size: int | None | tuple[int | None, int | None]
) -> jax.Array:
    """Mean over equal windows of an NCHW input: ``[B, C, H, W] -> [B, C, *output_size]``.

    ``output_size`` is an int or a pair (``None`` keeps that size) that divides ``(H, W)``;
    other sizes raise NotImplementedError.
    """
    return adaptive_avg_pool("adaptive_avg_pool2d", input, output_size)
