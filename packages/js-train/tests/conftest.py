"""Fixtures of the js-train tests; shared helpers live in js_train_testing.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import js

TESTS = Path(__file__).parent
# js_train_testing.py is importable here, and the job scripts of jobs/ (child processes that
# test_signals.py also imports from); their children find js_train_testing.py on PYTHONPATH.
sys.path[:0] = [str(TESTS), str(TESTS / "jobs")]
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
)
# The Trainer turns on JAX's persistent compilation cache by default: keep the suite (and the
# example scripts it starts) out of the user's cache; test_trainer_cache.py turns it on itself.
os.environ.setdefault("JS_COMPILATION_CACHE", "0")

from js_train_testing import MLP, blobs, make_optimizer  # noqa: E402

# The child-process scripts: some run at import (they join a 2-process job), and none holds a
# test or a doctest, so --doctest-modules (tools/run_suite.py) does not import them.
collect_ignore = ["jobs"]


def pytest_collection_finish(session):
    """torch's first optimizer imports ``torch._dynamo`` (3-6 s): import it at collection, when
    the test modules imported torch, so that no test counts it as its own time. (torch's one
    thread is tools/pytest_torch.py's, for every suite.)"""
    if "torch" in sys.modules:
        import torch._dynamo  # noqa: F401


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
