"""MkDocs hooks for the js site (mkdocs.yml names this file).

mkdocstrings reads the API from source, but the ``js`` namespace is spread over six
distributions, each with its own ``src/js`` folder, and only js-core's holds ``js/__init__.py``.
A static reader cannot follow ``pkgutil.extend_path``, so at load time this lays the portions
side by side as one package of symbolic links under ``build/api-src/js``; the site's
``paths`` setting points there. It runs when MkDocs loads the hooks, before any page is read.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
API_SRC = ROOT / "build" / "api-src" / "js"
_EXAMPLE = re.compile(r"^([ \t]*)Example:[ \t]*$", re.MULTILINE)


def lay_out_namespace() -> Path:
    """(Re)build ``build/api-src/js`` from every ``packages/*/src/js`` and return it."""
    shutil.rmtree(API_SRC, ignore_errors=True)
    API_SRC.mkdir(parents=True)
    for portion in sorted((ROOT / "packages").glob("*/src/js")):
        for entry in portion.iterdir():
            if entry.name != "__pycache__":
                (API_SRC / entry.name).symlink_to(entry)
    return API_SRC


lay_out_namespace()


try:  # griffe is there when MkDocs runs; the class is only needed then
    from griffe import Extension as _Extension
except ImportError:  # pragma: no cover
    _Extension = object


class ExamplesSection(_Extension):
    """A griffe extension (mkdocs.yml loads it): read ``Example:`` as an examples section.

    js's docstrings head their doctests ``Example:``; griffe's Google parser knows only
    ``Examples:`` and would render the doctest as prose (its ``[...]`` outputs then look like
    Markdown links).
    """

    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
