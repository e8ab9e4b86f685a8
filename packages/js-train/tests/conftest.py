"""Fixtures of the js-train tests; shared helpers live in js_train_testing.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import js

sys.path.insert(0, str(Path(__file__).parent))
# The Trainer turns on JAX's persistent compilation cache by default: keep the suite (and the
# example scripts it starts) out of the user's cache; test_trainer_cache.py turns it on itself.
os.environ.setdefault("JS_COMPILATION_CACHE", "0")

from js_train_testing import MLP, blobs, make_optimizer  # noqa: E402

# A child-process script that runs at import (it joins a 2-process job): --doctest-modules
# (tools/run_suite.py) must not import it.
collect_ignore = ["multiprocess_checkpoint_script.py", "launch_children.py"]


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
