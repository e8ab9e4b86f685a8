"""js.models: model families loaded from Hugging Face and timm folders (the js-models
distribution)."""

from js._interface import require as _require

from ._version import INTERFACE as __interface__
from ._version import REQUIRES as _REQUIRES
from ._version import __version__

_require("js-models", __version__, _REQUIRES)

from ._base import PretrainedConfig as PretrainedConfig  # noqa: E402
from ._base import PreTrainedModel as PreTrainedModel  # noqa: E402
from ._decoder import DecoderAttention as DecoderAttention  # noqa: E402
from ._decoder import DecoderConfig as DecoderConfig  # noqa: E402
from ._decoder import DecoderForCausalLM as DecoderForCausalLM  # noqa: E402
from ._decoder import DecoderLayer as DecoderLayer  # noqa: E402
from ._decoder import DecoderModel as DecoderModel  # noqa: E402
from ._decoder import FeedForward as FeedForward  # noqa: E402
from ._decoder import GatedMLP as GatedMLP  # noqa: E402
from ._generation import CausalLM as CausalLM  # noqa: E402
from ._generation import GenerationMixin as GenerationMixin  # noqa: E402
from ._generation import generate as generate  # noqa: E402
from ._generation import stream as stream  # noqa: E402
from ._moe import expert_rules as expert_rules  # noqa: E402
from ._pretrained import LoadingInfo as LoadingInfo  # noqa: E402
from ._pretrained import from_pretrained as from_pretrained  # noqa: E402
from ._pretrained import loading_info as loading_info  # noqa: E402

# The families (js/models/_registry.py says which folder goes to which).
from .bert import BertConfig as BertConfig  # noqa: E402
from .bert import BertForSequenceClassification as BertForSequenceClassification  # noqa: E402
from .bert import BertModel as BertModel  # noqa: E402
from .convnext import ConvNeXtConfig as ConvNeXtConfig  # noqa: E402
from .convnext import ConvNeXtModel as ConvNeXtModel  # noqa: E402
from .gpt2 import GPT2Config as GPT2Config  # noqa: E402
from .gpt2 import GPT2LMHeadModel as GPT2LMHeadModel  # noqa: E402
from .gpt2 import GPT2Model as GPT2Model  # noqa: E402
from .image_processor import ImageProcessor as ImageProcessor  # noqa: E402
from .llama import LlamaConfig as LlamaConfig  # noqa: E402
from .llama import LlamaForCausalLM as LlamaForCausalLM  # noqa: E402
from .llama import LlamaModel as LlamaModel  # noqa: E402
from .llama import MistralConfig as MistralConfig  # noqa: E402
from .llama import MistralForCausalLM as MistralForCausalLM  # noqa: E402
from .llama import MistralModel as MistralModel  # noqa: E402
from .llama import Qwen2Config as Qwen2Config  # noqa: E402
from .llama import Qwen2ForCausalLM as Qwen2ForCausalLM  # noqa: E402
from .llama import Qwen2Model as Qwen2Model  # noqa: E402
from .pipelines import pipeline as pipeline  # noqa: E402
from .resnet import ResNetConfig as ResNetConfig  # noqa: E402
from .resnet import ResNetModel as ResNetModel  # noqa: E402
from .sentence_transformers import SentenceTransformer as SentenceTransformer  # noqa: E402
from .streamers import TextIteratorStreamer, TextStreamer  # noqa: E402
from .tokenizer import Tokenizer as Tokenizer  # noqa: E402
from .vit import ViTConfig as ViTConfig  # noqa: E402
from .vit import ViTForImageClassification as ViTForImageClassification  # noqa: E402
from .vit import ViTModel as ViTModel  # noqa: E402
from .whisper_features import WhisperFeatureExtractor as WhisperFeatureExtractor  # noqa: E402

__all__ = [
    "BertConfig",
    "BertForSequenceClassification",
    "BertModel",
    "CausalLM",
    "ConvNeXtConfig",
    "DecoderAttention",
    "DecoderConfig",
    "DecoderForCausalLM",
    "DecoderLayer",
    "DecoderModel",
    "FeedForward",
    "GatedMLP",
    "ConvNeXtModel",
    "GPT2Config",
    "GenerationMixin",
    "GPT2LMHeadModel",
    "GPT2Model",
    "ImageProcessor",
    "LlamaConfig",
    "LlamaForCausalLM",
    "LlamaModel",
    "LoadingInfo",
    "MistralConfig",
    "MistralForCausalLM",
    "MistralModel",
    "PreTrainedModel",
    "PretrainedConfig",
    "Qwen2Config",
    "Qwen2ForCausalLM",
    "Qwen2Model",
    "ResNetConfig",
    "ResNetModel",
    "SentenceTransformer",
    "TextIteratorStreamer",
    "TextStreamer",
    "Tokenizer",
    "ViTConfig",
    "ViTForImageClassification",
    "ViTModel",
    "WhisperFeatureExtractor",
    "expert_rules",
    "from_pretrained",
    "generate",
    "loading_info",
    "pipeline",
    "stream",
    "__interface__",
    "__version__",
]
