"""tools/typecheck.py lays the js namespace out as one package for pyright."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import typecheck  # noqa: E402


def _tree(root: Path) -> None:
    core = root / "packages" / "js-core" / "src" / "js"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("import pkgutil\n")
    (core / "_jit.py").write_text("")
    for distribution, name in typecheck.SIBLINGS.items():
        package = root / "packages" / distribution / "src" / "js" / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")


def test_the_view_joins_core_and_every_sibling(tmp_path):
    _tree(tmp_path)
    package = typecheck.lay_out_namespace(tmp_path, tmp_path / "view")
    names = sorted(p.name for p in package.iterdir())
    assert names == sorted(["__init__.py", "_jit.py", "losses", "nn", "optim", "training"])
    assert (package / "nn").resolve() == tmp_path / "packages" / "js-nn" / "src" / "js" / "nn"
    assert (package / "_jit.py").resolve() == tmp_path / "packages/js-core/src/js/_jit.py"
    # a second run starts over (no stale links)
    (tmp_path / "packages/js-core/src/js/_jit.py").unlink()
    package = typecheck.lay_out_namespace(tmp_path, tmp_path / "view")
    assert not (package / "_jit.py").exists()


def test_a_missing_sibling_is_named(tmp_path):
    _tree(tmp_path)
    (tmp_path / "packages/js-optim/src/js/optim/__init__.py").unlink()
    (tmp_path / "packages/js-optim/src/js/optim").rmdir()
    with pytest.raises(SystemExit, match="js-optim/src/js/optim is missing"):
        typecheck.lay_out_namespace(tmp_path, tmp_path / "view")
