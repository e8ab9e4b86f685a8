"""js.nn: layers with PyTorch's signatures and weight layouts (the js-nn distribution)."""

from js._interface import require as _require

from ._version import INTERFACE as __interface__
from ._version import REQUIRES as _REQUIRES
from ._version import __version__

_require("js-nn", __version__, _REQUIRES)

from js import Buffer, Module, ModuleDict, ModuleList, Parameter  # noqa: E402

from . import attention as attention  # noqa: E402
from . import checkpoint as checkpoint  # noqa: E402
from . import checkpoint_format as checkpoint_format  # noqa: E402
from . import functional as functional  # noqa: E402
from . import init as init  # noqa: E402
from . import lora as lora  # noqa: E402
from ._activation import ELU as ELU  # noqa: E402
from ._activation import GELU as GELU  # noqa: E402
from ._activation import Hardtanh as Hardtanh  # noqa: E402
from ._activation import LeakyReLU as LeakyReLU  # noqa: E402
from ._activation import LogSoftmax as LogSoftmax  # noqa: E402
from ._activation import ReLU as ReLU  # noqa: E402
from ._activation import ReLU6 as ReLU6  # noqa: E402
from ._activation import Sigmoid as Sigmoid  # noqa: E402
from ._activation import SiLU as SiLU  # noqa: E402
from ._activation import Softmax as Softmax  # noqa: E402
from ._activation import Tanh as Tanh  # noqa: E402
from ._container import Flatten as Flatten  # noqa: E402
from ._container import Sequential as Sequential  # noqa: E402
from ._conv import Conv1d as Conv1d  # noqa: E402
from ._conv import Conv2d as Conv2d  # noqa: E402
from ._conv import ConvTranspose1d as ConvTranspose1d  # noqa: E402
from ._conv import ConvTranspose2d as ConvTranspose2d  # noqa: E402
from ._dropout import Dropout as Dropout  # noqa: E402
from ._dropout import Dropout1d as Dropout1d  # noqa: E402
from ._dropout import Dropout2d as Dropout2d  # noqa: E402
from ._embedding import Embedding as Embedding  # noqa: E402
from ._kv_cache import KVCache as KVCache  # noqa: E402
from ._linear import Identity as Identity  # noqa: E402
from ._linear import Linear as Linear  # noqa: E402
from ._lora import LoRALinear as LoRALinear  # noqa: E402
from ._normalization import BatchNorm1d as BatchNorm1d  # noqa: E402
from ._normalization import BatchNorm2d as BatchNorm2d  # noqa: E402
from ._normalization import GroupNorm as GroupNorm  # noqa: E402
from ._normalization import LayerNorm as LayerNorm  # noqa: E402
from ._normalization import RMSNorm as RMSNorm  # noqa: E402
from ._pooling import AdaptiveAvgPool1d as AdaptiveAvgPool1d  # noqa: E402
from ._pooling import AdaptiveAvgPool2d as AdaptiveAvgPool2d  # noqa: E402
from ._pooling import AvgPool1d as AvgPool1d  # noqa: E402
from ._pooling import AvgPool2d as AvgPool2d  # noqa: E402
from ._pooling import MaxPool1d as MaxPool1d  # noqa: E402
from ._pooling import MaxPool2d as MaxPool2d  # noqa: E402
from ._recurrent import GRU as GRU  # noqa: E402
from ._recurrent import LSTM as LSTM  # noqa: E402
from ._recurrent import RNN as RNN  # noqa: E402
from ._summary import summary as summary  # noqa: E402
from ._torch import load_torch_state_dict as load_torch_state_dict  # noqa: E402
from ._torch import torch_state_dict as torch_state_dict  # noqa: E402
from ._transformer import TransformerEncoder as TransformerEncoder  # noqa: E402
from ._transformer import TransformerEncoderLayer as TransformerEncoderLayer  # noqa: E402
from ._upsample import Upsample as Upsample  # noqa: E402
from ._weights import WeightsInfo as WeightsInfo  # noqa: E402
from ._weights import load_weights as load_weights  # noqa: E402
from ._weights import save_weights as save_weights  # noqa: E402
from ._weights import weights_info as weights_info  # noqa: E402
from .attention import MultiheadAttention as MultiheadAttention  # noqa: E402
from .checkpoint import CheckpointError as CheckpointError  # noqa: E402
from .checkpoint import export_weights as export_weights  # noqa: E402
from .checkpoint import read_checkpoint as read_checkpoint  # noqa: E402

__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Buffer",
    "CheckpointError",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "ELU",
    "Embedding",
    "Flatten",
    "GELU",
    "GroupNorm",
    "Hardtanh",
    "GRU",
    "Identity",
    "KVCache",
    "LSTM",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "LoRALinear",
    "LogSoftmax",
    "MaxPool1d",
    "MaxPool2d",
    "Module",
    "ModuleDict",
    "ModuleList",
    "MultiheadAttention",
    "Parameter",
    "RNN",
    "ReLU",
    "ReLU6",
    "RMSNorm",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "Upsample",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "WeightsInfo",
    "attention",
    "checkpoint",
    "checkpoint_format",
    "__interface__",
    "__version__",
    "export_weights",
    "functional",
    "init",
    "load_torch_state_dict",
    "load_weights",
    "lora",
    "read_checkpoint",
    "save_weights",
    "summary",
    "torch_state_dict",
    "weights_info",
]
