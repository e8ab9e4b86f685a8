"""js.losses (the js-losses distribution)."""

from js._interface import require as _require

from ._version import INTERFACE as __interface__
from ._version import REQUIRES as _REQUIRES
from ._version import __version__

_require("js-losses", __version__, _REQUIRES)

__all__ = ["__interface__", "__version__"]
