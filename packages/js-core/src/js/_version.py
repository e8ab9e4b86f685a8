"""Version and interface of js-core.

``INTERFACE`` numbers what js-core offers its sibling distributions (the object model, the
transforms, ``js._interface`` and, since interface 2, the shared checks of ``js._checks``). It
changes only when that offer changes, and then js-core's minor version changes with it;
``INTERFACE_RELEASES`` records the first release of each interface, which
``tools/check_versions.py`` uses to derive the ranges the siblings must declare.
"""

__version__ = "0.2.0"
INTERFACE = 2
INTERFACE_RELEASES = {1: "0.1.0", 2: "0.2.0"}
