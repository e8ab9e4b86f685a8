"""tools/annotations.py on a tiny synthetic packages tree whose counts are known."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest

# Each test runs a tool's command line in a child Python (no jax: a fraction of a second):
# the tools' tests keep them in the default run, counted against the process budget.
pytestmark = pytest.mark.process

TOOL = Path(__file__).resolve().parents[1] / "annotations.py"

FILES = {
    "js-core/src/js/__init__.py": """
        from ._a import f, g
        from ._b import Child
        from ._b import _Base
        CONST = 1
        __all__ = ["CONST", "Child", "f", "g"]
    """,
    "js-core/src/js/_a.py": """
        def f(x: int) -> int: ...
        def g(x, *, y: int) -> None: ...
    """,
    "js-core/src/js/_b.py": """
        class _Base:
            def forward(self, x: int) -> int: ...
            def method(self, a) -> None: ...
            def _private(self, a): ...
        class Child(_Base):
            def __init__(self, n: int): ...
            def method(self, a: int) -> None: ...
            @staticmethod
            def make(a: int) -> "Child": ...
            @property
            def size(self): ...
    """,
    "js-nn/src/js/nn/__init__.py": """
        from js import Module as Module
        from . import functional as functional
        from ._layer import Layer as Layer
        from ._layer import helper
    """,
    "js-nn/src/js/nn/functional.py": """
        def relu(x: int) -> int: ...
        def gelu(x, approximate: bool = False) -> int: ...
        def cat(*xs: int, **options: bool) -> int: ...
        def _hidden(x): ...
    """,
    "js-nn/src/js/nn/_layer.py": """
        class Layer:
            def forward(self, x) -> int: ...
        def helper(x): ...
    """,
}


def run(root: Path, *args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, str(TOOL), "--root", str(root), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()


def write_tree(root: Path) -> None:
    for relative, text in FILES.items():
        path = root / "packages" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(text).lstrip())


def test_counts_public_functions_methods_and_submodules(tmp_path):
    write_tree(tmp_path)
    assert run(tmp_path) == [
        "annotations: js-core: 5/7 (71.4%) fully annotated",
        "annotations: js-nn: 2/4 (50.0%) fully annotated",
        "annotations: overall: 7/11 (63.6%) fully annotated",
    ]


def test_missing_lists_what_is_not_annotated(tmp_path):
    write_tree(tmp_path)
    missing = [line.strip() for line in run(tmp_path, "--missing") if "missing:" in line]
    assert missing == [
        "missing: js/_a:g",
        "missing: js/_b:Child.size",
        "missing: nn/_layer:Layer.forward",
        "missing: nn/functional:gelu",
    ]


def test_the_real_tree_runs():
    lines = run(TOOL.parents[1])
    assert len(lines) == 7
    assert lines[-1].startswith("annotations: overall: ")
