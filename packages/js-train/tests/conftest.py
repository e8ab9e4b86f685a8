"""Fixtures of the js-train tests; shared helpers live in js_train_testing.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import js

sys.path.insert(0, str(Path(__file__).parent))

from js_train_testing import MLP, blobs, make_optimizer  # noqa: E402

# A child-process script that runs at import (it joins a 2-process job): --doctest-modules
# (tools/run_suite.py) must not import it.
collect_ignore = ["multiprocess_checkpoint_script.py"]


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
