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
from js.models.timm_vit import VisionTransformerConfig, VisionTransformerModel

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from timm_support import timm_fixture  # noqa: E402, F401  (the `timm` fixture)

TOLERANCE = 1e-4
TINY = {"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2}


def _perturb(model) -> None:
    """Random values for every 1-D parameter, the class / distillation / register tokens and
    ``pos_embed``, and the weights drawn at ``1 / sqrt(fan_in)`` (timm's initial head is so small
    that its bias would hide the rest of the logits)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.ndim == 1 or name.endswith(("_token", "pos_embed")):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3 + 0.5)
            elif name.endswith("weight"):
                fan_in = parameter[0].numel()
                parameter.copy_(torch.randn(parameter.shape, generator=generator) / fan_in**0.5)


def _images(height: int = 32, width: int = 32) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 3, height, width)).astype(np.float32)


def _relative(got: np.ndarray, expected: np.ndarray) -> float:
    assert got.shape == expected.shape
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def _check_both_ways(
    timm, tmp_path: Path, architecture: str, images: np.ndarray | None = None, **kwargs
) -> VisionTransformerModel:
    from timm.models._hub import save_for_hf

    reference = timm.create_model(architecture, pretrained=False, **TINY, **kwargs).eval()
    _perturb(reference)
    save_for_hf(reference, tmp_path / "timm", safe_serialization=True)
    model = js.models.from_pretrained(tmp_path / "timm")
    assert isinstance(model, VisionTransformerModel)
    images = _images() if images is None else images
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
    ("deit3_small_patch16_224", {"num_classes": 5}),  # layer scale, pos_embed on patches only
    ("vit_medium_patch16_reg4_gap_256", {"num_classes": 5}),  # 4 registers, no class token
]


@pytest.mark.parametrize(("architecture", "kwargs"), CASES, ids=lambda v: str(v))
def test_timm_vit_both_ways(timm, tmp_path, architecture, kwargs):
    model = _check_both_ways(timm, tmp_path, architecture, **kwargs)
    assert model.config.architecture == architecture


@pytest.mark.parametrize("architecture", ["vit_tiny_patch16_224", "deit3_small_patch16_224"])
def test_timm_vit_dynamic_img_size(timm, tmp_path, architecture):
    """Images of another size than img_size: pos_embed resized (bicubic, antialiased) as timm."""
    images = _images(48, 24)  # a 6 x 3 patch grid for the 4 x 4 table
    _check_both_ways(timm, tmp_path, architecture, images, num_classes=5, dynamic_img_size=True)


def test_vit_refuses_other_image_sizes_without_dynamic_img_size():
    config = VisionTransformerConfig(architecture="vit_tiny_patch16_224", model_args=TINY)
    model = VisionTransformerModel(config, rngs=js.Rngs(params=0))
    with pytest.raises(ValueError, match=r"\(6, 3\) patch grid.*dynamic_img_size=True"):
        model(jnp.asarray(_images(48, 24)))


def test_dinov2_config_defaults_to_no_classifier(timm):
    config = VisionTransformerConfig(architecture="vit_small_patch14_reg4_dinov2")
    reference = timm.create_model("vit_small_patch14_reg4_dinov2", depth=1)
    assert config.num_classes == reference.num_classes == 0
    assert config.arch_args()["img_size"] == reference.patch_embed.img_size[0] == 518


def test_register_vit_config_defaults_to_its_pooling():
    config = VisionTransformerConfig(architecture="vit_base_patch16_reg4_gap_256")
    assert config.global_pool == "avg" and config.arch_args()["reg_tokens"] == 4


@pytest.mark.slow
@pytest.mark.parametrize(
    "architecture",
    [name for name in VisionTransformerConfig.architectures if "deit3" in name or "_reg" in name]
    + ["vit_small_patch14_dinov2"],
)
def test_deit3_and_register_architectures_match_timm(timm, architecture):
    """DeiT III's, the register ViTs' and DINOv2's (one block): timm's parameters, shapes and
    pooling and default classes."""
    reference = timm.create_model(architecture, depth=1)
    config = VisionTransformerConfig(architecture=architecture, model_args={"depth": 1})
    model = VisionTransformerModel(config, rngs=js.Rngs(params=0))
    shapes = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    assert shapes == {name: tuple(value.shape) for name, value in reference.state_dict().items()}
    assert (config.global_pool, config.num_classes) == (
        reference.global_pool,
        reference.num_classes,
    )


def test_vit_config_refuses_unknown_pool():
    with pytest.raises(ValueError, match="global_pool"):
        VisionTransformerConfig(architecture="vit_tiny_patch16_224", global_pool="max")


JS_MADE = [
    ("deit_small_patch16_224", {**TINY, "init_values": 0.1}, 32),
    # the architecture's own 256x256 images: timm reads img_size from pretrained_cfg
    ("vit_medium_patch16_reg4_gap_256", {"embed_dim": 32, "depth": 1, "num_heads": 2}, 256),
]


@pytest.mark.parametrize(("architecture", "model_args", "size"), JS_MADE, ids=lambda v: str(v))
def test_js_made_vit_loads_in_timm(timm, tmp_path, architecture, model_args, size):
    config = VisionTransformerConfig(
        architecture=architecture, num_classes=3, model_args=model_args
    )
    model = VisionTransformerModel(config, rngs=js.Rngs(params=0)).eval()
    rng = np.random.default_rng(1)
    state = model.state_dict()
    for key, value in state.items():
        if value.ndim == 1 or key.endswith(("_token", "pos_embed")):
            state[key] = rng.uniform(-0.5, 1.5, value.shape).astype(value.dtype)
        else:  # weights at 1 / sqrt(fan_in), so the head's bias does not hide the rest
            fan_in = int(np.prod(value.shape[1:]))
            state[key] = (rng.standard_normal(value.shape) / fan_in**0.5).astype(value.dtype)
    model.load_state_dict(state)
    model.save_pretrained(tmp_path)
    reference = timm.create_model(f"local-dir:{tmp_path}", pretrained=True).eval()
    images = _images(size, size)
    with torch.no_grad():
        expected = reference(torch.from_numpy(images)).numpy()
    got = np.asarray(js.jit(lambda m, x: m(x))(model, jnp.asarray(images)))
    assert _relative(got, expected) < TOLERANCE
