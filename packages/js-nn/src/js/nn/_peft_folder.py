"""Hugging Face PEFT 0.21's LoRA adapter folder: its names, the config entries js honours, and
reading a folder with every check done before anything is returned (``js.nn.lora`` uses it)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
PREFIX = "base_model.model."  # what PEFT's PeftModel puts before the base model's paths
KEY = re.compile(r"base_model\.model\.(.+)\.(lora_[AB])\.weight")


def rename(path: str, key_mapping: Mapping[str, str] | None) -> str:
    for pattern, replacement in (key_mapping or {}).items():
        path = re.sub(pattern, replacement, path)
    return path


# Config entries whose non-default values change what the adapter computes or holds, and that
# js does not implement: (key, default). Anything else (init options, layers_to_transform, which
# the file's keys already settle) does not matter to a loaded adapter.
_UNSUPPORTED = (
    ("use_dora", False),
    ("rank_pattern", {}),
    ("alpha_pattern", {}),
    ("bias", "none"),
    ("lora_bias", False),
    ("modules_to_save", None),
    ("target_parameters", None),
    ("trainable_token_indices", None),
    ("layer_replication", None),
    ("use_qalora", False),
    ("use_bdlora", None),
    ("alora_invocation_tokens", None),
    ("arrow_config", None),
)


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG_NAME
    if not path.is_file() or not (folder / WEIGHTS_NAME).is_file():
        raise FileNotFoundError(
            f"lora.load_adapter: {folder} lacks {CONFIG_NAME} or {WEIGHTS_NAME}. Fix: the "
            "folder PEFT's save_pretrained or lora.save_adapter wrote"
        )
    config = json.loads(path.read_text())
    if config.get("peft_type") != "LORA":
        raise ValueError(
            f"lora.load_adapter: {path} is a {config.get('peft_type')!r} adapter; only "
            "peft_type 'LORA' loads. Fix: a LoRA adapter folder"
        )
    problems = [
        f"{key}={config[key]!r} (supported: {default!r})"
        for key, default in _UNSUPPORTED
        if config.get(key) not in (default, None, {}, [], False)
    ]
    if problems:
        raise NotImplementedError(
            f"lora.load_adapter: {path} asks for what js's LoRA does not implement: "
            f"{'; '.join(problems)}. Fix: merge the adapter with PEFT (merge_and_unload) and "
            "load the merged weights instead"
        )
    return config


def read_pairs(
    folder: Path, config: dict[str, Any], key_mapping: Mapping[str, str] | None
) -> dict[str, dict[str, np.ndarray]]:
    """``{module path: {"lora_A": [r, in], "lora_B": [out, r]}}`` after checking every key."""
    tensors = safetensors.numpy.load_file(str(folder / WEIGHTS_NAME))
    pairs: dict[str, dict[str, np.ndarray]] = {}
    bad = []
    for key, array in tensors.items():
        match = KEY.fullmatch(key)
        if match is None:
            bad.append(key)
            continue
        pairs.setdefault(rename(match[1], key_mapping), {})[match[2]] = array
    if bad:
        raise KeyError(
            f"lora.load_adapter: {folder / WEIGHTS_NAME} holds keys that are no LoRA weights "
            f"(expected 'base_model.model.<path>.lora_A.weight'/'lora_B.weight'): {bad[:5]}"
        )
    r = config.get("r")
    for path, pair in pairs.items():
        a, b = pair.get("lora_A"), pair.get("lora_B")
        if a is None or b is None or a.ndim != 2 or b.ndim != 2 or a.shape[0] != r:
            shapes = {name: array.shape for name, array in pair.items()}
            raise ValueError(
                f"lora.load_adapter: {path!r} needs lora_A [r={r}, in] and lora_B [out, r], "
                f"got {shapes}. Fix: a file and config written together"
            )
    return pairs
