"""Shared pieces of test_llama.py: transformers imported without torchvision, tiny perturbed
reference models, and folder round trips through js.models (with a stand-in for
``from_pretrained``/``save_pretrained`` while js.models' loader is being built)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import numpy as np

import js
import js.nn as nn

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
    """``model.save_pretrained(folder)``; until js.models writes folders, the same by hand."""
    try:
        model.save_pretrained(folder)
        return
    except NotImplementedError:
        pass
    folder.mkdir(parents=True, exist_ok=True)
    config = model._config_json()
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    state = model.state_dict()
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # transformers writes a tied weight once
    nn.save_weights(state, folder / "model.safetensors", metadata={"format": "pt"})


def load_js(cls, folder: Path):
    """``cls.from_pretrained(folder)``; until js.models reads folders, the same by hand."""
    try:
        return cls.from_pretrained(folder)
    except NotImplementedError:
        pass
    config = cls.config_class.from_dict(json.loads((folder / "config.json").read_text()))
    model = cls(config, rngs=js.Rngs(params=0))
    prefix = ""
    if cls.__name__.endswith("Model"):  # a base model from a folder with a head
        prefix = cls.base_model_prefix + "."
    result = nn.load_weights(model, folder / "model.safetensors", strict=False, prefix=prefix)
    assert result.missing_keys == [], result  # a tied lm_head.weight is filled by its other name
    return model.eval()


def load_folder(folder: Path):
    """``js.models.from_pretrained(folder)`` (the class chosen from config.json); until
    js.models reads folders, the same choice by hand."""
    import js.models
    from js.models import llama

    try:
        return js.models.from_pretrained(folder)
    except NotImplementedError:
        pass
    config = json.loads((folder / "config.json").read_text())
    name = (config.get("architectures") or [llama.DEFAULT_ARCHITECTURE])[0]
    return load_js(llama.ARCHITECTURES[name], folder)


def relative_error(got, expected) -> float:
    """``max|got - expected| / max|expected|``."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.abs(got - expected).max() / np.abs(expected).max())
