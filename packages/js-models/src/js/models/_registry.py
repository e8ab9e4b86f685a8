"""Which family module serves which model folder.

A transformers folder names its family by ``model_type`` in ``config.json`` (and its class by
``architectures``); a timm folder by ``architecture`` (``"resnet18"``). Each family module
defines ``ARCHITECTURES`` (architecture name -> model class) and ``DEFAULT_ARCHITECTURE`` (the
class for a config without ``architectures``). Modules are imported on first use.
"""

from __future__ import annotations

# transformers' model_type -> the js.models module that implements it.
MODEL_TYPES: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "qwen2": "llama",
    "mistral": "llama",
    "bert": "bert",
    "vit": "vit",
}
# timm architecture names by prefix ("resnet18", "convnext_atto") -> module.
TIMM_PREFIXES: dict[str, str] = {
    "resnet": "resnet",
    "wide_resnet": "resnet",
    "resnext": "resnet",
    "convnext": "convnext",
}
