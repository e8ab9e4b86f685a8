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
# timm: ResNet, ConvNeXt
from .convnext import ConvNeXtConfig as ConvNeXtConfig  # noqa: E402
from .convnext import ConvNeXtModel as ConvNeXtModel  # noqa: E402
from .resnet import ResNetConfig as ResNetConfig  # noqa: E402
from .resnet import ResNetModel as ResNetModel  # noqa: E402

__all__ = [
    "ConvNeXtConfig",
    "ConvNeXtModel",
    "ResNetConfig",
    "ResNetModel",
    "PreTrainedModel",
    "PretrainedConfig",
    "__interface__",
    "__version__",
    "from_pretrained",
]
