"""Convolutions: one N-d base, ``_ConvNd``, and thin named subclasses (equinox's ``Conv``).

Every argument is checked once, in ``_ConvNd.__init__``; the subclasses only fix the number of
spatial axes, the functional kernel, and PyTorch's positional order of their arguments.
Weights are ``[C_out, C_in / groups, *K]`` for both directions: a transposed convolution stores
the kernel of the convolution it runs (PyTorch stores ``[C_in, C_out / groups, *K]``; the
``from_torch``/``to_torch`` hooks convert).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import numpy as np
from jax.typing import DTypeLike

from js import Module, Parameter, Rngs

from . import functional as F
from ._checks import (
    check_bool,
    check_dim,
    check_int,
    check_rank,
    check_window,
    fail_shape,
    ints,
    layout,
    shape_of,
)
from ._factory import float_dtype, uniform_fan_in, zeros

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
# a size per spatial dimension, or one int for all of them (PyTorch's _size_any_t)
_Size = int | tuple[int, ...]


def _check_padding(layer: str, padding, n: int, transposed: bool):
    if isinstance(padding, str) and not transposed:
        if padding.lower() not in ("same", "valid"):
            raise ValueError(
                f"{layer}: padding must be an int, a tuple of {n}, 'same' or 'valid', "
                f"got {padding!r}"
            )
        return padding.lower()
    return ints(layer, "padding", padding, n, minimum=0)


def _check_padding_mode(layer: str, padding_mode) -> None:
    if padding_mode == "zeros":
        return
    if padding_mode in _PADDING_MODES:
        raise NotImplementedError(
            f"{layer}: padding_mode={padding_mode!r} is not supported, only 'zeros'. Fix: pad "
            f"the input yourself (jnp.pad(x, ..., mode=...)) and use padding=0"
        )
    raise ValueError(f"{layer}: padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}")


def _swap_group_axes(array, groups: int):
    """``[g * A, B, *K]`` -> ``[g * B, A, *K]``: axes 0 and 1 swapped within each group (its own
    inverse, so it converts PyTorch's transposed layout to ours and back)."""
    a, b, k = array.shape[0] // groups, array.shape[1], array.shape[2:]
    grouped = array.reshape((groups, a, b) + k).swapaxes(1, 2)  # [g, B, A, *K]
    return grouped.reshape((groups * b, a) + k)


def _check_channels(layer: str, in_channels, out_channels, groups) -> tuple[int, int, int]:
    in_channels = check_int(layer, "in_channels", in_channels)
    out_channels = check_int(layer, "out_channels", out_channels)
    groups = check_int(layer, "groups", groups)
    if in_channels % groups or out_channels % groups:
        raise ValueError(
            f"{layer}: groups={groups} must divide in_channels={in_channels} and "
            f"out_channels={out_channels}. Fix: choose channel counts that are multiples of groups"
        )
    return in_channels, out_channels, groups


class _ConvNd(Module):
    """Shared constructor, checks and forward of every convolution."""

    _name = "Conv"
    _ndim = 1
    _transposed = False
    _conv: Callable[..., jax.Array]  # each subclass: its function of js.nn.functional

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: _Size,
        stride: _Size,
        padding: _Size | str,
        dilation: _Size,
        groups: int,
        bias: bool,
        padding_mode: str,
        output_padding: _Size = 0,
        *,
        rngs: Rngs,
        dtype: DTypeLike | None = None,
    ):
        super().__init__()
        name, n = self._name, self._ndim
        in_channels, out_channels, groups = _check_channels(name, in_channels, out_channels, groups)
        self.kernel_size = ints(name, "kernel_size", kernel_size, n, minimum=1)
        self.stride = ints(name, "stride", stride, n, minimum=1)
        self.dilation = ints(name, "dilation", dilation, n, minimum=1)
        self.padding = _check_padding(name, padding, n, self._transposed)
        _check_padding_mode(name, padding_mode)
        self.padding_mode = padding_mode
        if self._transposed:
            self.output_padding = self._check_output_padding(output_padding)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        dtype, has_bias = float_dtype(name, dtype), check_bool(name, "bias", bias)
        # Fan-in of this layout's input axis: C_in / groups * prod(K) for both directions
        # (PyTorch's transposed fan-in is C_out / groups * prod(K), from its weight layout).
        fan_in = in_channels // groups * math.prod(self.kernel_size)
        shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(uniform_fan_in(rngs.next("params"), shape, fan_in, dtype))
        self.bias = Parameter(zeros((out_channels,), dtype)) if has_bias else None

    def _check_output_padding(self, output_padding) -> tuple[int, ...]:
        output_padding = ints(self._name, "output_padding", output_padding, self._ndim)
        limits = tuple(map(max, self.stride, self.dilation))
        if any(op >= limit for op, limit in zip(output_padding, limits, strict=True)):
            raise ValueError(
                f"{self._name}: output_padding {output_padding} must be smaller than stride "
                f"{self.stride} or dilation {self.dilation} (PyTorch's rule). Fix: lower it"
            )
        return output_padding

    def _expected(self) -> str:
        spatial = ("L",) if self._ndim == 1 else ("H", "W")
        return layout("B", f"C_in={self.in_channels}", *spatial)

    def _output_sizes(self, x) -> list[int]:
        window = [d * (k - 1) + 1 for k, d in zip(self.kernel_size, self.dilation, strict=True)]
        sizes = shape_of(x)[2:]
        if self._transposed:
            padding = self.padding
            assert not isinstance(padding, str)  # _check_padding refuses strings when transposed
            return [
                (n - 1) * s - 2 * p + w + op
                for n, s, p, w, op in zip(
                    sizes, self.stride, padding, window, self.output_padding, strict=True
                )
            ]
        pads = F.conv_padding(self.padding, sizes, self.kernel_size, self.stride, self.dilation)
        padded = [n + lo + hi for n, (lo, hi) in zip(sizes, pads, strict=True)]
        check_window(self._name, x, padded, window, self._expected())
        return [(m - w) // s + 1 for m, w, s in zip(padded, window, self.stride, strict=True)]

    def forward(self, x: jax.Array) -> jax.Array:
        expected = self._expected()
        check_rank(self._name, x, (2 + self._ndim,), expected)
        check_dim(self._name, x, 1, self.in_channels, "the channel count", expected)
        sizes = self._output_sizes(x)
        if min(sizes) < 1:
            fail_shape(self._name, expected, x, f"the output size would be {sizes}")
        bias = None if self.bias is None else self.bias.value
        if self._transposed:
            return self._conv(
                x,
                self.weight.value,
                bias,
                self.stride,
                self.padding,
                self.output_padding,
                self.groups,
                self.dilation,
            )
        return self._conv(
            x, self.weight.value, bias, self.stride, self.padding, self.dilation, self.groups
        )

    # PyTorch's transposed weight is [C_in, C_out / g, *K]; ours [C_out, C_in / g, *K]: swap the
    # two channel axes within each group. Instance methods: the regrouping needs ``groups``.
    def from_torch(self, name: str, array: np.ndarray) -> np.ndarray:
        return _swap_group_axes(array, self.groups) if self._is_transposed_weight(name) else array

    def to_torch(self, name: str, array: np.ndarray) -> np.ndarray:
        return _swap_group_axes(array, self.groups) if self._is_transposed_weight(name) else array

    def _is_transposed_weight(self, name: str) -> bool:
        return self._transposed and name == "weight"

    def extra_repr(self) -> str:
        text = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}"
        )
        if self._transposed:
            text += f", output_padding={self.output_padding}"
        return text + (
            f", dilation={self.dilation}, groups={self.groups}, bias={self.bias is not None}"
        )


