"""Tiny random GPT-2 references (transformers) and the folders they save, for the tests of
GPT-2 and of from_pretrained/save_pretrained."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np

TINY = {"n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 64, "n_positions": 16}
IDS = np.array([[5, 9, 13, 2, 40, 7], [3, 3, 8, 21, 60, 1], [11, 4, 4, 30, 2, 9]])
# right padding, left padding, none
MASK = np.array([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])


def transformers() -> Any:
    """transformers, imported with torchvision hidden (its wheel here raises at import; GPT-2
    needs none of it): ``sys.modules[name] = None`` makes find_spec report it absent."""
    if "transformers.models.gpt2" in sys.modules:
        return sys.modules["transformers"]
    before = sys.modules.get("torchvision", False)
    sys.modules["torchvision"] = None  # type: ignore[assignment]
    try:
        module = importlib.import_module("transformers")
        module.GPT2LMHeadModel  # noqa: B018  (its lazy import, while torchvision is hidden)
        module.AutoModelForCausalLM  # noqa: B018
        return module
    finally:
        if before is False:
            del sys.modules["torchvision"]
        else:
            sys.modules["torchvision"] = before


def reference(seed: int = 0, **overrides: Any) -> Any:
    """A random transformers GPT2LMHeadModel in eval mode, biases and norms perturbed so that a
    dropped tensor cannot pass."""
    import torch

    tf = transformers()
    torch.manual_seed(seed)
    config = tf.GPT2Config(**{**TINY, "bos_token_id": 0, "eos_token_id": 0, **overrides})
    model = tf.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                param.add_(torch.randn_like(param) * 0.2)
            if name.endswith("wpe.weight"):
                param.mul_(5.0)
    return model


def save_reference(model: Any, folder: Path, **kwargs: Any) -> Path:
    model.save_pretrained(str(folder), **kwargs)
    return folder


def torch_outputs(model: Any, ids: np.ndarray = IDS, mask: np.ndarray | None = MASK, **kw: Any):
    """``(logits, last hidden state)`` of a transformers GPT2LMHeadModel, as NumPy."""
    import torch

    args = {k: torch.tensor(v) for k, v in kw.items()}
    args["input_ids"] = torch.tensor(ids)
    args["attention_mask"] = None if mask is None else torch.tensor(mask)
    with torch.no_grad():
        logits = model(**args).logits.numpy()
        hidden = model.transformer(**args).last_hidden_state.numpy()
    return logits, hidden


def rel(ours: Any, ref: np.ndarray, mask: np.ndarray | None = MASK) -> float:
    """max|ours - ref| / max|ref| over the unpadded positions."""
    ours = np.asarray(ours, np.float32)
    keep = np.ones(ref.shape[:2], bool) if mask is None else mask.astype(bool)
    return float(np.abs(ours - ref)[keep].max() / np.abs(ref[keep]).max())
