"""Normalization layers: BatchNorm1d, BatchNorm2d, LayerNorm, RMSNorm, GroupNorm."""

from __future__ import annotations

import math
import numbers

import jax
import numpy as np
from jax.typing import DTypeLike

from js import Buffer, Module, Parameter

from . import functional as F
from ._checks import (
    check_bool,
    check_dim,
    check_int,
    check_min_rank,
    check_probability,
    check_rank,
    fail_shape,
    is_int,
    layout,
    shape_of,
)
from ._factory import float_dtype, ones, zeros


def _check_eps(layer: str, eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{layer}: eps must be a float, got {eps!r}")
    if not float(eps) > 0:
        raise ValueError(f"{layer}: eps must be positive, got {eps}")
    return float(eps)


def _affine(layer: Module, shape, affine: bool, dtype, bias: bool = True) -> None:
    """``weight`` (ones) and ``bias`` (zeros) of ``shape``, or None where not learnt."""
    layer.weight = Parameter(ones(shape, dtype)) if affine else None
    layer.bias = Parameter(zeros(shape, dtype)) if affine and bias else None


class _BatchNorm(Module):
    _name = "BatchNorm"
    _ranks: tuple[int, ...] = ()
    # set by __init__ (weight and bias through _affine); None where not learnt or not tracked
    weight: Parameter | None
    bias: Parameter | None
    running_mean: Buffer | None
    running_var: Buffer | None

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        *,
        dtype: DTypeLike | None = None,
    ):
        super().__init__()
        name = self._name
        num_features = check_int(name, "num_features", num_features)
        if momentum is None:
            raise NotImplementedError(
                f"{name}: momentum=None (PyTorch's cumulative average of all batches) is not "
                "supported. Fix: pass a momentum in [0, 1], e.g. 0.1"
            )
        self.num_features, self.eps = num_features, _check_eps(name, eps)
        self.momentum = check_probability(name, "momentum", momentum)
        self.affine = check_bool(name, "affine", affine)
        self.track_running_stats = check_bool(name, "track_running_stats", track_running_stats)
        dtype = float_dtype(name, dtype)
        _affine(self, (num_features,), self.affine, dtype)  # [C] each
        tracked = self.track_running_stats
        self.running_mean = Buffer(zeros((num_features,), dtype)) if tracked else None  # [C]
        self.running_var = Buffer(ones((num_features,), dtype)) if tracked else None  # [C]

    def _layouts(self) -> str:
        c = f"C={self.num_features}"
        shapes = {2: ("B", c), 3: ("B", c, "L"), 4: ("B", c, "H", "W")}
        return " or ".join(layout(*shapes[r]) for r in self._ranks)

    def _check(self, x, batch_stats: bool) -> None:
        expected = self._layouts()
        check_rank(self._name, x, self._ranks, expected)
        check_dim(self._name, x, 1, self.num_features, "the channel count", expected)
        shape = shape_of(x)
        if batch_stats and math.prod(shape) // shape[1] == 1:  # PyTorch raises here too
            raise ValueError(
                f"{self._name}: expected more than 1 value per channel when training, got input "
                f"of shape {list(shape)} (its batch statistics would normalise everything to "
                "zero). Fix: use a larger batch (or more positions), or call model.eval()"
            )

    def forward(self, x: jax.Array) -> jax.Array:
        running_mean, running_var = self.running_mean, self.running_var  # both or neither
        self._check(x, self.training or running_mean is None)
        y, mean, var = F.batch_norm(
            x,
            None if running_mean is None else running_mean.value,
            None if running_var is None else running_var.value,
            None if self.weight is None else self.weight.value,
            None if self.bias is None else self.bias.value,
            training=self.training,
            momentum=self.momentum,
            eps=self.eps,
        )
        if self.training and running_mean is not None and running_var is not None:
            running_mean.value = mean
            running_var.value = var
        return y

    # PyTorch keeps a batch counter that js does not use (momentum is always set).
    def from_torch(self, name: str, array: np.ndarray) -> np.ndarray | None:
        return None if name == "num_batches_tracked" else array

    def torch_extras(self) -> dict[str, np.ndarray]:
        if not self.track_running_stats:
            return {}
        return {"num_batches_tracked": np.zeros((), np.int64)}

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalization over the channel axis 1 of NC or NCL inputs.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias``. In training ``mean`` and ``var``
    are the batch statistics over every axis but the channels, ``var`` the population
    (biased) variance, and the running statistics become
    ``(1 - momentum) * running + momentum * batch`` (PyTorch's momentum meaning; unlike
    PyTorch, the running variance is updated with the population variance too). In
    evaluation the running statistics normalise.

    Args:
        num_features: C. eps: added to the variance (1e-5). momentum: running-statistic
            update rate (0.1; PyTorch's ``None``, a cumulative average, is refused).
        affine: learn ``weight`` and ``bias`` (True).
        track_running_stats: keep running statistics (True); with False there are no
            buffers and the batch statistics normalise in evaluation too, as in PyTorch.
        dtype: the parameters' and statistics' dtype (float32).

    Shape:
        input ``[B, C]`` or ``[B, C, L]``, output the same.

    Weights:
        ``weight`` ``[C]`` ones, ``bias`` ``[C]`` zeros; Buffers ``running_mean`` ``[C]`` zeros
        and ``running_var`` ``[C]`` ones.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> bn = js.nn.BatchNorm1d(3, 1e-5, 0.1)
        >>> bn(jnp.ones((4, 3, 5))).shape
        (4, 3, 5)
    """

    _name = "BatchNorm1d"
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization over the channel axis 1 of NCHW inputs.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias``. In training ``mean`` and ``var``
    are the batch statistics over every axis but the channels, ``var`` the population
    (biased) variance, and the running statistics become
    ``(1 - momentum) * running + momentum * batch`` (PyTorch's momentum meaning; unlike
    PyTorch, the running variance is updated with the population variance too). In
    evaluation the running statistics normalise.

    Args:
        num_features: C. eps: added to the variance (1e-5). momentum: running-statistic
            update rate (0.1; PyTorch's ``None``, a cumulative average, is refused).
        affine: learn ``weight`` and ``bias`` (True).
        track_running_stats: keep running statistics (True); with False there are no
            buffers and the batch statistics normalise in evaluation too, as in PyTorch.
        dtype: the parameters' and statistics' dtype (float32).

    Shape:
        input ``[B, C, H, W]``, output the same.

    Weights:
        ``weight`` ``[C]`` ones, ``bias`` ``[C]`` zeros; Buffers ``running_mean`` ``[C]`` zeros
        and ``running_var`` ``[C]`` ones.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> bn = js.nn.BatchNorm2d(3, affine=False, track_running_stats=False)
        >>> bn(jnp.ones((2, 3, 4, 4))).shape, list(bn.state_dict())
        ((2, 3, 4, 4), [])
    """

    _name = "BatchNorm2d"
    _ranks = (4,)


class LayerNorm(Module):
    """Layer normalization over the trailing ``normalized_shape`` dimensions.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` with the mean and population variance
    taken over the trailing dimensions of each example.

    Args:
        normalized_shape: an int or the tuple of trailing dimensions S.
        eps: added to the variance (1e-5, PyTorch's; flax uses 1e-6).
        elementwise_affine: learn ``weight`` (and ``bias``, unless ``bias=False``).
        bias: learn ``bias`` (True; PyTorch's ``bias`` argument).
        dtype: the parameters' dtype (float32).

    Shape:
        input ``[..., *S]``, output the same.

    Weights:
        ``weight`` ``S`` ones, ``bias`` ``S`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> ln = js.nn.LayerNorm(8, bias=False)
        >>> ln(jnp.ones((2, 5, 8))).shape, list(ln.state_dict())
        ((2, 5, 8), ['weight'])
    """

    weight: Parameter | None  # set by __init__ through _affine; None where not learnt
    bias: Parameter | None

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...] | list[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        *,
        dtype: DTypeLike | None = None,
    ):
        super().__init__()
        if is_int(normalized_shape):
            normalized_shape = (normalized_shape,)
        if not isinstance(normalized_shape, (tuple, list)) or not all(
            map(is_int, normalized_shape)
        ):
            raise TypeError(
                "LayerNorm: normalized_shape must be an int or a tuple of ints, "
                f"got {normalized_shape!r}"
            )
        if not all(n >= 1 for n in normalized_shape):
            raise ValueError(
                f"LayerNorm: normalized_shape must hold ints >= 1, got {normalized_shape!r}"
            )
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        self.eps = _check_eps("LayerNorm", eps)
        affine = check_bool("LayerNorm", "elementwise_affine", elementwise_affine)
        has_bias = check_bool("LayerNorm", "bias", bias)
        dtype = float_dtype("LayerNorm", dtype)
        _affine(self, self.normalized_shape, affine, dtype, has_bias)

    def forward(self, x: jax.Array) -> jax.Array:
        n = len(self.normalized_shape)
        expected = layout("...", *map(str, self.normalized_shape))
        check_min_rank("LayerNorm", x, n, expected)
        if shape_of(x)[len(shape_of(x)) - n :] != self.normalized_shape:
            fail_shape("LayerNorm", expected, x, "the trailing dimensions differ")
        weight = None if self.weight is None else self.weight.value
        bias = None if self.bias is None else self.bias.value
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.weight is not None}, bias={self.bias is not None}"
        )