class Conv1d(_ConvNd):
    """1-D cross-correlation ``y[b, o] = bias[o] + sum_i weight[o, i] * x[b, i]`` (sliding).

    Args:
        in_channels, out_channels: C_in and C_out, each divisible by ``groups``.
        kernel_size: K (an int or a 1-tuple). stride: step (1).
        padding: zeros added at both ends: an int, ``'valid'`` (0) or ``'same'`` (output length
            L; an odd total ``dilation * (K - 1)`` puts the extra zero on the right, as
            PyTorch does).
        dilation: spacing between kernel taps (1). groups: channel groups (1).
        bias: add a learnable bias. padding_mode: only ``'zeros'``.
        rngs: ``js.Rngs`` with ``params``. dtype: the parameters' dtype (float32).

    Shape:
        input ``[B, C_in, L]``, output ``[B, C_out, (L + 2 * padding - dilation * (K - 1) - 1)
        // stride + 1]``.

    Weights:
        ``weight`` ``[C_out, C_in / groups, K]`` from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
        fan_in = C_in / groups * K; ``bias`` ``[C_out]`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> conv = js.nn.Conv1d(2, 4, 3, 1, 2, 2, rngs=js.Rngs(params=0))  # dilation=2
        >>> conv(jnp.ones((1, 2, 10))).shape
        (1, 4, 10)
    """

    _name = "Conv1d"
    _ndim = 1
    _conv = staticmethod(F.conv1d)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: _Size,
        stride: _Size = 1,
        padding: _Size | str = 0,
        dilation: _Size = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        *,
        rngs: Rngs,
        dtype: DTypeLike | None = None,
    ):
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            rngs=rngs,
            dtype=dtype,
        )


