"""Normalization layers: BatchNorm1d, BatchNorm2d, LayerNorm."""

from __future__ import annotations

import math

import numpy as np

from js import Buffer, Module, Parameter

from . import _random
from . import functional as F
from ._checks import (
    check_dim,
    check_int,
    check_min_rank,
    check_rank,
    fail_shape,
    is_int,
    layout,
    shape_of,
)


class _BatchNorm(Module):
    _name = "BatchNorm"
    _ranks: tuple[int, ...] = ()

    def __init__(self, num_features: int, *, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"{self._name}: momentum must be in [0, 1], got {momentum}")
        num_features = check_int(self._name, "num_features", num_features)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = Parameter(_random.ones((num_features,)))  # [C]
        self.bias = Parameter(_random.zeros((num_features,)))  # [C]
        self.running_mean = Buffer(_random.zeros((num_features,)))  # [C] float32
        self.running_var = Buffer(_random.ones((num_features,)))  # [C] float32

    def _layouts(self) -> str:
        c = f"C={self.num_features}"
        shapes = {2: ("B", c), 3: ("B", c, "L"), 4: ("B", c, "H", "W")}
        return " or ".join(layout(*shapes[r]) for r in self._ranks)

    def forward(self, x):
        expected = self._layouts()
        check_rank(self._name, x, self._ranks, expected)
        check_dim(self._name, x, 1, self.num_features, "the channel count", expected)
        shape = shape_of(x)
        if self.training and math.prod(shape) // shape[1] == 1:  # PyTorch raises here too
            raise ValueError(
                f"{self._name}: expected more than 1 value per channel when training, got input "
                f"of shape {list(shape)} (its batch statistics would normalise everything to "
                "zero). Fix: use a larger batch (or more positions), or call model.eval()"
            )
        y, mean, var = F.batch_norm(
            x,
            self.running_mean.value,
            self.running_var.value,
            self.weight.value,
            self.bias.value,
            training=self.training,
            momentum=self.momentum,
            eps=self.eps,
        )
        if self.training:
            self.running_mean.value = mean
            self.running_var.value = var
        return y

    # PyTorch keeps a batch counter that js does not use (momentum is always set).
    @classmethod
    def from_torch(cls, name: str, array):
        return None if name == "num_batches_tracked" else array

    @classmethod
    def torch_extras(cls) -> dict[str, np.ndarray]:
        return {"num_batches_tracked": np.zeros((), np.int64)}

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


_BATCHNORM_DOC = """Batch normalization over the channel axis 1{what}.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias``. In training ``mean`` and ``var``
    are the batch statistics over every axis but the channels, ``var`` the population
    (biased) variance, and the running statistics become
    ``(1 - momentum) * running + momentum * batch`` (PyTorch's momentum meaning; unlike
    PyTorch, the running variance is updated with the population variance too). In
    evaluation the running statistics normalise.

    Args:
        num_features: C. eps: added to the variance (1e-5). momentum: running-statistic
        update rate (0.1).

    Shape:
        input {shapes}, output the same.

    Weights:
        ``weight`` ``[C]`` ones, ``bias`` ``[C]`` zeros; Buffers ``running_mean`` ``[C]`` zeros
        and ``running_var`` ``[C]`` ones.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> bn = js.nn.{name}(3)
        >>> bn(jnp.ones({example})).shape
        {example}
    """


class BatchNorm1d(_BatchNorm):
    __doc__ = _BATCHNORM_DOC.format(
        what=" of NC or NCL inputs", shapes="``[B, C]`` or ``[B, C, L]``",
        name="BatchNorm1d", example="(4, 3, 5)",
    )  # fmt: skip
    _name = "BatchNorm1d"
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    __doc__ = _BATCHNORM_DOC.format(
        what=" of NCHW inputs", shapes="``[B, C, H, W]``",
        name="BatchNorm2d", example="(2, 3, 4, 4)",
    )  # fmt: skip
    _name = "BatchNorm2d"
    _ranks = (4,)


class LayerNorm(Module):
    """Layer normalization over the trailing ``normalized_shape`` dimensions.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` with the mean and population variance
    taken over the trailing dimensions of each example.

    Args:
        normalized_shape: an int or the tuple of trailing dimensions S.
        eps: added to the variance (1e-5, PyTorch's; flax uses 1e-6).
        elementwise_affine: learn ``weight`` and ``bias``.

    Shape:
        input ``[..., *S]``, output the same.

    Weights:
        ``weight`` ``S`` ones, ``bias`` ``S`` zeros.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> js.nn.LayerNorm(8)(jnp.ones((2, 5, 8))).shape
        (2, 5, 8)
    """

    def __init__(self, normalized_shape, *, eps: float = 1e-5, elementwise_affine: bool = True):
        super().__init__()
        if is_int(normalized_shape):
            normalized_shape = (normalized_shape,)
        if not isinstance(normalized_shape, (tuple, list)) or not all(
            is_int(n) and n >= 1 for n in normalized_shape
        ):
            raise ValueError(
                "LayerNorm: normalized_shape must be an integer >= 1 or a tuple of them, "
                f"got {normalized_shape!r}"
            )
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        self.eps = eps
        affine = elementwise_affine
        self.weight = Parameter(_random.ones(self.normalized_shape)) if affine else None
        self.bias = Parameter(_random.zeros(self.normalized_shape)) if affine else None

    def forward(self, x):
        n = len(self.normalized_shape)
        expected = layout("...", *map(str, self.normalized_shape))
        check_min_rank("LayerNorm", x, n, expected)
        if shape_of(x)[len(shape_of(x)) - n :] != self.normalized_shape:
            fail_shape("LayerNorm", expected, x, "the trailing dimensions differ")
        weight = None if self.weight is None else self.weight.value
        bias = None if self.bias is None else self.bias.value
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, affine={self.weight is not None}"
