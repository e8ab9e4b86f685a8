"""Shared pieces of test_moe.py and moe_sharded_script.py: folders in both layouts of the
experts' weights."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import safetensors.numpy


def split_experts(folder: Path, out: Path, names: dict[str, tuple[str, ...]], layer: str) -> None:
    """``out``: ``folder``'s model with each stacked expert tensor written as one tensor per
    expert, as transformers' ``save_pretrained`` and the hub write them (``names``: the config's
    ``expert_file_names``; ``layer``: the sparse block's name in the file, "mlp" or Mixtral's
    "block_sparse_moe")."""
    tensors = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    written = {}
    for key, value in tensors.items():
        match = re.fullmatch(r"(.*)\.mlp\.experts\.(gate_up_proj|down_proj)", key)
        if match is None:
            written[re.sub(r"\.mlp\.gate\.", f".{layer}.gate.", key)] = value
            continue
        parts = names[match.group(2)]
        for e, stacked in enumerate(value):
            for name, piece in zip(parts, np.split(stacked, len(parts)), strict=True):
                written[f"{match.group(1)}.{layer}.experts.{e}.{name}.weight"] = piece
    out.mkdir(parents=True)
    safetensors.numpy.save_file(written, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(config))
