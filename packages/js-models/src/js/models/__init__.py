"""js.models: model families loaded from Hugging Face and timm folders (the js-models
distribution)."""

from js._interface import require as _require

from ._version import INTERFACE as __interface__
from ._version import REQUIRES as _REQUIRES
from ._version import __version__

_require("js-models", __version__, _REQUIRES)

from ._base import PretrainedConfig as PretrainedConfig  # noqa: E402
from ._base import PreTrainedModel as PreTrainedModel  # noqa: E402
from ._pretrained import LoadingInfo as LoadingInfo  # noqa: E402
from ._pretrained import from_pretrained as from_pretrained  # noqa: E402
from ._pretrained import loading_info as loading_info  # noqa: E402

# Each family adds its import lines below (one block per family).
# GPT-2
from .gpt2 import GPT2Config as GPT2Config  # noqa: E402
from .gpt2 import GPT2LMHeadModel as GPT2LMHeadModel  # noqa: E402
from .gpt2 import GPT2Model as GPT2Model  # noqa: E402

__all__ = [
    "GPT2Config",
    "GPT2LMHeadModel",
    "GPT2Model",
    "LoadingInfo",
    "PreTrainedModel",
    "PretrainedConfig",
    "__interface__",
    "__version__",
    "from_pretrained",
    "loading_info",
]
