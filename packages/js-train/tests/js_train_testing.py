"""Models, data and tasks shared by the js-train tests (importable: conftest puts this folder
on sys.path; the name is unique so that other packages' test helpers cannot shadow it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import js
import js.nn as nn
import js.optim
from js.training import Task


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


class FixedTask(Task):
    """Steps that return known metrics, to check the aggregation exactly."""

    def __init__(self):
        self.phases = []
        self.model = self.optimizer = self.rngs = None

    def training_step(self, model, optimizer, rngs, batch):
        x, y = batch
        return {"loss": jnp.mean(x), "count": len(x), "correct": jnp.sum(y)}

    def validation_step(self, model, batch):
        return {"loss": jnp.float32(2.0), "count": len(batch[0])}

    def set_phase(self, phase):
        self.phases.append(phase)


class Scores(FixedTask):
    """val/loss from a list, one value per validation; the checkpoint holds ``model``."""

    def __init__(self, scores, model):
        super().__init__()
        self.scores, self.model = iter(scores), model

    def validation_step(self, model, batch):
        return {"loss": np.float32(next(self.scores)), "count": 1}

    def checkpoint_objects(self):
        return {"model": self.model}


def saved_steps(path):
    """The step numbers of a checkpoint directory, in order."""
    return sorted(int(p.name) for p in path.iterdir() if p.name.isdigit())


# -- grain pipelines (test_grain.py, test_prefetch.py): importable, for grain's worker processes


class RowSource:
    """A grain data source of ``(x[i], y[i])`` rows; a fixed repr, which grain checks when a
    DataLoader's iterator state is restored."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index]

    def __repr__(self):
        return f"RowSource({len(self.x)} rows)"


def scale_row(row):
    """The per-row transform of the grain tests: ``(2x + 1, y)``, exact in float32."""
    x, y = row
    return x * np.float32(2) + np.float32(1), y


def slow_row(row, seconds=0.004):
    """``scale_row`` that also sleeps (a costly decode), for the data-wait tests."""
    import time

    time.sleep(seconds)
    return scale_row(row)
