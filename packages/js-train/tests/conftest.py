"""Shared models and data for the js-train tests."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import js
import js.nn as nn
import js.optim


def make_optimizer(model, lr=0.05):
    return js.optim.Adam(model.parameters(), lr=lr)


class MLP(js.Module):
    """Linear -> ReLU -> Dropout -> Linear, with a BatchNorm1d (buffers) after the first layer."""

    def __init__(self, din=4, hidden=16, classes=3, p=0.2, *, rngs):
        super().__init__()
        self.fc1 = nn.Linear(din, hidden, rngs=rngs)
        self.norm = nn.BatchNorm1d(hidden)
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(hidden, classes, rngs=rngs)

    def forward(self, x, *, rngs=None):
        h = jax.nn.relu(self.norm(self.fc1(x)))
        return self.fc2(self.drop(h, rngs=rngs))


def blobs(n=96, din=4, classes=3, seed=0):
    """Separable Gaussian blobs: (x [n, din] float32, y [n] int32)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n).astype(np.int32)
    centers = rng.normal(0, 3, (classes, din))
    x = (centers[y] + rng.normal(0, 1, (n, din))).astype(np.float32)
    return x, y


@pytest.fixture
def data():
    return blobs()


@pytest.fixture
def make_task():
    from js.training import Task

    def build(seed=0, dropout=True, p=0.2):
        model = MLP(p=p, rngs=js.Rngs(params=seed))
        rngs = js.Rngs(dropout=seed + 1) if dropout else None
        return Task(model, make_optimizer(model), rngs=rngs)

    return build
