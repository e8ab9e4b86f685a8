"""Pooling over NCL and NCHW inputs: Max/Avg/AdaptiveAvg pools, 1-D and 2-D.

Window arithmetic (output sizes, ``ceil_mode``, the padding bound) is PyTorch's and lives in
``_pool_ops.pool_geometry``; the layers check their arguments once, at construction.
"""

from __future__ import annotations

import jax

from js import Module

from . import _pool_ops as P
from ._checks import check_bool, check_int, check_rank, ints, is_int, layout

# a size per spatial dimension, or one int for all of them (PyTorch's _size_any_t)
_Size = int | tuple[int, ...]


class _PoolNd(Module):
    """Shared constructor and forward of the max and average pools."""

    _name = "Pool"
    _ndim = 2

    def _setup(self, kernel_size, stride, padding, dilation, ceil_mode) -> None:
        name, n = self._name, self._ndim
        self.kernel_size = ints(name, "kernel_size", kernel_size, n, minimum=1)
        # PyTorch: stride=None (the default) means kernel_size.
        stride = self.kernel_size if stride is None else stride
        self.stride = ints(name, "stride", stride, n, minimum=1)
        self.padding = ints(name, "padding", padding, n, minimum=0)
        self.dilation = ints(name, "dilation", dilation, n, minimum=1)
        self.ceil_mode = check_bool(name, "ceil_mode", ceil_mode)
        P.check_pool_padding(name, self.kernel_size, self.padding)

    def _pool(self, x: jax.Array) -> jax.Array:
        raise NotImplementedError  # each pool family (max, average) defines it

    def forward(self, x: jax.Array) -> jax.Array:
        spatial = ("L",) if self._ndim == 1 else ("H", "W")
        check_rank(self._name, x, (2 + self._ndim,), layout("B", "C", *spatial))
        return self._pool(x)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class _MaxPoolNd(_PoolNd):
    def __init__(
        self,
        kernel_size: _Size,
        stride: _Size | None = None,
        padding: _Size = 0,
        dilation: _Size = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ):
        super().__init__()
        if return_indices:
            raise NotImplementedError(
                f"{self._name}: return_indices=True is not supported (there is no MaxUnpool). "
                "Fix: leave it False"
            )
        self._setup(kernel_size, stride, padding, dilation, ceil_mode)

    def _pool(self, x):
        return P.max_pool(
            self._name,
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
        )


class MaxPool1d(_MaxPoolNd):
    """Maximum over each ``kernel_size`` window of ``[B, C, L]``, windows ``stride`` apart.

    Args:
        kernel_size: an int. stride: an int; defaults to ``kernel_size``.
        padding: -inf added at both ends (it never wins), at most ``kernel_size // 2``.
        dilation: spacing between window taps (1).
        return_indices: only False. ceil_mode: round the output length up; the last window
            must still start inside the input or the left padding (PyTorch's rule).

    Shape:
        input ``[B, C, L]``, output ``[B, C, (L + 2 * padding - dilation * (K - 1) - 1) //
        stride + 1]`` (rounded up with ``ceil_mode``).

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.MaxPool1d(3, 2, 1)(jnp.ones((1, 3, 8))).shape
        (1, 3, 4)
    """

    _name = "MaxPool1d"
    _ndim = 1


class MaxPool2d(_MaxPoolNd):
    """Maximum over each ``kernel_size`` window of ``[B, C, H, W]``, windows ``stride`` apart.

    Args:
        kernel_size: an int or a pair ``(KH, KW)``. stride: likewise; defaults to it.
        padding: -inf added on every side (it never wins), at most ``kernel_size // 2``.
        dilation: spacing between window taps (1).
        return_indices: only False. ceil_mode: round the output size up; the last window
            must still start inside the input or the top/left padding (PyTorch's rule).

    Shape:
        input ``[B, C, H, W]``, output ``[B, C, H_out, W_out]`` with
        ``H_out = (H + 2 * padding - dilation * (KH - 1) - 1) // stride + 1`` (likewise W;
        rounded up with ``ceil_mode``).

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.MaxPool2d(2)(jnp.ones((1, 3, 8, 8))).shape
        (1, 3, 4, 4)
        >>> js.nn.MaxPool2d(3, 2, 1)(jnp.ones((1, 3, 8, 8))).shape  # the ResNet stem's
        (1, 3, 4, 4)
    """

    _name = "MaxPool2d"
    _ndim = 2


class _AvgPoolNd(_PoolNd):
    divisor_override: int | None = None
    count_include_pad: bool  # set by the subclasses' __init__

    def _pool(self, x):
        return P.avg_pool(
            self._name,
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"ceil_mode={self.ceil_mode}, count_include_pad={self.count_include_pad}"
        )


