"""js.training (the js-train distribution)."""

from js._interface import require as _require

from ._version import INTERFACE as __interface__
from ._version import REQUIRES as _REQUIRES
from ._version import __version__

_require("js-train", __version__, _REQUIRES)

__all__ = ["__interface__", "__version__"]