class RMSNorm(Module):
    """Root-mean-square normalization over the trailing ``normalized_shape`` dimensions.

    ``y = x / sqrt(mean(x ** 2) + eps) * weight``, the mean over the trailing dimensions of
    each example; no centring and no bias (PyTorch's ``nn.RMSNorm``, the norm of Llama,
    Mistral, Qwen2). Half-precision inputs are computed in float32 and returned in their own
    dtype, as :func:`js.nn.functional.rms_norm` describes.

    Args:
        normalized_shape: an int or the tuple of trailing dimensions S.
        eps: added to the mean square; None (PyTorch's default) for the machine epsilon of the
            computing dtype (``jnp.finfo(jnp.float32).eps`` for float32 and half inputs).
            Llama's checkpoints use ``1e-5`` or ``1e-6``: pass the config's ``rms_norm_eps``.
        elementwise_affine: learn ``weight``.
        dtype: the parameter's dtype (float32).

    Shape:
        input ``[..., *S]``, output the same.

    Weights:
        ``weight`` ``S`` ones.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> norm = js.nn.RMSNorm(8, eps=1e-6)
        >>> norm(jnp.ones((2, 5, 8))).shape, list(norm.state_dict())
        ((2, 5, 8), ['weight'])
    """

    weight: Parameter | None  # None where not learnt

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...] | list[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        *,
        dtype: DTypeLike | None = None,
    ):
        super().__init__()
        if is_int(normalized_shape):
            normalized_shape = (normalized_shape,)
        if not isinstance(normalized_shape, (tuple, list)) or not all(
            map(is_int, normalized_shape)
        ):
            raise TypeError(
                "RMSNorm: normalized_shape must be an int or a tuple of ints, "
                f"got {normalized_shape!r}"
            )
        if not all(n >= 1 for n in normalized_shape):
            raise ValueError(
                f"RMSNorm: normalized_shape must hold ints >= 1, got {normalized_shape!r}"
            )
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        self.eps = None if eps is None else _check_eps("RMSNorm", eps)
        affine = check_bool("RMSNorm", "elementwise_affine", elementwise_affine)
        dtype = float_dtype("RMSNorm", dtype)
        self.weight = Parameter(ones(self.normalized_shape, dtype)) if affine else None

    def forward(self, x: jax.Array) -> jax.Array:
        n = len(self.normalized_shape)
        expected = layout("...", *map(str, self.normalized_shape))
        check_min_rank("RMSNorm", x, n, expected)
        if shape_of(x)[len(shape_of(x)) - n :] != self.normalized_shape:
            fail_shape("RMSNorm", expected, x, "the trailing dimensions differ")
        weight = None if self.weight is None else self.weight.value
        return F.rms_norm(x, self.normalized_shape, weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"
        )


