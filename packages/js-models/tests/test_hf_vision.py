"""transformers' own ResNet and ConvNeXt (``model_type`` ``"resnet"`` / ``"convnext"``, not
timm's) both ways: transformers' folders load into js.models with transformers' outputs, and
the folders js writes load back in transformers with js's outputs.

Each reference is random-initialised with its BatchNorm statistics and every 1-D weight (biases,
norm weights, layer scales) perturbed, so a tensor dropped or misread cannot pass; outputs are
compared in float32, eval mode, to 1e-4 of the output scale.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import js.models

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

# importlib mode does not put this folder on the path; the support module lives beside us.
sys.path.insert(0, str(Path(__file__).parent))
from family_support import randomize  # noqa: E402

TOLERANCE = 1e-4
PIXELS = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
TINY = {"hidden_sizes": [8, 16], "depths": [1, 1], "num_labels": 3}
CASES = {
    "ResNetModel": {"embedding_size": 8, "layer_type": "basic", **TINY},
    "ResNetForImageClassification": {"embedding_size": 8, "layer_type": "bottleneck", **TINY},
    "ConvNextModel": {"num_stages": 2, "layer_scale_init_value": 0.5, **TINY},
    "ConvNextForImageClassification": {"num_stages": 2, "patch_size": 2, **TINY},
}


def _reference_class(name: str):
    """``transformers.<name>``, imported with torchvision hidden (its wheel here raises at
    import; neither model uses it)."""
    before = sys.modules.get("torchvision", False)
    sys.modules["torchvision"] = None  # type: ignore[assignment]
    try:
        return getattr(importlib.import_module("transformers"), name)
    finally:
        if before is False:
            del sys.modules["torchvision"]
        else:
            sys.modules["torchvision"] = before


def _torch_outputs(model) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(torch.tensor(PIXELS))
    names = ("logits",) if hasattr(out, "logits") else ("last_hidden_state", "pooler_output")
    return [getattr(out, name).numpy() for name in names]


def _js_outputs(model) -> list[np.ndarray]:
    out = model(jnp.asarray(PIXELS))
    return [np.asarray(value) for value in (out if isinstance(out, tuple) else (out,))]


def _error(got: list[np.ndarray], expected: list[np.ndarray]) -> float:
    errors = []
    for ours, theirs in zip(got, expected, strict=True):
        ours = ours.reshape(theirs.shape)  # ResNet's pooler_output is [B, C, 1, 1] in both
        errors.append(float(np.abs(ours - theirs).max() / np.abs(theirs).max()))
    return max(errors)


@pytest.mark.parametrize("name", sorted(CASES))
def test_loads_and_saves_both_ways(name, tmp_path):
    cls = _reference_class(name)
    torch.manual_seed(0)
    reference = cls(cls.config_class(**CASES[name])).eval()
    randomize(reference)
    reference.save_pretrained(tmp_path / "theirs")

    model = js.models.from_pretrained(tmp_path / "theirs")
    assert type(model).__name__ == name
    assert type(model).__module__ in ("js.models.hf_resnet", "js.models.hf_convnext")
    ours = _js_outputs(model)
    assert _error(ours, _torch_outputs(reference)) < TOLERANCE

    model.save_pretrained(tmp_path / "ours")
    back = cls.from_pretrained(tmp_path / "ours").eval()
    assert _error(_torch_outputs(back), ours) < TOLERANCE
    assert set(back.state_dict()) == set(reference.state_dict())
