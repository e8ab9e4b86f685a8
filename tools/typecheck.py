"""Run pyright (basic mode, pyrightconfig.json) over the five src trees as one ``js`` package.

Usage: python tools/typecheck.py [PYRIGHT_ARGS...]   (``hatch run types:check``)

js is one import namespace spread over five distributions, joined at run time by the
pkgutil-style ``js/__init__.py`` that js-core ships. Static checkers do not follow
``pkgutil.extend_path`` (pyright resolves the first regular ``js`` package and stops), so
``import js.nn`` from a js-train file would not resolve. This script lays the namespace out
once as it is at run time: ``build/typecheck/js`` holds links to js-core's files and to each
sibling's subpackage, and pyrightconfig.json names that folder in ``extraPaths``. The files
checked are still the ones under ``packages/*/src`` (pyright follows the links).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEW = ROOT / "build" / "typecheck"
# The subpackage each sibling distribution adds to the js namespace.
SIBLINGS = {"js-nn": "nn", "js-losses": "losses", "js-optim": "optim", "js-train": "training"}


def lay_out_namespace(root: Path = ROOT, view: Path = VIEW) -> Path:
    """``view/js``: js-core's files and each sibling's subpackage, as links; returns it."""
    shutil.rmtree(view, ignore_errors=True)
    package = view / "js"
    package.mkdir(parents=True)
    for entry in sorted((root / "packages" / "js-core" / "src" / "js").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry.resolve())
    for distribution, name in SIBLINGS.items():
        source = root / "packages" / distribution / "src" / "js" / name
        if not source.is_dir():
            raise SystemExit(f"typecheck: {source} is missing; SIBLINGS in {__file__} is stale")
        (package / name).symlink_to(source.resolve())
    return package


def main(argv: list[str]) -> int:
    lay_out_namespace()
    return subprocess.call([sys.executable, "-m", "pyright", *argv], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
