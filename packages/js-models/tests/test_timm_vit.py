"""timm's ViT and DeiT both ways: folders timm's ``save_for_hf`` writes load into js.models with
timm's outputs, and folders js writes load in ``timm.create_model("local-dir:...")``.

Tiny models (32x32 images, 8x8 patches, width 32, 2 blocks, 2 heads) with every 1-D parameter
and the tokens perturbed, compared in float32, eval mode, to 1e-4 of the output scale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.models
from js.models.timm_vit import VisionTransformerModel

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from timm_support import timm_fixture  # noqa: E402, F401  (the `timm` fixture)

TOLERANCE = 1e-4
TINY = {"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2}


def _perturb(model) -> None:
    """Random values for every 1-D parameter and the class / distillation tokens."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.ndim == 1 or name.endswith("_token"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3 + 0.5)


def _images() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)


def _relative(got: np.ndarray, expected: np.ndarray) -> float:
    assert got.shape == expected.shape
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def _check_both_ways(timm, tmp_path: Path, architecture: str, **kwargs) -> VisionTransformerModel:
    from timm.models._hub import save_for_hf

    reference = timm.create_model(architecture, pretrained=False, **TINY, **kwargs).eval()
    _perturb(reference)
    save_for_hf(reference, tmp_path / "timm", safe_serialization=True)
    model = js.models.from_pretrained(tmp_path / "timm")
    assert isinstance(model, VisionTransformerModel)
    images = _images()
    with torch.no_grad():
        expected = reference(torch.from_numpy(images)).numpy()
    got = np.asarray(js.jit(lambda m, x: m(x))(model, jnp.asarray(images)))
    assert _relative(got, expected) < TOLERANCE

    model.save_pretrained(tmp_path / "js")
    back = timm.create_model(f"local-dir:{tmp_path / 'js'}", pretrained=True).eval()
    with torch.no_grad():
        again = back(torch.from_numpy(images)).numpy()
    assert _relative(again, expected) < TOLERANCE
    return model


CASES = [
    ("vit_tiny_patch16_224", {"num_classes": 5}),
    ("vit_small_patch16_224", {"num_classes": 5, "global_pool": "avg", "init_values": 0.1}),
    ("vit_tiny_patch16_224", {"num_classes": 0}),
    ("deit_tiny_distilled_patch16_224", {"num_classes": 5}),
]


@pytest.mark.parametrize(("architecture", "kwargs"), CASES, ids=lambda v: str(v))
def test_timm_vit_both_ways(timm, tmp_path, architecture, kwargs):
    model = _check_both_ways(timm, tmp_path, architecture, **kwargs)
    assert model.config.architecture == architecture


def test_vit_config_refuses_unknown_pool():
    from js.models.timm_vit import VisionTransformerConfig

    with pytest.raises(ValueError, match="global_pool"):
        VisionTransformerConfig(architecture="vit_tiny_patch16_224", global_pool="max")


def test_js_made_vit_loads_in_timm(timm, tmp_path):
    from js.models.timm_vit import VisionTransformerConfig

    model_args = {**TINY, "init_values": 0.1}
    config = VisionTransformerConfig(
        architecture="deit_small_patch16_224", num_classes=3, model_args=model_args
    )
    model = VisionTransformerModel(config, rngs=js.Rngs(params=0)).eval()
    rng = np.random.default_rng(1)
    state = model.state_dict()
    for key, value in state.items():
        if value.ndim == 1 or key.endswith("_token"):
            state[key] = rng.uniform(-0.5, 1.5, value.shape).astype(value.dtype)
    model.load_state_dict(state)
    model.save_pretrained(tmp_path)
    reference = timm.create_model(f"local-dir:{tmp_path}", pretrained=True).eval()
    images = _images()
    with torch.no_grad():
        expected = reference(torch.from_numpy(images)).numpy()
    got = np.asarray(js.jit(lambda m, x: m(x))(model, jnp.asarray(images)))
    assert _relative(got, expected) < TOLERANCE
