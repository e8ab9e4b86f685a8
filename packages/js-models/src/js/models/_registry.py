"""Which family module serves which model folder.

A transformers folder names its family by ``model_type`` in ``config.json`` (and its class by
``architectures``); a timm folder by ``architecture`` (``"resnet18"``). Each family module
defines ``ARCHITECTURES`` (architecture name -> model class), whose first class serves a config
without ``architectures`` unless the module names another as ``DEFAULT_ARCHITECTURE`` (the timm
families). Modules are imported on first use.
"""

from __future__ import annotations

# transformers' model_type -> the js.models module that implements it.
MODEL_TYPES: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "qwen2": "llama",
    "mistral": "llama",
    "qwen3": "qwen3",
    "olmo2": "olmo2",
    "granite": "granite",
    "smollm3": "smollm3",
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3_text": "gemma",
    "gemma3": "gemma",
    "phi3": "phi3",
    "phi": "phi",
    "gpt_neox": "gpt_neox",
    "mixtral": "mixtral",
    "qwen3_moe": "qwen3_moe",
    "qwen2_moe": "qwen2_moe",
    "bert": "bert",
    "roberta": "roberta",
    "xlm-roberta": "roberta",
    "electra": "electra",
    "distilbert": "distilbert",
    "mpnet": "mpnet",
    "modernbert": "modernbert",
    "vit": "vit",
    "dinov2": "dinov2",
    "dinov2_with_registers": "dinov2",
    "clip": "clip",
    "clip_text_model": "clip",
    "clip_vision_model": "clip",
    "siglip": "siglip",
    "siglip_text_model": "siglip",
    "siglip_vision_model": "siglip",
    "resnet": "hf_resnet",
    "convnext": "hf_convnext",
    "swin": "hf_swin",
    "whisper": "whisper",
    "t5": "t5",
    "bart": "bart",
}
# timm architecture names by prefix ("resnet18", "convnext_atto") -> module.
TIMM_PREFIXES: dict[str, str] = {
    "resnet": "resnet",
    "wide_resnet": "resnet",
    "resnext": "resnet",
    "convnext": "convnext",
    "regnetx_": "timm_regnet",
    "regnety_": "timm_regnet",
    "vit_": "timm_vit",
    "deit_": "timm_vit",
    "deit3_": "timm_vit",
    "eva02_": "timm_eva",
    "efficientnet_": "timm_efficientnet",
    "mobilenetv3_": "timm_efficientnet",
}
