"""timm's EVA-02 both ways: folders timm's ``save_for_hf`` writes load into js.models with timm's
logits and features, and folders js writes load in ``timm.create_model("local-dir:...")``.

Tiny models (28x28 images, 7x7 patches so the rotary grid is 4x4 rescaled to EVA's 16x16, width
32, 2 blocks, 2 heads), float32, eval mode, to 1e-4 of the output scale. Every 1-D parameter,
the tokens and ``pos_embed`` are perturbed and the weights drawn at ``1 / sqrt(fan_in)``
(timm's EVA init is so small that the attention, and with it the rotary embedding, would hardly
move the output).
One case per attention / MLP kind: tiny (fused ``qkv`` with ``q_bias``/``v_bias``, packed
SwiGLU) and base (``q_proj``/``k_proj``/``v_proj``, SwiGLU with ``mlp.norm``), the latter also
with ``attn.norm`` and layer scale; small with register tokens and ``dynamic_img_size``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.models
from js.models.timm_eva import EvaConfig, EvaModel

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from timm_support import timm_fixture  # noqa: E402, F401  (the `timm` fixture)

TOLERANCE = 1e-4
TINY = {"img_size": 28, "patch_size": 7, "embed_dim": 32, "depth": 2, "num_heads": 2}
CASES = [  # architecture, model_args, image size
    ("eva02_tiny_patch14_224", {}, (28, 28)),
    ("eva02_base_patch14_224", {"scale_attn_inner": True, "init_values": 0.1}, (28, 28)),
    # registers, and another image size: a 5 x 3 grid for the 4 x 4 position table
    (
        "eva02_small_patch14_224",
        {"num_reg_tokens": 2, "no_embed_class": True, "dynamic_img_size": True},
        (35, 21),
    ),
]


def _relative(got: np.ndarray, expected: np.ndarray) -> float:
    assert got.shape == expected.shape
    return float(np.abs(got - expected).max() / np.abs(expected).max())


@pytest.mark.parametrize(("architecture", "kwargs", "size"), CASES, ids=[c[0] for c in CASES])
def test_timm_eva_both_ways(timm, tmp_path, architecture, kwargs, size):
    from timm.models._hub import save_for_hf

    reference = timm.create_model(architecture, num_classes=5, **TINY, **kwargs).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in reference.named_parameters():
            if parameter.ndim == 1 or name.endswith(("_token", "pos_embed")):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3 + 0.5)
            elif name.endswith("weight"):
                fan_in = parameter[0].numel()
                parameter.copy_(torch.randn(parameter.shape, generator=generator) / fan_in**0.5)
    save_for_hf(reference, tmp_path / "timm", safe_serialization=True)
    model = js.models.from_pretrained(tmp_path / "timm")
    assert isinstance(model, EvaModel) and model.config.architecture == architecture

    images = np.random.default_rng(0).standard_normal((2, 3, *size)).astype(np.float32)
    with torch.no_grad():
        features = reference.forward_features(torch.from_numpy(images)).numpy()
        expected = reference.forward_head(torch.from_numpy(features)).numpy()
    got = js.jit(lambda m, x: m.forward_features(x))(model, jnp.asarray(images))
    assert _relative(np.asarray(got), features) < TOLERANCE
    assert _relative(np.asarray(model.forward_head(got)), expected) < TOLERANCE

    model.save_pretrained(tmp_path / "js")
    back = timm.create_model(f"local-dir:{tmp_path / 'js'}", pretrained=True).eval()
    with torch.no_grad():
        again = back(torch.from_numpy(images)).numpy()
    assert _relative(again, expected) < TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("architecture", list(EvaConfig.architectures))
def test_eva_architectures_match_timm(timm, architecture):
    """Every registered architecture (one block) has timm's parameters, shapes, pooling and
    default classes."""
    reference = timm.create_model(architecture, depth=1)
    config = EvaConfig(architecture=architecture, model_args={"depth": 1})
    model = EvaModel(config, rngs=js.Rngs(params=0))
    shapes = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    assert shapes == {name: tuple(value.shape) for name, value in reference.state_dict().items()}
    assert (config.global_pool, config.num_classes) == (
        reference.global_pool,
        reference.num_classes,
    )


def test_eva_clip_tower_config_matches_timm(timm):
    config = EvaConfig(architecture="eva02_base_patch16_clip_224")
    assert config.global_pool == "token" and config.arch_args()["scale_attn_inner"]
    reference = timm.create_model("eva02_base_patch16_clip_224", pretrained=False, depth=1)
    assert reference.global_pool == "token" and reference.patch_embed.patch_size == (16, 16)


def test_eva_config_refuses_unsupported_options():
    with pytest.raises(NotImplementedError, match="rope_type"):
        EvaConfig(architecture="eva02_tiny_patch14_224", model_args={"rope_type": "mixed"})
    config = EvaConfig(
        architecture="eva02_tiny_patch14_224",
        model_args={**TINY, "swiglu_mlp": False, "scale_mlp": True},
    )
    with pytest.raises(NotImplementedError, match="scale_mlp without swiglu_mlp"):
        EvaModel(config, rngs=js.Rngs(params=0))
