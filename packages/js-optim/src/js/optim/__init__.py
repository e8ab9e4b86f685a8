"""js.optim (the js-optim distribution): PyTorch's optimizers, with parameter groups.

``SGD``, ``Adam`` and ``AdamW`` take ``model.parameters()`` (or torch-style parameter groups)
and update it in place with ``optimizer.step(grads)``, eagerly or inside ``js.jit``;
``optimizer.param_groups[i]["lr"] = x`` takes effect at the next step without compiling again.
"""

from js._interface import require as _require

from ._version import INTERFACE as __interface__
from ._version import REQUIRES as _REQUIRES
from ._version import __version__

_require("js-optim", __version__, _REQUIRES)

from . import lr_scheduler as lr_scheduler  # noqa: E402  (after the interface check)
from . import swa_utils as swa_utils  # noqa: E402
from ._accumulate import Accumulate as Accumulate  # noqa: E402
from ._accumulate import accumulate as accumulate  # noqa: E402
from ._adadelta import Adadelta as Adadelta  # noqa: E402
from ._adafactor import Adafactor as Adafactor  # noqa: E402
from ._adagrad import Adagrad as Adagrad  # noqa: E402
from ._adam import Adam as Adam  # noqa: E402
from ._adam import AdamW as AdamW  # noqa: E402
from ._adamax import Adamax as Adamax  # noqa: E402
from ._clip import clip_grad_norm as clip_grad_norm  # noqa: E402
from ._clip import clip_grad_value as clip_grad_value  # noqa: E402
from ._groups import param_groups as param_groups  # noqa: E402
from ._lion import Lion as Lion  # noqa: E402
from ._nadam import NAdam as NAdam  # noqa: E402
from ._optax import Optax as Optax  # noqa: E402
from ._optimizer import Optimizer as Optimizer  # noqa: E402
from ._param_group import OptState as OptState  # noqa: E402
from ._param_group import ParamGroup as ParamGroup  # noqa: E402
from ._radam import RAdam as RAdam  # noqa: E402
from ._rmsprop import RMSprop as RMSprop  # noqa: E402
from ._schedules import LearningRate as LearningRate  # noqa: E402
from ._schedules import cosine_schedule as cosine_schedule  # noqa: E402
from ._schedules import linear_warmup as linear_warmup  # noqa: E402
from ._sgd import SGD as SGD  # noqa: E402

__all__ = [
    "SGD",
    "Accumulate",
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "LearningRate",
    "Lion",
    "NAdam",
    "OptState",
    "Optax",
    "Optimizer",
    "ParamGroup",
    "RAdam",
    "RMSprop",
    "__interface__",
    "__version__",
    "accumulate",
    "clip_grad_norm",
    "clip_grad_value",
    "cosine_schedule",
    "linear_warmup",
    "lr_scheduler",
    "param_groups",
    "swa_utils",
]
