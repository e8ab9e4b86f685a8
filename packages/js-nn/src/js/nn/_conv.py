"""Convolutions: Conv1d, Conv2d (NCHW) and ConvTranspose2d."""

from __future__ import annotations

import math

from js import Module, Parameter

from . import _random
from . import functional as F
from ._checks import (
    check_dim,
    check_int,
    check_positive,
    check_rank,
    check_window,
    fail_shape,
    is_int,
    layout,
    pair,
    shape_of,
)
from ._linear import uniform_fan_in


def _check_groups(layer: str, in_channels: int, out_channels: int, groups: int) -> None:
    if groups < 1 or in_channels % groups or out_channels % groups:
        raise ValueError(
            f"{layer}: groups={groups} must be positive and divide in_channels={in_channels} "
            f"and out_channels={out_channels}"
        )


class _ConvBase(Module):
    """Shared constructor and checks of Conv1d and Conv2d."""

    _name = "Conv"
    _spatial = ("L",)

    def _build(self, in_channels, out_channels, kernel, stride, padding, groups, bias, rngs):
        in_channels = check_int(self._name, "in_channels", in_channels)
        out_channels = check_int(self._name, "out_channels", out_channels)
        if not is_int(groups):
            raise ValueError(f"{self._name}: groups must be an integer >= 1, got {groups!r}")
        _check_groups(self._name, in_channels, out_channels, groups)
        check_positive(self._name, kernel_size=kernel, stride=stride)
        if not isinstance(padding, str) and any(p < 0 for p in padding):
            raise ValueError(f"{self._name}: padding must be non-negative, got {padding!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding, self.groups = kernel, stride, padding, groups
        fan_in = in_channels // groups * math.prod(kernel)
        shape = (out_channels, in_channels // groups) + kernel
        self.weight = Parameter(uniform_fan_in(rngs.next("params"), shape, fan_in))
        self.bias = Parameter(_random.zeros((out_channels,))) if bias else None

    def _check(self, x) -> None:
        expected = layout("B", f"C_in={self.in_channels}", *self._spatial)
        check_rank(self._name, x, (2 + len(self._spatial),), expected)
        check_dim(self._name, x, 1, self.in_channels, "the channel count", expected)
        if isinstance(self.padding, str):
            if self.padding.upper() == "SAME":
                return
            pads = (0,) * len(self._spatial)
        else:
            pads = self.padding
        sizes = [n + 2 * p for n, p in zip(shape_of(x)[2:], pads, strict=True)]
        check_window(self._name, x, sizes, self.kernel_size, expected)

    def forward(self, x):
        self._check(x)
        bias = None if self.bias is None else self.bias.value
        return self._conv(x, self.weight.value, bias, self.stride, self.padding, self.groups)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, groups={self.groups}, "
            f"bias={self.bias is not None}"
        )


class Conv1d(_ConvBase):
    """1-D cross-correlation ``y[b, o] = bias[o] + sum_i weight[o, i] * x[b, i]`` (sliding).

    Args:
        in_channels, out_channels: C_in and C_out, each divisible by ``groups``.
        kernel_size: K. stride: step. padding: zeros added at both ends (an int).
        groups: channel groups. bias: add a learnable bias. rngs: ``js.Rngs`` with ``params``.

    Shape:
        input ``[B, C_in, L]``, output ``[B, C_out, (L + 2 * padding - K) // stride + 1]``.

    Weights:
        ``weight`` ``[C_out, C_in / groups, K]`` from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
        fan_in = C_in / groups * K; ``bias`` ``[C_out]`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> conv = js.nn.Conv1d(2, 4, 3, padding=1, rngs=js.Rngs(params=0))
        >>> conv(jnp.ones((1, 2, 10))).shape
        (1, 4, 10)
    """

    _name = "Conv1d"
    _spatial = ("L",)
    _conv = staticmethod(F.conv1d)

    def __init__(
        self, in_channels, out_channels, kernel_size, stride=1, padding=0, groups=1, *,
        bias=True, rngs,
    ):  # fmt: skip
        super().__init__()
        for name, value in (("padding", padding), ("kernel_size", kernel_size),
                            ("stride", stride)):  # fmt: skip
            if not is_int(value):
                raise TypeError(f"Conv1d: {name} must be an int, got {value!r}")
        kernel, stride, padding = (int(kernel_size),), (int(stride),), (int(padding),)
        self._build(in_channels, out_channels, kernel, stride, padding, groups, bias, rngs)


class Conv2d(_ConvBase):
    """2-D cross-correlation over NCHW inputs.

    Args:
        in_channels, out_channels: C_in and C_out, each divisible by ``groups``.
        kernel_size, stride: an int or a pair ``(h, w)``.
        padding: an int, a pair, or ``'SAME'``/``'VALID'`` (either case).
        groups: channel groups. bias: add a learnable bias. rngs: ``js.Rngs`` with ``params``.

    Shape:
        input ``[B, C_in, H, W]``, output ``[B, C_out, H_out, W_out]`` with
        ``H_out = (H + 2 * padding - KH) // stride + 1`` (likewise W; ``ceil(H / stride)``
        for ``'SAME'``).

    Weights:
        ``weight`` ``[C_out, C_in / groups, KH, KW]`` from U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        with fan_in = C_in / groups * KH * KW; ``bias`` ``[C_out]`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> conv = js.nn.Conv2d(3, 8, 3, padding=1, rngs=js.Rngs(params=0))
        >>> conv(jnp.ones((2, 3, 16, 16))).shape
        (2, 8, 16, 16)
    """

    _name = "Conv2d"
    _spatial = ("H", "W")
    _conv = staticmethod(F.conv2d)

    def __init__(
        self, in_channels, out_channels, kernel_size, stride=1, padding=0, groups=1, *,
        bias=True, rngs,
    ):  # fmt: skip
        super().__init__()
        if isinstance(padding, str):
            if padding.upper() not in ("SAME", "VALID"):
                raise ValueError(
                    f"Conv2d: padding must be an int, a pair, 'SAME' or 'VALID', got {padding!r}"
                )
            padding = padding.upper()
        else:
            padding = pair(padding, "padding", "Conv2d")
        kernel = pair(kernel_size, "kernel_size", "Conv2d")
        stride = pair(stride, "stride", "Conv2d")
        self._build(in_channels, out_channels, kernel, stride, padding, groups, bias, rngs)


class ConvTranspose2d(Module):
    """Transposed 2-D convolution (the gradient of Conv2d with respect to its input), NCHW.

    Args:
        in_channels, out_channels: C_in and C_out.
        kernel_size, stride, padding, output_padding: an int or a pair ``(h, w)``;
            ``output_padding`` must be smaller than ``stride``.
        bias: add a learnable bias. rngs: ``js.Rngs`` with ``params``.
        groups, dilation: accepted only as 1; other values raise NotImplementedError.

    Shape:
        input ``[B, C_in, H, W]``, output ``[B, C_out, H_out, W_out]`` with
        ``H_out = (H - 1) * stride - 2 * padding + KH + output_padding`` (likewise W).

    Weights:
        ``weight`` ``[C_out, C_in, KH, KW]`` (PyTorch stores ``[C_in, C_out, KH, KW]``;
        ``load_torch_state_dict`` converts) from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
        fan_in = C_in * KH * KW, the input channels of this layout (PyTorch uses
        C_out * KH * KW); ``bias`` ``[C_out]`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> up = js.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1,
        ...                            rngs=js.Rngs(params=0))
        >>> up(jnp.ones((1, 4, 8, 8))).shape
        (1, 2, 16, 16)
    """

    def __init__(
        self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, *,
        bias=True, groups=1, dilation=1, rngs,
    ):  # fmt: skip
        super().__init__()
        if groups != 1 or dilation not in (1, (1, 1)) or isinstance(groups, bool) or any(
            isinstance(d, bool) for d in (dilation if isinstance(dilation, tuple) else (dilation,))
        ):
            raise NotImplementedError(
                f"ConvTranspose2d supports only groups=1 and dilation=1, got groups={groups!r}, "
                f"dilation={dilation!r}. Fix: leave them at 1"
            )
        in_channels = check_int("ConvTranspose2d", "in_channels", in_channels)
        out_channels = check_int("ConvTranspose2d", "out_channels", out_channels)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = pair(kernel_size, "kernel_size", "ConvTranspose2d")
        self.stride = pair(stride, "stride", "ConvTranspose2d")
        self.padding = pair(padding, "padding", "ConvTranspose2d")
        self.output_padding = pair(output_padding, "output_padding", "ConvTranspose2d")
        check_positive("ConvTranspose2d", kernel_size=self.kernel_size, stride=self.stride)
        if any(p < 0 for p in self.padding):
            raise ValueError(f"ConvTranspose2d: padding must be non-negative, got {self.padding}")
        if any(op >= s or op < 0 for op, s in zip(self.output_padding, self.stride, strict=True)):
            raise ValueError(
                f"ConvTranspose2d: output_padding {self.output_padding} must be non-negative "
                f"and smaller than stride {self.stride}"
            )
        shape = (out_channels, in_channels) + self.kernel_size
        fan_in = in_channels * math.prod(self.kernel_size)
        self.weight = Parameter(uniform_fan_in(rngs.next("params"), shape, fan_in))
        self.bias = Parameter(_random.zeros((out_channels,))) if bias else None

    def forward(self, x):
        expected = layout("B", f"C_in={self.in_channels}", "H", "W")
        check_rank("ConvTranspose2d", x, (4,), expected)
        check_dim("ConvTranspose2d", x, 1, self.in_channels, "the channel count", expected)
        sizes = [
            (n - 1) * s - 2 * p + k + op
            for n, s, p, k, op in zip(
                shape_of(x)[2:],
                self.stride,
                self.padding,
                self.kernel_size,
                self.output_padding,
                strict=True,
            )
        ]
        if min(sizes) < 1:
            fail_shape("ConvTranspose2d", expected, x, f"the output size would be {sizes}")
        bias = None if self.bias is None else self.bias.value
        return F.conv_transpose2d(
            x, self.weight.value, bias, self.stride, self.padding, self.output_padding
        )

    @classmethod
    def from_torch(cls, name: str, array):
        """PyTorch's ``[C_in, C_out, KH, KW]`` weight -> ours ``[C_out, C_in, KH, KW]``."""
        return array.swapaxes(0, 1) if name == "weight" else array

    @classmethod
    def to_torch(cls, name: str, array):
        return array.swapaxes(0, 1) if name == "weight" else array

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, "
            f"output_padding={self.output_padding}, bias={self.bias is not None}"
        )
