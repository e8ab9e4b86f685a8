"""The docstring examples of js.training run as written."""

import doctest
import importlib

import pytest

MODULES = [
    "data._arrays",
    "_progress",
    "_runs",
    "_callbacks",
    "_task",
    "_trainer",
    "_checkpoint",
    "_precision",
    "_perf",
    "steps",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"js.training.{name}")
    result = doctest.testmod(
        module, extraglobs={"steps": importlib.import_module("js.training.steps")}
    )
    assert result.failed == 0
