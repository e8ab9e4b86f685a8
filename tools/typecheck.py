"""Run pyright (basic mode, pyrightconfig.json) over the five src trees as one ``js`` package.

Usage: python tools/typecheck.py [PYRIGHT_ARGS...]   (``hatch run types:check``)

pyright does not follow js-core's pkgutil-style ``js/__init__.py`` into the sibling
distributions' portions, so this lays the namespace out first (:mod:`namespace`, shared with
the documentation site) under ``build/api-src``, which pyrightconfig.json names in
``extraPaths``. The files checked are still the ones under ``packages/*/src``.
"""

from __future__ import annotations

import subprocess
import sys

from namespace import ROOT, lay_out_namespace


def main(argv: list[str]) -> int:
    lay_out_namespace()
    return subprocess.call([sys.executable, "-m", "pyright", *argv], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
