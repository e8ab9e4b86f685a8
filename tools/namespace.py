"""The ``js`` namespace as one package, for the tools that read source statically.

``js`` is spread over five distributions, each with its own ``src/js`` folder, and only
js-core's holds ``js/__init__.py`` (pkgutil-style: it widens ``__path__`` with
``pkgutil.extend_path`` at run time). Static readers do not follow that: pyright resolves the
first regular ``js`` package and stops, so ``import js.nn`` from a js-train file does not
resolve, and mkdocstrings sees only js-core. :func:`lay_out_namespace` lays the portions side
by side as one package of symbolic links under ``build/api-src/js``, as Python sees it at run
time; mkdocs.yml (``paths``, through tools/docs_hooks.py) and pyrightconfig.json
(``extraPaths``, through tools/typecheck.py) read it there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEW = ROOT / "build" / "api-src"


def lay_out_namespace(root: Path = ROOT, view: Path = VIEW) -> Path:
    """(Re)build ``view/js`` from every ``root/packages/*/src/js`` and return it."""
    package = view / "js"
    shutil.rmtree(package, ignore_errors=True)
    package.mkdir(parents=True)
    for portion in sorted((root / "packages").glob("*/src/js")):
        for entry in sorted(portion.iterdir()):
            if entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry.resolve())
    return package
