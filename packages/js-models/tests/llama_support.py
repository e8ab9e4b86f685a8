"""Shared pieces of test_llama.py: transformers imported without torchvision, tiny perturbed
reference models, and folder round trips through js.models (with a stand-in for
``from_pretrained``/``save_pretrained`` while js.models' loader is being built)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import numpy as np

import js

# Every config shares these sizes (so eager ops compile once): 2 layers, width 64, 4 query
# heads sharing 2 key/value heads.
TINY = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)


@contextlib.contextmanager
def transformers_without_torchvision():
    """``import transformers`` with torchvision hidden (its wheel here raises at import):
    ``sys.modules["torchvision"] = None`` makes transformers see it as absent."""
    saved = {
        name: sys.modules[name] for name in list(sys.modules) if name.startswith("torchvision")
    }
    for name in saved:
        del sys.modules[name]
    sys.modules["torchvision"] = None  # type: ignore[assignment]
    try:
        import transformers

        yield transformers
    finally:
        del sys.modules["torchvision"]
        sys.modules.update(saved)


def perturb_torch(model, seed: int = 0) -> None:
    """Add noise to every norm weight and bias, so that a dropped or misplaced one shows."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                noise = torch.randn(parameter.shape, generator=generator)
                parameter.add_(0.2 * noise)


def perturb_js(model: js.Module, seed: int = 0) -> None:
    """The same for a js model (its norms start at ones and biases at zeros)."""
    rng = np.random.default_rng(seed)
    for name, parameter in model.named_parameters():
        if "norm" in name or name.endswith(".bias"):
            value = np.asarray(parameter.value)
            parameter.value = value + 0.2 * rng.standard_normal(value.shape).astype(value.dtype)


def save_js(model, folder: Path) -> None:
    """``model.save_pretrained(folder)``."""
    model.save_pretrained(folder)


def load_js(cls, folder: Path):
    """``cls.from_pretrained(folder)``."""
    return cls.from_pretrained(folder)


def load_folder(folder: Path):
    """``js.models.from_pretrained(folder)``: the class chosen from config.json."""
    import js.models

    return js.models.from_pretrained(folder)


def relative_error(got, expected) -> float:
    """``max|got - expected| / max|expected|``."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.abs(got - expected).max() / np.abs(expected).max())