class Conv2d(_ConvNd):
    """2-D cross-correlation over NCHW inputs.

    Args:
        in_channels, out_channels: C_in and C_out, each divisible by ``groups``.
        kernel_size, stride, dilation: an int or a pair ``(h, w)``.
        padding: an int, a pair, ``'valid'`` or ``'same'`` (either case; ``'same'`` keeps H
            and W at stride 1, the extra row/column of an even kernel at the bottom/right, as
            PyTorch; at a larger stride, which PyTorch refuses, XLA's ``ceil(H / stride)``).
        groups: channel groups. bias: add a learnable bias. padding_mode: only ``'zeros'``.
        rngs: ``js.Rngs`` with ``params``. dtype: the parameters' dtype (float32).

    Shape:
        input ``[B, C_in, H, W]``, output ``[B, C_out, H_out, W_out]`` with
        ``H_out = (H + 2 * padding - dilation * (KH - 1) - 1) // stride + 1`` (likewise W).

    Weights:
        ``weight`` ``[C_out, C_in / groups, KH, KW]`` from U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        with fan_in = C_in / groups * KH * KW; ``bias`` ``[C_out]`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> conv = js.nn.Conv2d(3, 8, 3, padding=1, rngs=js.Rngs(params=0))
        >>> conv(jnp.ones((2, 3, 16, 16))).shape
        (2, 8, 16, 16)
        >>> js.nn.Conv2d(3, 8, 4, padding="same", rngs=js.Rngs(params=0))(
        ...     jnp.ones((2, 3, 16, 16))).shape
        (2, 8, 16, 16)
    """

    _name = "Conv2d"
    _ndim = 2
    _conv = staticmethod(F.conv2d)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: _Size,
        stride: _Size = 1,
        padding: _Size | str = 0,
        dilation: _Size = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        *,
        rngs: Rngs,
        dtype: DTypeLike | None = None,
    ):
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            rngs=rngs,
            dtype=dtype,
        )


class ConvTranspose1d(_ConvNd):
    """Transposed 1-D convolution (the gradient of Conv1d with respect to its input).

    Args:
        in_channels, out_channels: C_in and C_out, each divisible by ``groups``.
        kernel_size, stride, padding, dilation: ints (or 1-tuples).
        output_padding: added to the far end of the output; smaller than stride or dilation.
        groups, bias, padding_mode (only ``'zeros'``), rngs, dtype: as in ``Conv1d``.

    Shape:
        input ``[B, C_in, L]``, output ``[B, C_out, (L - 1) * stride - 2 * padding +
        dilation * (K - 1) + output_padding + 1]``.

    Weights:
        ``weight`` ``[C_out, C_in / groups, K]`` (PyTorch stores ``[C_in, C_out / groups, K]``;
        ``load_torch_state_dict`` converts) from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
        fan_in = C_in / groups * K (PyTorch: C_out / groups * K); ``bias`` ``[C_out]`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> up = js.nn.ConvTranspose1d(4, 2, 4, 2, 1, rngs=js.Rngs(params=0))
        >>> up(jnp.ones((1, 4, 8))).shape
        (1, 2, 16)
    """

    _name = "ConvTranspose1d"
    _ndim = 1
    _transposed = True
    _conv = staticmethod(F.conv_transpose1d)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: _Size,
        stride: _Size = 1,
        padding: _Size = 0,
        output_padding: _Size = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: _Size = 1,
        padding_mode: str = "zeros",
        *,
        rngs: Rngs,
        dtype: DTypeLike | None = None,
    ):
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            output_padding,
            rngs=rngs,
            dtype=dtype,
        )


class ConvTranspose2d(_ConvNd):
    """Transposed 2-D convolution (the gradient of Conv2d with respect to its input), NCHW.

    Args:
        in_channels, out_channels: C_in and C_out, each divisible by ``groups``.
        kernel_size, stride, padding, dilation: an int or a pair ``(h, w)``.
        output_padding: an int or a pair added to the bottom/right of the output; each smaller
            than the stride or the dilation (PyTorch's rule).
        groups: channel groups. bias: add a learnable bias. padding_mode: only ``'zeros'``.
        rngs: ``js.Rngs`` with ``params``. dtype: the parameters' dtype (float32).

    Shape:
        input ``[B, C_in, H, W]``, output ``[B, C_out, H_out, W_out]`` with
        ``H_out = (H - 1) * stride - 2 * padding + dilation * (KH - 1) + output_padding + 1``
        (likewise W).

    Weights:
        ``weight`` ``[C_out, C_in / groups, KH, KW]`` (PyTorch stores
        ``[C_in, C_out / groups, KH, KW]``; ``load_torch_state_dict`` and ``torch_state_dict``
        convert) from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = C_in / groups * KH * KW,
        the input channels of this layout (PyTorch uses C_out / groups * KH * KW); ``bias``
        ``[C_out]`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> up = js.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1,
        ...                            rngs=js.Rngs(params=0))
        >>> up(jnp.ones((1, 4, 8, 8))).shape
        (1, 2, 16, 16)
    """

    _name = "ConvTranspose2d"
    _ndim = 2
    _transposed = True
    _conv = staticmethod(F.conv_transpose2d)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: _Size,
        stride: _Size = 1,
        padding: _Size = 0,
        output_padding: _Size = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: _Size = 1,
        padding_mode: str = "zeros",
        *,
        rngs: Rngs,
        dtype: DTypeLike | None = None,
    ):
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            output_padding,
            rngs=rngs,
            dtype=dtype,
        )
