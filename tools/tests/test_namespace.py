"""tools/namespace.py lays the js namespace out as one package (for pyright and mkdocstrings)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import namespace  # noqa: E402

PORTIONS = {
    "js-nn": "nn",
    "js-losses": "losses",
    "js-optim": "optim",
    "js-train": "training",
    "js-models": "models",
}


def _tree(root: Path) -> None:
    core = root / "packages" / "js-core" / "src" / "js"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("import pkgutil\n")
    (core / "_jit.py").write_text("")
    (core / "__pycache__").mkdir()
    for distribution, name in PORTIONS.items():
        package = root / "packages" / distribution / "src" / "js" / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")


def test_the_view_joins_core_and_every_sibling(tmp_path):
    _tree(tmp_path)
    package = namespace.lay_out_namespace(tmp_path, tmp_path / "view")
    assert package == tmp_path / "view" / "js"
    names = sorted(p.name for p in package.iterdir())
    assert names == sorted(
        ["__init__.py", "_jit.py", "losses", "models", "nn", "optim", "training"]
    )
    assert (package / "nn").resolve() == tmp_path / "packages" / "js-nn" / "src" / "js" / "nn"
    assert (package / "_jit.py").resolve() == tmp_path / "packages/js-core/src/js/_jit.py"


def test_a_second_run_starts_over(tmp_path):
    _tree(tmp_path)
    namespace.lay_out_namespace(tmp_path, tmp_path / "view")
    (tmp_path / "packages/js-core/src/js/_jit.py").unlink()
    package = namespace.lay_out_namespace(tmp_path, tmp_path / "view")
    assert not (package / "_jit.py").exists() and not (package / "_jit.py").is_symlink()
