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


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_output_shape_and_dtype(case, mode):
    layer = case.make(js.Rngs(params=0))
    layer.train(mode == "train")
    x = case.input(jax.random.key(1))
    y = call(layer, x, js.Rngs(dropout=2))
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

    first = run(layer, case.input(jax.random.key(0)), rngs)
    run(layer, case.input(jax.random.key(1)), rngs)
    assert first.shape == case.out_shape and len(traces) == 1
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
    "ConvTranspose2d": ["weight", "bias"],
    "BatchNorm2d": ["weight", "bias", "running_mean", "running_var"],
    "LayerNorm": ["weight", "bias"],
    "Embedding": ["weight"],
    "Sequential": ["0.weight", "0.bias", "2.weight", "2.bias"],
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
