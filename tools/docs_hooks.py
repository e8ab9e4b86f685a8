"""MkDocs hooks for the js site (mkdocs.yml names this file).

mkdocstrings reads the API from source, where the ``js`` namespace is spread over the
distributions; :func:`namespace.lay_out_namespace` lays it out as one package under
``build/api-src/js`` (the site's ``paths`` setting) when MkDocs loads the hooks, before any page
is read.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # MkDocs loads this file by its path

from namespace import lay_out_namespace  # noqa: E402

_EXAMPLE = re.compile(r"^([ \t]*)Example:[ \t]*$", re.MULTILINE)

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
