"""js.nn: layers with PyTorch's signatures and weight layouts (the js-nn distribution)."""

from js._interface import require as _require

from ._version import INTERFACE as __interface__
from ._version import REQUIRES as _REQUIRES
from ._version import __version__

_require("js-nn", __version__, _REQUIRES)

from js import Buffer, Module, ModuleDict, ModuleList, Parameter  # noqa: E402

__all__ = [
    "Buffer",
    "Module",
    "ModuleDict",
    "ModuleList",
    "Parameter",
    "__interface__",
    "__version__",
]
