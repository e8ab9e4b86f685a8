"""js.losses (the js-losses distribution): loss functions with PyTorch's numbers.

Each loss is a pure function of arrays: a per-element formula, then one shared ``reduction``
(``'none'``, ``'sum'``, ``'mean'``) with an optional boolean ``mask``.
"""

from js._interface import require as _require

from ._version import INTERFACE as __interface__
from ._version import REQUIRES as _REQUIRES
from ._version import __version__

_require("js-losses", __version__, _REQUIRES)

from ._classification import (  # noqa: E402  (after the interface check)
    binary_cross_entropy_with_logits as binary_cross_entropy_with_logits,
)
from ._classification import cross_entropy as cross_entropy  # noqa: E402
from ._regression import l1_loss as l1_loss  # noqa: E402
from ._regression import mse_loss as mse_loss  # noqa: E402
from ._regression import smooth_l1_loss as smooth_l1_loss  # noqa: E402

__all__ = [
    "__interface__",
    "__version__",
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "l1_loss",
    "mse_loss",
    "smooth_l1_loss",
]
