"""Version and interfaces of js-nn.

``INTERFACE`` numbers what this distribution offers the siblings that import it;
``INTERFACE_RELEASES`` records the first release of each. ``REQUIRES`` maps each sibling
this distribution imports to the inclusive range of that sibling's interfaces it supports:
checked at import, and against pyproject.toml by ``tools/check_versions.py``.
"""

__version__ = "0.2.0"
INTERFACE = 2
INTERFACE_RELEASES = {1: "0.1.0", 2: "0.2.0"}
REQUIRES = {"js-core": (2, 2), "js-losses": (1, 1)}
