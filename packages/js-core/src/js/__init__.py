"""js: a PyTorch-style deep-learning library on JAX and Flax NNX.

js-core owns this namespace. The other distributions (js-nn, js-losses, js-optim, js-train,
js-models) install sibling portions of it (``js.nn``, ``js.losses``, ``js.optim``,
``js.training``, ``js.models``);
``pkgutil.extend_path`` finds them in wheel and editable installs alike.
"""

import importlib as _importlib
import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)

import jax.random as random  # noqa: E402  (js.random is JAX's random namespace)

from ._autodiff import grad, value_and_grad  # noqa: E402
from ._cache import disable_compilation_cache, enable_compilation_cache  # noqa: E402
from ._export import export  # noqa: E402
from ._jit import jit, programs_run  # noqa: E402
from ._missing import DISTRIBUTIONS as _DISTRIBUTIONS  # noqa: E402
from ._missing import install_hint_finder as _install_hint_finder  # noqa: E402
from ._module import IncompatibleKeys, Module, ModuleDict, ModuleList  # noqa: E402
from ._remat import remat  # noqa: E402
from ._rngs import Rngs  # noqa: E402
from ._scan import scan_steps  # noqa: E402
from ._sharding import shard, shard_batch  # noqa: E402
from ._transforms import apply, merge, split, stop_gradient, update  # noqa: E402
from ._variables import (  # noqa: E402
    Buffer,
    Object,
    Parameter,
    ParameterSelection,
    check_state_dict,  # noqa: E402
    placed_like,
)
from ._version import INTERFACE as __interface__  # noqa: E402
from ._version import __version__  # noqa: E402

__all__ = [
    "Buffer",
    "IncompatibleKeys",
    "Module",
    "ModuleDict",
    "ModuleList",
    "Object",
    "Parameter",
    "ParameterSelection",
    "Rngs",
    "__interface__",
    "__version__",
    "apply",
    "check_state_dict",
    "disable_compilation_cache",
    "enable_compilation_cache",
    "export",
    "grad",
    "jit",
    "merge",
    "placed_like",
    "programs_run",
    "random",
    "remat",
    "scan_steps",
    "shard",
    "shard_batch",
    "split",
    "stop_gradient",
    "update",
    "value_and_grad",
]

_install_hint_finder.install()


def __getattr__(name):
    # ``from js import optim`` asks ``hasattr(js, "optim")`` before importing the submodule:
    # import it here. When its distribution is missing, the finder raises the install hint.
    if f"{__name__}.{name}" in _DISTRIBUTIONS:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'js' has no attribute {name!r}")
