"""The table of layers that drives the shared checks (and the PyTorch comparisons)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import js
import js.nn as nn


class Case(NamedTuple):
    id: str
    make: Callable[[js.Rngs], Any]  # rngs -> layer
    input: Callable[[jax.Array], jax.Array]  # key -> input
    out_shape: tuple[int, ...]
    stochastic: bool = False  # called with rngs= in training


# Inputs come from NumPy, seeded by the key: a jax.random draw compiles one program per new
# shape, which costs more than many of the checks themselves.
def _rng(key) -> np.random.Generator:
    return np.random.default_rng(np.asarray(jax.random.key_data(key)).tolist())


def _normal(*shape):
    return lambda key: jnp.asarray(_rng(key).standard_normal(shape, np.float32))


def _ints(*shape, high=10):
    return lambda key: jnp.asarray(_rng(key).integers(0, high, shape), jnp.int32)


CASES = [
    Case("Linear", lambda r: nn.Linear(4, 3, rngs=r), _normal(2, 5, 4), (2, 5, 3)),
    Case("Linear-nobias", lambda r: nn.Linear(4, 3, bias=False, rngs=r), _normal(6, 4), (6, 3)),
    Case(
        "Conv1d",
        lambda r: nn.Conv1d(3, 4, 3, stride=2, padding=1, rngs=r),
        _normal(2, 3, 9),
        (2, 4, 5),
    ),
    Case(
        "Conv1d-groups", lambda r: nn.Conv1d(4, 6, 3, groups=2, rngs=r), _normal(2, 4, 8), (2, 6, 6)
    ),
    Case(
        "Conv2d", lambda r: nn.Conv2d(3, 4, 3, padding=1, rngs=r), _normal(2, 3, 8, 8), (2, 4, 8, 8)
    ),
    Case(
        "Conv2d-pairs",
        lambda r: nn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 0), rngs=r),
        _normal(2, 3, 8, 8),
        (2, 4, 4, 7),
    ),
    Case(
        "Conv2d-SAME",
        lambda r: nn.Conv2d(3, 4, 3, stride=2, padding="SAME", rngs=r),
        _normal(2, 3, 7, 7),
        (2, 4, 4, 4),
    ),
    Case(
        "Conv2d-valid",
        lambda r: nn.Conv2d(3, 4, 3, padding="valid", rngs=r),
        _normal(2, 3, 7, 7),
        (2, 4, 5, 5),
    ),
    Case(
        "Conv2d-nobias",
        lambda r: nn.Conv2d(3, 4, 3, bias=False, rngs=r),
        _normal(1, 3, 5, 5),
        (1, 4, 3, 3),
    ),
    Case(
        "Conv2d-groups",
        lambda r: nn.Conv2d(3, 6, 3, groups=3, rngs=r),
        _normal(2, 3, 6, 6),
        (2, 6, 4, 4),
    ),
    Case(
        "ConvTranspose2d",
        lambda r: nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1, rngs=r),
        _normal(2, 3, 5, 5),
        (2, 2, 10, 10),
    ),
    Case(
        "ConvTranspose2d-rect",
        lambda r: nn.ConvTranspose2d(3, 2, (3, 2), rngs=r),
        _normal(2, 3, 4, 4),
        (2, 2, 6, 5),
    ),
    Case("MaxPool2d", lambda r: nn.MaxPool2d(2), _normal(2, 3, 8, 8), (2, 3, 4, 4)),
    Case(
        "MaxPool2d-stride", lambda r: nn.MaxPool2d(3, stride=2), _normal(2, 3, 9, 9), (2, 3, 4, 4)
    ),
    Case("AvgPool2d", lambda r: nn.AvgPool2d(2, stride=1), _normal(2, 3, 8, 8), (2, 3, 7, 7)),
    Case(
        "AdaptiveAvgPool2d",
        lambda r: nn.AdaptiveAvgPool2d((1, 1)),
        _normal(2, 3, 5, 4),
        (2, 3, 1, 1),
    ),
    Case("BatchNorm1d-NC", lambda r: nn.BatchNorm1d(3), _normal(8, 3), (8, 3)),
    Case("BatchNorm1d-NCL", lambda r: nn.BatchNorm1d(3), _normal(4, 3, 5), (4, 3, 5)),
    Case("BatchNorm2d", lambda r: nn.BatchNorm2d(3), _normal(4, 3, 5, 5), (4, 3, 5, 5)),
    Case("LayerNorm", lambda r: nn.LayerNorm(8), _normal(2, 5, 8), (2, 5, 8)),
    Case("LayerNorm-2d", lambda r: nn.LayerNorm((5, 8)), _normal(2, 5, 8), (2, 5, 8)),
    Case("Dropout", lambda r: nn.Dropout(0.3), _normal(4, 16), (4, 16), stochastic=True),
    Case("Embedding", lambda r: nn.Embedding(10, 4, rngs=r), _ints(2, 5), (2, 5, 4)),
    Case("ReLU", lambda r: nn.ReLU(), _normal(3, 4), (3, 4)),
    Case("GELU", lambda r: nn.GELU(), _normal(3, 4), (3, 4)),
    Case("GELU-tanh", lambda r: nn.GELU(approximate="tanh"), _normal(3, 4), (3, 4)),
    Case("Tanh", lambda r: nn.Tanh(), _normal(3, 4), (3, 4)),
    Case("Sigmoid", lambda r: nn.Sigmoid(), _normal(3, 4), (3, 4)),
    Case("Identity", lambda r: nn.Identity(), _normal(3, 4), (3, 4)),
    Case("Flatten", lambda r: nn.Flatten(), _normal(2, 3, 4, 5), (2, 60)),
    Case("Flatten-middle", lambda r: nn.Flatten(1, 2), _normal(2, 3, 4, 5), (2, 12, 5)),
    # PyTorch arguments a port needs (issue 12)
    Case(
        "Conv2d-dilation",
        lambda r: nn.Conv2d(3, 4, 3, 1, 2, 2, rngs=r),
        _normal(2, 3, 6, 6),
        (2, 4, 6, 6),
    ),
    Case(
        "Conv1d-same-even",
        lambda r: nn.Conv1d(3, 4, 4, padding="same", rngs=r),
        _normal(2, 3, 7),
        (2, 4, 7),
    ),
    Case(
        "ConvTranspose2d-groups",
        lambda r: nn.ConvTranspose2d(4, 6, 3, 2, 1, 1, 2, rngs=r),
        _normal(2, 4, 3, 3),
        (2, 6, 6, 6),
    ),
    Case(
        "ConvTranspose1d",
        lambda r: nn.ConvTranspose1d(3, 2, 4, 2, 1, rngs=r),
        _normal(2, 3, 5),
        (2, 2, 10),
    ),
    Case("MaxPool2d-stem", lambda r: nn.MaxPool2d(3, 2, 1), _normal(2, 3, 8, 8), (2, 3, 4, 4)),
    Case("MaxPool1d-dilation", lambda r: nn.MaxPool1d(2, 1, 0, 2), _normal(2, 3, 6), (2, 3, 4)),
    Case(
        "AvgPool2d-ceil",
        lambda r: nn.AvgPool2d(3, 2, 1, True, False),
        _normal(2, 3, 6, 6),
        (2, 3, 4, 4),
    ),
    Case("AvgPool1d", lambda r: nn.AvgPool1d(2), _normal(2, 3, 6), (2, 3, 3)),
    Case(
        "AdaptiveAvgPool2d-2x2",
        lambda r: nn.AdaptiveAvgPool2d(2),
        _normal(2, 3, 4, 6),
        (2, 3, 2, 2),
    ),
    Case("AdaptiveAvgPool1d", lambda r: nn.AdaptiveAvgPool1d(3), _normal(2, 3, 6), (2, 3, 3)),
    Case(
        "BatchNorm2d-untracked",
        lambda r: nn.BatchNorm2d(3, track_running_stats=False),
        _normal(4, 3, 2, 2),
        (4, 3, 2, 2),
    ),
    Case("BatchNorm1d-noaffine", lambda r: nn.BatchNorm1d(3, affine=False), _normal(6, 3), (6, 3)),
    Case("LayerNorm-nobias", lambda r: nn.LayerNorm(8, bias=False), _normal(2, 8), (2, 8)),
    Case("RMSNorm", lambda r: nn.RMSNorm(8), _normal(2, 5, 8), (2, 5, 8)),
    Case("RMSNorm-2d", lambda r: nn.RMSNorm((5, 8), eps=1e-6), _normal(2, 5, 8), (2, 5, 8)),
    Case("GroupNorm", lambda r: nn.GroupNorm(2, 4), _normal(2, 4, 3, 3), (2, 4, 3, 3)),
    Case(
        "Embedding-padding",
        lambda r: nn.Embedding(10, 4, padding_idx=0, rngs=r),
        _ints(2, 5),
        (2, 5, 4),
    ),
    Case("Dropout1d", lambda r: nn.Dropout1d(0.3), _normal(4, 8, 5), (4, 8, 5), stochastic=True),
    Case(
        "Dropout2d", lambda r: nn.Dropout2d(0.3), _normal(2, 8, 3, 3), (2, 8, 3, 3), stochastic=True
    ),
    Case("LeakyReLU", lambda r: nn.LeakyReLU(0.2, True), _normal(3, 4), (3, 4)),
    Case("SiLU", lambda r: nn.SiLU(True), _normal(3, 4), (3, 4)),
    Case("Softmax", lambda r: nn.Softmax(dim=-1), _normal(3, 4), (3, 4)),
    Case(
        "Upsample-bilinear",
        lambda r: nn.Upsample(scale_factor=2, mode="bilinear"),
        _normal(2, 3, 3, 4),
        (2, 3, 6, 8),
    ),
    Case("Upsample-nearest", lambda r: nn.Upsample(size=(5, 3)), _normal(2, 3, 3, 4), (2, 3, 5, 3)),
    Case(
        "Sequential",
        lambda r: nn.Sequential(nn.Linear(4, 8, rngs=r), nn.GELU(), nn.Linear(8, 2, rngs=r)),
        _normal(3, 4),
        (3, 2),
    ),
]


def call(layer, x, rngs=None):
    """Call a layer, passing ``rngs`` only to the stochastic ones (the dropouts)."""
    if isinstance(layer, (nn.Dropout, nn.Dropout1d, nn.Dropout2d)):
        return layer(x, rngs=rngs)
    return layer(x)


def expected_dtype(x):
    return jnp.float32 if jnp.issubdtype(x.dtype, jnp.integer) else x.dtype
