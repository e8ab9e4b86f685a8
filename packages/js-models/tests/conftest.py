"""Fixtures of the js-models tests: each family's shared helpers live in
``<family>_support.py`` beside its tests, importable from here."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
