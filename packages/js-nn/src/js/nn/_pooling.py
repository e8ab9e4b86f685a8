"""Pooling over NCHW inputs: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d."""

from __future__ import annotations

from js import Module

from . import functional as F
from ._checks import check_positive, check_rank, check_window, layout, pair, shape_of


class _Pool2d(Module):
    _name = "Pool2d"

    def __init__(self, kernel_size, stride=None):
        super().__init__()
        self.kernel_size = pair(kernel_size, "kernel_size", self._name)
        self.stride = self.kernel_size if stride is None else pair(stride, "stride", self._name)
        check_positive(self._name, kernel_size=self.kernel_size, stride=self.stride)

    def forward(self, x):
        expected = layout("B", "C", "H", "W")
        check_rank(self._name, x, (4,), expected)
        check_window(self._name, x, shape_of(x)[2:], self.kernel_size, expected)
        return self._pool(x, self.kernel_size, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"


class MaxPool2d(_Pool2d):
    """Maximum over each ``kernel_size`` window, windows ``stride`` apart (no padding).

    Args:
        kernel_size: an int or a pair ``(KH, KW)``.
        stride: an int or a pair; defaults to ``kernel_size``.

    Shape:
        input ``[B, C, H, W]``, output ``[B, C, (H - KH) // SH + 1, (W - KW) // SW + 1]``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.MaxPool2d(2)(jnp.ones((1, 3, 8, 8))).shape
        (1, 3, 4, 4)
    """

    _name = "MaxPool2d"
    _pool = staticmethod(F.max_pool2d)


class AvgPool2d(_Pool2d):
    """Mean over each ``kernel_size`` window, windows ``stride`` apart (no padding).

    Args:
        kernel_size: an int or a pair ``(KH, KW)``.
        stride: an int or a pair; defaults to ``kernel_size``.

    Shape:
        input ``[B, C, H, W]``, output ``[B, C, (H - KH) // SH + 1, (W - KW) // SW + 1]``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.AvgPool2d(2, stride=1)(jnp.ones((1, 3, 8, 8))).shape
        (1, 3, 7, 7)
    """

    _name = "AvgPool2d"
    _pool = staticmethod(F.avg_pool2d)


class AdaptiveAvgPool2d(Module):
    """Global spatial mean: only ``output_size`` ``(1, 1)`` (or ``1``) is supported.

    Args:
        output_size: ``(1, 1)`` or ``1``; other sizes raise NotImplementedError.

    Shape:
        input ``[B, C, H, W]``, output ``[B, C, 1, 1]``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.AdaptiveAvgPool2d((1, 1))(jnp.ones((2, 3, 5, 5))).shape
        (2, 3, 1, 1)
    """

    def __init__(self, output_size=(1, 1)):
        super().__init__()
        sizes = output_size if isinstance(output_size, (tuple, list)) else (output_size,)
        if output_size not in (1, (1, 1), [1, 1]) or any(isinstance(v, bool) for v in sizes):
            raise NotImplementedError(
                f"AdaptiveAvgPool2d supports only output_size (1, 1) (a global mean), got "
                f"{output_size!r}. Fix: use AvgPool2d with an explicit window"
            )
        self.output_size = (1, 1)

    def forward(self, x):
        check_rank("AdaptiveAvgPool2d", x, (4,), layout("B", "C", "H", "W"))
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
