"""Shared checks over the layer table: shape, dtype, js.jit (compiles once), state round trip."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import js
import js.nn as nn

# importlib mode does not put this folder on the path; the shared table lives beside us.
sys.path.insert(0, str(Path(__file__).parent))
from _layer_table import CASES, call, expected_dtype  # noqa: E402


@pytest.fixture(params=CASES, ids=[case.id for case in CASES])
def case(request):
    return request.param


def test_output_shape_and_dtype_eager(case):
    layer = case.make(js.Rngs(params=0)).eval()
    x = case.input(jax.random.key(1))
    y = call(layer, x)
    assert y.shape == case.out_shape
    assert y.dtype == expected_dtype(x)


def test_jit_compiles_once_and_matches_eager(case):
    layer = case.make(js.Rngs(params=0)).eval()
    traces = []

    @js.jit
    def run(model, x):
        traces.append(1)
        return call(model, x)

    for seed in range(3):
        x = case.input(jax.random.key(seed))
        np.testing.assert_allclose(run(layer, x), call(layer, x), rtol=1e-5, atol=1e-6)
    assert len(traces) == 1


def test_jit_training_step_updates_state(case):
    layer = case.make(js.Rngs(params=0)).train()
    rngs = js.Rngs(dropout=0)
    traces = []

    @js.jit
    def run(model, x, rngs):
        traces.append(1)
        return call(model, x, rngs)

    x = case.input(jax.random.key(0))
    first = run(layer, x, rngs)
    run(layer, case.input(jax.random.key(1)), rngs)
    assert first.shape == case.out_shape and first.dtype == expected_dtype(x)
    assert len(traces) == 1
    if case.stochastic:
        assert int(rngs.state_dict()["dropout.count"]) == 2


def test_state_dict_round_trip(case):
    source = case.make(js.Rngs(params=0)).eval()
    target = case.make(js.Rngs(params=7)).eval()
    state = source.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    target.load_state_dict(state)
    x = case.input(jax.random.key(3))
    np.testing.assert_array_equal(call(target, x), call(source, x))
    assert list(target.state_dict()) == list(state)


# -- PyTorch's state-dict keys ---------------------------------------------------------------

KEYS = {
    "Linear": ["weight", "bias"],
    "Linear-nobias": ["weight"],
    "Conv1d": ["weight", "bias"],
    "Conv2d": ["weight", "bias"],
    "Conv2d-nobias": ["weight"],
    "ConvTranspose2d": ["weight", "bias"],
    "BatchNorm2d": ["weight", "bias", "running_mean", "running_var"],
    "LayerNorm": ["weight", "bias"],
    "Embedding": ["weight"],
    "Sequential": ["0.weight", "0.bias", "2.weight", "2.bias"],
    "BatchNorm2d-untracked": ["weight", "bias"],
    "BatchNorm1d-noaffine": ["running_mean", "running_var"],
    "LayerNorm-nobias": ["weight"],
    "RMSNorm": ["weight"],
    "GroupNorm": ["weight", "bias"],
    "ConvTranspose2d-groups": ["weight", "bias"],
    "Upsample-bilinear": [],
    "ReLU": [],
}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_state_dict_keys_follow_pytorch(name):
    layer = next(c for c in CASES if c.id == name).make(js.Rngs(params=0))
    assert list(layer.state_dict()) == KEYS[name]


def test_buffers_and_parameters_of_batchnorm():
    bn = nn.BatchNorm2d(3)
    assert [p for p, _ in bn.named_parameters()] == ["weight", "bias"]
    assert [p for p, _ in bn.named_buffers()] == ["running_mean", "running_var"]


def test_public_names_are_exported():
    names = {
        "Linear",
        "Identity",
        "Conv1d",
        "Conv2d",
        "ConvTranspose1d",
        "ConvTranspose2d",
        "MaxPool1d",
        "MaxPool2d",
        "AvgPool1d",
        "AdaptiveAvgPool1d",
        "GroupNorm",
        "Dropout1d",
        "Dropout2d",
        "Upsample",
        "LeakyReLU",
        "SiLU",
        "ELU",
        "Hardtanh",
        "ReLU6",
        "Softmax",
        "LogSoftmax",
        "AvgPool2d",
        "AdaptiveAvgPool2d",
        "BatchNorm1d",
        "BatchNorm2d",
        "LayerNorm",
        "RMSNorm",
        "Dropout",
        "Embedding",
        "RNN",
        "LSTM",
        "MultiheadAttention",
        "ReLU",
        "GELU",
        "Tanh",
        "Sigmoid",
        "Flatten",
        "Sequential",
        "functional",
        "attention",
        "summary",
        "load_torch_state_dict",
        "torch_state_dict",
    }
    assert names <= set(nn.__all__)
    assert all(hasattr(nn, name) for name in nn.__all__)


def test_init_distributions():
    rngs = js.Rngs(params=0)
    linear = nn.Linear(400, 300, rngs=rngs)
    conv = nn.Conv2d(8, 64, 3, groups=2, rngs=rngs)  # fan_in = 8 / 2 * 9 = 36
    up = nn.ConvTranspose2d(16, 32, 3, rngs=rngs)  # fan_in = 16 * 9, our [O, I, KH, KW] layout
    for layer, fan_in in ((linear, 400), (conv, 36), (up, 144)):
        w = np.asarray(layer.weight.value)
        bound = 1 / np.sqrt(fan_in)
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
        assert abs(w.std() - bound / np.sqrt(3)) < 0.05 * bound
        np.testing.assert_array_equal(layer.bias.value, 0.0)
    emb = np.asarray(nn.Embedding(500, 64, rngs=rngs).weight.value)
    assert abs(emb.mean()) < 0.02 and abs(emb.std() - 1) < 0.02
    bn, ln = nn.BatchNorm1d(4), nn.LayerNorm(4)
    for w, b in ((bn.weight, bn.bias), (ln.weight, ln.bias)):
        np.testing.assert_array_equal(w.value, 1.0)
        np.testing.assert_array_equal(b.value, 0.0)
    np.testing.assert_array_equal(bn.running_var.value, 1.0)


def test_batchnorm_eval_uses_running_statistics_and_leaves_them():
    bn = nn.BatchNorm2d(2)
    x = jax.random.normal(jax.random.key(0), (4, 2, 3, 3)) * 3 + 1
    bn(x)
    mean, var = np.asarray(bn.running_mean.value), np.asarray(bn.running_var.value)
    np.testing.assert_allclose(var, 0.9 + 0.1 * np.asarray(x).var(axis=(0, 2, 3)), rtol=1e-5)
    y = bn.eval()(x)
    want = (np.asarray(x) - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(bn.running_mean.value, mean)


def test_sequential_indexing_and_print():
    model = nn.Sequential(nn.Linear(2, 3, rngs=js.Rngs(params=0)), nn.ReLU())
    assert len(model) == 2 and isinstance(model[1], nn.ReLU)
    assert "(0): Linear(in_features=2, out_features=3, bias=True" in repr(model)