class AvgPool1d(_AvgPoolNd):
    """Mean over each ``kernel_size`` window of ``[B, C, L]``, windows ``stride`` apart.

    Args:
        kernel_size: an int. stride: an int; defaults to ``kernel_size``.
        padding: zeros added at both ends, at most ``kernel_size // 2``.
        ceil_mode: round the output length up (PyTorch's rule; an overhanging last window
            averages only its part inside the padded input).
        count_include_pad: count the padding zeros in each mean (True, PyTorch's default).

    Shape:
        input ``[B, C, L]``, output ``[B, C, (L + 2 * padding - K) // stride + 1]``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.AvgPool1d(3, 1, 1, count_include_pad=False)(jnp.ones((1, 1, 4))).tolist()
        [[[1.0, 1.0, 1.0, 1.0]]]
    """

    _name = "AvgPool1d"
    _ndim = 1

    def __init__(
        self,
        kernel_size: _Size,
        stride: _Size | None = None,
        padding: _Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ):
        super().__init__()
        self._setup(kernel_size, stride, padding, 1, ceil_mode)
        self.count_include_pad = check_bool(self._name, "count_include_pad", count_include_pad)


class AvgPool2d(_AvgPoolNd):
    """Mean over each ``kernel_size`` window of ``[B, C, H, W]``, windows ``stride`` apart.

    Args:
        kernel_size: an int or a pair ``(KH, KW)``. stride: likewise; defaults to it.
        padding: zeros added on every side, at most ``kernel_size // 2``.
        ceil_mode: round the output size up (PyTorch's rule; an overhanging last window
            averages only its part inside the padded input).
        count_include_pad: count the padding zeros in each mean (True, PyTorch's default).
        divisor_override: an int to divide every window's sum by instead (None).

    Shape:
        input ``[B, C, H, W]``, output ``[B, C, (H + 2 * padding - KH) // SH + 1,
        (W + 2 * padding - KW) // SW + 1]``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.AvgPool2d(2, stride=1)(jnp.ones((1, 3, 8, 8))).shape
        (1, 3, 7, 7)
    """

    _name = "AvgPool2d"
    _ndim = 2

    def __init__(
        self,
        kernel_size: _Size,
        stride: _Size | None = None,
        padding: _Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ):
        super().__init__()
        self._setup(kernel_size, stride, padding, 1, ceil_mode)
        self.count_include_pad = check_bool(self._name, "count_include_pad", count_include_pad)
        if divisor_override is not None:
            divisor_override = check_int(self._name, "divisor_override", divisor_override)
        self.divisor_override = divisor_override


class _AdaptiveAvgPoolNd(Module):
    _name = "AdaptiveAvgPool"
    _ndim = 2

    def __init__(self, output_size: int | tuple[int | None, ...] | None):
        super().__init__()
        n = self._ndim
        sizes = (output_size,) * n if is_int(output_size) or output_size is None else output_size
        if not isinstance(sizes, (tuple, list)) or len(sizes) != n:
            raise TypeError(
                f"{self._name}: output_size must be an int or a tuple of {n} ints (or None), "
                f"got {output_size!r}"
            )
        self.output_size = tuple(
            None if o is None else check_int(self._name, "output_size", o) for o in sizes
        )

    def forward(self, x: jax.Array) -> jax.Array:
        spatial = ("L",) if self._ndim == 1 else ("H", "W")
        check_rank(self._name, x, (2 + self._ndim,), layout("B", "C", *spatial))
        return P.adaptive_avg_pool(self._name, x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """Mean over ``output_size`` equal windows of ``[B, C, L]``; ``output_size`` must divide L.

    Args:
        output_size: O, an int dividing L (others raise NotImplementedError at the call).

    Shape:
        input ``[B, C, L]``, output ``[B, C, O]``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.AdaptiveAvgPool1d(2)(jnp.arange(4.0).reshape(1, 1, 4)).tolist()
        [[[0.5, 2.5]]]
    """

    _name = "AdaptiveAvgPool1d"
    _ndim = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """Mean over equal windows: ``[B, C, H, W] -> [B, C, OH, OW]`` where OH divides H, OW W.

    Args:
        output_size: an int or a pair ``(OH, OW)`` (``None`` keeps that size) dividing the
            input's size; others raise NotImplementedError at the call (PyTorch's overlapping
            windows for them are not supported). ``1`` is the global mean.

    Shape:
        input ``[B, C, H, W]``, output ``[B, C, OH, OW]``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.AdaptiveAvgPool2d((1, 1))(jnp.ones((2, 3, 5, 5))).shape
        (2, 3, 1, 1)
        >>> js.nn.AdaptiveAvgPool2d((2, None))(jnp.ones((2, 3, 4, 6))).shape
        (2, 3, 2, 6)
    """

    _name = "AdaptiveAvgPool2d"
    _ndim = 2
