"""Shared pieces of test_moe.py and moe_sharded_script.py: the loader hook the mixture-of-experts
families need, installed here until js.models' loader has it, and folders in both layouts of
the experts' weights."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import safetensors.numpy

from js.models import _pretrained
from js.models._base import PreTrainedModel


@contextlib.contextmanager
def stacked_expert_loading() -> Iterator[None]:
    """``from_pretrained`` reading a folder through the class's ``weights_view`` (the MoE
    families' ``_moe.ExpertStacks``: per-expert tensors presented stacked).

    The hook js.models' loader needs: ``load_pretrained`` would call
    ``weights = cls.weights_view(_Weights(folder))`` (``PreTrainedModel.weights_view`` returning
    the weights unchanged). Until it does, this wraps the two loader steps that read the
    folder's tensors (the plan and the fill); once ``PreTrainedModel`` has the hook it does
    nothing.
    """
    if "weights_view" in vars(PreTrainedModel):
        yield
        return
    plan, fill = _pretrained._plan_keys, _pretrained._fill

    def view(cls, weights):
        return cls.weights_view(weights) if hasattr(cls, "weights_view") else weights

    _pretrained._plan_keys = lambda cls, model, variables, weights, strict: plan(
        cls, model, variables, view(cls, weights), strict
    )
    _pretrained._fill = lambda cls, config, model, variables, weights, *rest: fill(
        cls, config, model, variables, view(cls, weights), *rest
    )
    try:
        yield
    finally:
        _pretrained._plan_keys, _pretrained._fill = plan, fill


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
