"""Tiny random BERT and ViT references (transformers 5.23) for the BERT and ViT tests: built
from a config, biases and LayerNorms perturbed so that a dropped or swapped tensor cannot
pass, and compared to js by the relative error max|js - ref| / max|ref|."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import numpy as np

BERT_TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 16,
    "type_vocab_size": 3,
}
VIT_TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "image_size": 16,
    "patch_size": 4,
    "num_channels": 3,
}
# A padded batch: row 0 full, row 1 padded after 4 tokens, with two segments each.
IDS = np.array([[2, 9, 13, 5, 40, 7, 3], [2, 33, 8, 3, 0, 0, 0]])
MASK = np.array([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]])
TYPES = np.array([[0, 0, 0, 1, 1, 1, 2], [0, 1, 1, 1, 0, 0, 0]])
PIXELS = np.random.default_rng(0).normal(size=(2, 3, 16, 16)).astype(np.float32)


def transformers() -> Any:
    """transformers with its BERT and ViT classes imported while torchvision is hidden (its
    wheel here raises at import; neither model uses it): ``sys.modules[name] = None`` makes
    ``find_spec`` report it absent, and transformers caches that answer."""
    before = sys.modules.get("torchvision", False)
    sys.modules["torchvision"] = None  # type: ignore[assignment]
    try:
        module = importlib.import_module("transformers")
        module.BertForSequenceClassification  # noqa: B018  (lazy imports, torchvision hidden)
        module.ViTForImageClassification  # noqa: B018
        return module
    finally:
        if before is False:
            del sys.modules["torchvision"]
        else:
            sys.modules["torchvision"] = before


def perturb(model: Any, seed: int = 0) -> Any:
    """Add noise to every bias, LayerNorm weight, [CLS] token and position table of a torch
    model (transformers initialises biases to 0 and norms to 1, which hide a dropped tensor)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or "layernorm" in name.lower() or "token" in name:
                param.add_(torch.randn(param.shape, generator=generator) * 0.3)
            if "position_embeddings" in name or "classifier.weight" in name:
                param.mul_(4.0)
    return model.eval()


def bert_reference(cls_name: str = "BertForSequenceClassification", **overrides: Any) -> Any:
    """A perturbed transformers BERT model of class ``cls_name``, eval mode."""
    import torch

    tf = transformers()
    torch.manual_seed(0)
    config = tf.BertConfig(**{**BERT_TINY, **overrides})
    return perturb(getattr(tf, cls_name)(config))


def vit_reference(cls_name: str = "ViTForImageClassification", **overrides: Any) -> Any:
    """A perturbed transformers ViT model of class ``cls_name``, eval mode."""
    import torch

    tf = transformers()
    torch.manual_seed(0)
    config = tf.ViTConfig(**{**VIT_TINY, **overrides})
    return perturb(getattr(tf, cls_name)(config))


def bert_outputs(model: Any, mask: np.ndarray | None = MASK, types: Any = TYPES) -> Any:
    """transformers' outputs (ModelOutput) of a BERT model on the padded batch."""
    import torch

    with torch.no_grad():
        return model(
            input_ids=torch.tensor(IDS),
            attention_mask=None if mask is None else torch.tensor(mask),
            token_type_ids=None if types is None else torch.tensor(types),
        )


def vit_outputs(model: Any) -> Any:
    """transformers' outputs of a ViT model on ``PIXELS``."""
    import torch

    with torch.no_grad():
        return model(pixel_values=torch.tensor(PIXELS))


def rel(ours: Any, ref: Any, keep: np.ndarray | None = None) -> float:
    """max|ours - ref| / max|ref|, over the positions ``keep`` selects (all when None)."""
    ref = ref.numpy() if hasattr(ref, "numpy") else np.asarray(ref)
    ours = np.asarray(ours, np.float32)
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    if keep is not None:
        ours, ref = ours[keep], ref[keep]
    return float(np.abs(ours - ref).max() / np.abs(ref).max())
