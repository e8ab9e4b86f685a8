"""js.models: model families loaded from Hugging Face and timm folders (the js-models
distribution)."""

from js._interface import require as _require

from ._version import INTERFACE as __interface__
from ._version import REQUIRES as _REQUIRES
from ._version import __version__

_require("js-models", __version__, _REQUIRES)

from ._base import PretrainedConfig as PretrainedConfig  # noqa: E402
from ._base import PreTrainedModel as PreTrainedModel  # noqa: E402
from ._pretrained import from_pretrained as from_pretrained  # noqa: E402

# Each family adds its import lines below (one block per family).
# BERT and ViT
from .bert import BertConfig as BertConfig  # noqa: E402
from .bert import BertForSequenceClassification as BertForSequenceClassification  # noqa: E402
from .bert import BertModel as BertModel  # noqa: E402
from .vit import ViTConfig as ViTConfig  # noqa: E402
from .vit import ViTForImageClassification as ViTForImageClassification  # noqa: E402
from .vit import ViTModel as ViTModel  # noqa: E402

__all__ = [
    "BertConfig",
    "BertForSequenceClassification",
    "BertModel",
    "ViTConfig",
    "ViTForImageClassification",
    "ViTModel",
    "PreTrainedModel",
    "PretrainedConfig",
    "__interface__",
    "__version__",
    "from_pretrained",
]