class GroupNorm(Module):
    """Group normalization: each example's channels split into ``num_groups`` groups, each
    normalised over its channels and positions.

    ``y = (x - mean_g) / sqrt(var_g + eps) * weight + bias`` with the mean and population
    variance of group g, and per-channel ``weight``/``bias``.

    Args:
        num_groups: G, dividing C. num_channels: C. eps: added to the variance (1e-5).
        affine: learn ``weight`` and ``bias`` (True). dtype: the parameters' dtype (float32).

    Shape:
        input ``[B, C, *]``, output the same.

    Weights:
        ``weight`` ``[C]`` ones, ``bias`` ``[C]`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.GroupNorm(2, 4)(jnp.ones((3, 4, 5))).shape
        (3, 4, 5)
    """

    weight: Parameter | None  # set by __init__ through _affine; None where not learnt
    bias: Parameter | None

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        *,
        dtype: DTypeLike | None = None,
    ):
        super().__init__()
        num_groups = check_int("GroupNorm", "num_groups", num_groups)
        num_channels = check_int("GroupNorm", "num_channels", num_channels)
        if num_channels % num_groups:
            raise ValueError(
                f"GroupNorm: num_groups={num_groups} must divide num_channels={num_channels}. "
                "Fix: choose a divisor of the channel count"
            )
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps = _check_eps("GroupNorm", eps)
        self.affine = check_bool("GroupNorm", "affine", affine)
        _affine(self, (num_channels,), self.affine, float_dtype("GroupNorm", dtype))

    def forward(self, x: jax.Array) -> jax.Array:
        expected = layout("B", f"C={self.num_channels}", "*")
        check_min_rank("GroupNorm", x, 2, expected)
        check_dim("GroupNorm", x, 1, self.num_channels, "the channel count", expected)
        weight = None if self.weight is None else self.weight.value
        bias = None if self.bias is None else self.bias.value
        return F.group_norm(x, self.num_groups, weight, bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
