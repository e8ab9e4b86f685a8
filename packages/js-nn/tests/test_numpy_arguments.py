"""NumPy scalars are accepted wherever the layers take Python numbers and flags (js._checks).

Each row builds one layer twice, with Python values and with the same values as NumPy scalars
(``np.int64`` counts, ``np.float32`` probabilities, ``np.bool_`` flags): both build, and the
layers are the same (equal ``repr``: a NumPy scalar is stored as the Python value, so it never
reaches a static field or a compiled program's cache key as a different type).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.nn as nn


def _numpy(value):
    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int):
        return np.int64(value)
    if isinstance(value, float):
        return np.float32(value)  # the values below are exact in float32
    return value


def _rngs():
    return js.Rngs(params=0)


# (name, build(*args, **kwargs), args, kwargs): every int, float and bool argument of the
# row becomes a NumPy scalar in the second build.
LAYERS = [
    ("Dropout", nn.Dropout, (0.25,), {"inplace": False}),
    ("Dropout1d", nn.Dropout1d, (0.5,), {}),
    ("Dropout2d", nn.Dropout2d, (0.5,), {"inplace": True}),
    (
        "MultiheadAttention",
        lambda *a, **k: nn.MultiheadAttention(*a, **k, rngs=_rngs()),
        (8, 2),
        {"dropout": 0.25, "bias": True, "batch_first": False, "kdim": 4, "vdim": 6},
    ),
    (
        "TransformerEncoderLayer",
        lambda *a, **k: nn.TransformerEncoderLayer(*a, **k, rngs=_rngs()),
        (8, 2, 16),
        {"dropout": 0.125, "batch_first": True, "norm_first": True, "bias": False},
    ),
    (
        "TransformerEncoder",
        lambda n, **k: nn.TransformerEncoder(
            nn.TransformerEncoderLayer(8, 2, 16, rngs=_rngs()), n, **k
        ),
        (2,),
        {"enable_nested_tensor": False, "mask_check": True},
    ),
    (
        "LSTM",
        lambda *a, **k: nn.LSTM(*a, **k, rngs=_rngs()),
        (3, 4, 2),
        {"bias": True, "batch_first": True, "dropout": 0.5, "fused_backward": False},
    ),
    (
        "GRU",
        lambda *a, **k: nn.GRU(*a, **k, rngs=_rngs()),
        (3, 4, 2),
        {"bias": False, "batch_first": False, "dropout": 0.25},
    ),
    ("RNN", lambda *a, **k: nn.RNN(*a, **k, rngs=_rngs()), (3, 4), {"bias": True}),
    ("Linear", lambda *a, **k: nn.Linear(*a, **k, rngs=_rngs()), (3, 4, False), {}),
    (
        "Conv2d",
        lambda *a, **k: nn.Conv2d(*a, **k, rngs=_rngs()),
        (4, 6, 3),
        {"stride": 2, "padding": 1, "dilation": 1, "groups": 2, "bias": False},
    ),
    ("Conv1d", lambda *a, **k: nn.Conv1d(*a, **k, rngs=_rngs()), (2, 3, 3), {"bias": True}),
    (
        "BatchNorm1d",
        nn.BatchNorm1d,
        (4,),
        {"momentum": 0.25, "affine": False, "track_running_stats": True},
    ),
    ("Embedding", lambda *a, **k: nn.Embedding(*a, **k, rngs=_rngs()), (10, 4), {"padding_idx": 0}),
    ("ReLU", nn.ReLU, (True,), {}),
    ("Softmax", nn.Softmax, (-1,), {}),
    ("Flatten", nn.Flatten, (1, -1), {}),
    ("MaxPool2d", nn.MaxPool2d, (2,), {"stride": 1, "padding": 1, "ceil_mode": True}),
    ("AvgPool2d", nn.AvgPool2d, (2,), {"count_include_pad": False, "divisor_override": 3}),
]


@pytest.mark.parametrize("name, build, args, kwargs", LAYERS, ids=[row[0] for row in LAYERS])
def test_numpy_scalars_build_the_same_layer_as_python_numbers(name, build, args, kwargs):
    python = build(*args, **kwargs)
    numpy = build(*map(_numpy, args), **{k: _numpy(v) for k, v in kwargs.items()})
    assert repr(numpy) == repr(python)


def test_the_issue_cases():
    """``MultiheadAttention(8, 2, dropout=np.float32(0.1))`` was a TypeError while
    ``Dropout(np.float32(0.1))`` passed: both build now, with the Python float."""
    mha = nn.MultiheadAttention(8, 2, dropout=np.float32(0.1), rngs=js.Rngs(params=0))
    drop = nn.Dropout(np.float32(0.1))
    assert type(mha.dropout) is float and type(drop.p) is float
    x = jnp.ones((1, 3, 8))
    y = mha(x, x, x, rngs=js.Rngs(dropout=0))
    assert y.shape == (1, 3, 8)
    assert drop(x, rngs=js.Rngs(dropout=0)).shape == x.shape


@pytest.mark.parametrize(
    "build, error, match",
    [
        (
            lambda: nn.Dropout(np.bool_(True)),
            TypeError,
            r"Dropout: p must be a float in \[0, 1\], got np.True_ \(a bool\)",
        ),
        (
            lambda: nn.Dropout(np.float32(1.5)),
            ValueError,
            r"Dropout: p must be in \[0, 1\], got np.float32\(1.5\)",
        ),
        (
            lambda: nn.Linear(np.bool_(True), 2, rngs=js.Rngs(params=0)),
            TypeError,
            r"Linear: in_features must be an int >= 1, got np.True_ \(a bool\)",
        ),
        (
            lambda: nn.LSTM(3, 4, dropout=np.bool_(False), rngs=js.Rngs(params=0)),
            TypeError,
            r"LSTM: dropout must be a float in \[0, 1\], got np.False_",
        ),
        (
            lambda: nn.MultiheadAttention(8, 2, batch_first=np.int64(1), rngs=js.Rngs(params=0)),
            TypeError,
            r"MultiheadAttention: batch_first must be True or False, got np.int64\(1\)",
        ),
    ],
)
def test_numpy_bools_are_not_numbers_and_numpy_numbers_are_not_bools(build, error, match):
    with pytest.raises(error, match=match):
        build()
