"""DINOv2 (with and without registers), CLIP and SigLIP, and ViT's ``interpolate_pos_encoding``,
against transformers 5.23: a perturbed tiny transformers model's folder loads into js with its
numbers (hidden states, pooled outputs, logits; images of another size than the config's where
the family resizes its positions), and the folder js saves loads back into transformers with
js's numbers."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from encoder_support import MASK, TOKENS, VOCAB, relative_error
from family_support import perturb
from llama_support import transformers_without_torchvision

import js
import js.models
from js.models._vision import _bicubic, resize_positions
from js.models.clip import CLIPTextModel, CLIPVisionModel
from js.models.dinov2 import Dinov2Model
from js.models.siglip import SiglipTextModel, SiglipVisionModel

torch = pytest.importorskip("torch")

TOL = 1e-4
VISION = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "image_size": 16,
    "patch_size": 8,
}
DINO = {key: VISION[key] for key in VISION if key != "intermediate_size"}  # mlp_ratio's
TEXT = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 16,
    "bos_token_id": 0,
    "eos_token_id": 3,
}
PIXELS = np.random.default_rng(0).normal(size=(2, 3, 16, 16)).astype(np.float32)
WIDE = np.random.default_rng(1).normal(size=(2, 3, 24, 40)).astype(np.float32)  # 3 x 5 patches
IDS = np.where(MASK == 1, TOKENS, 1)  # right-padded with CLIP's pad id 1
IDS[[0, 1, 2], MASK.sum(1) - 1] = 3  # each row ends in eos_token_id 3
TEXT_IN = {"input_ids": IDS, "attention_mask": MASK}
BASE_OUT = ("last_hidden_state", "pooler_output")
DUAL_OUT = ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds")


def _reference(hf_class: str, config: dict[str, Any], folder) -> Any:
    """A random ``transformers.<hf_class>`` of ``config``, every 1-D weight perturbed, and its
    register tokens and CLIP's (0-D) ``logit_scale`` moved off their initial values, saved."""
    with transformers_without_torchvision() as transformers:
        cls = getattr(transformers, hf_class)
    torch.manual_seed(0)
    model = cls(cls.config_class(**config)).eval()
    perturb(model)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "register_tokens" in name or name == "logit_scale":
                parameter.add_(torch.randn(parameter.shape) + 0.5)
    model.save_pretrained(folder)
    return model


def _torch_outputs(model: Any, inputs: dict[str, Any], names: tuple[str, ...]) -> list:
    with torch.no_grad():
        out = model(
            **{k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        )
    return [getattr(out, name).numpy() for name in names if getattr(out, name) is not None]


def _js_outputs(model: Any, inputs: dict[str, Any]) -> list:
    out = model(
        **{k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    )
    return [np.asarray(x) for x in (out if isinstance(out, tuple) else (out,)) if x is not None]


def _both_ways(reference: Any, folder, out, inputs: dict[str, Any], names: tuple[str, ...]):
    """(js from transformers' folder against transformers, transformers from js's folder
    against js), nothing missing, unexpected or ignored either way."""
    model = js.models.from_pretrained(folder)
    assert type(model).__name__ == type(reference).__name__, type(model)
    info = js.models.loading_info(model)
    assert not (info.missing_keys or info.unexpected_keys or info.ignored_keys), info
    ours = _js_outputs(model, inputs)
    there = relative_error(ours, _torch_outputs(reference, inputs, names))
    model.save_pretrained(out)
    back, loaded = type(reference).from_pretrained(out, output_loading_info=True)
    assert not (loaded["missing_keys"] or loaded["unexpected_keys"]), loaded
    return there, relative_error(_torch_outputs(back.eval(), inputs, names), ours)


CLIP_DUAL = {"text_config": {**TEXT, "eos_token_id": 2}, "vision_config": VISION}
CASES = {  # transformers class -> (config, inputs, outputs); DINOv2 at another image size
    "Dinov2Model": ({**DINO, "use_swiglu_ffn": True}, {"pixel_values": WIDE}, BASE_OUT),
    "Dinov2ForImageClassification": (
        {**DINO, "num_labels": 3},
        {"pixel_values": PIXELS},
        ("logits",),
    ),
    "Dinov2WithRegistersModel": (DINO, {"pixel_values": WIDE}, BASE_OUT),
    "Dinov2WithRegistersForImageClassification": (
        {**DINO, "num_register_tokens": 2, "num_labels": 3},
        {"pixel_values": WIDE},
        ("logits",),
    ),
    "CLIPVisionModel": (VISION, {"pixel_values": WIDE, "interpolate_pos_encoding": True}, BASE_OUT),
    "CLIPTextModel": (TEXT, TEXT_IN, BASE_OUT),
    "CLIPModel": (
        {**CLIP_DUAL, "projection_dim": 16},
        {**TEXT_IN, "pixel_values": PIXELS},
        DUAL_OUT,
    ),
    "SiglipVisionModel": (
        VISION,
        {"pixel_values": WIDE, "interpolate_pos_encoding": True},
        BASE_OUT,
    ),
    "SiglipTextModel": ({**TEXT, "projection_size": 24}, TEXT_IN, BASE_OUT),
    "SiglipModel": (
        {"text_config": TEXT, "vision_config": VISION},
        {**TEXT_IN, "pixel_values": PIXELS},
        DUAL_OUT,
    ),
}


@pytest.mark.parametrize("hf_class", list(CASES))
def test_loads_both_ways(hf_class, tmp_path):
    config, inputs, names = CASES[hf_class]
    reference = _reference(hf_class, config, tmp_path / "hf")
    there, back = _both_ways(reference, tmp_path / "hf", tmp_path / "js", inputs, names)
    assert there < TOL, there
    assert back < TOL, back


def test_clip_logits_match_transformers(tmp_path):
    """``CLIPModel`` one way (the way back waits on the 0-D save above)."""
    config, inputs, names = CASES["CLIPModel"]
    reference = _reference("CLIPModel", config, tmp_path)
    got = _js_outputs(js.models.from_pretrained(tmp_path), inputs)
    assert relative_error(got, _torch_outputs(reference, inputs, names)) < TOL


def test_vit_interpolates_positions(tmp_path):
    reference = _reference("ViTModel", VISION, tmp_path)
    model = js.models.from_pretrained(tmp_path)
    inputs = {"pixel_values": WIDE, "interpolate_pos_encoding": True}
    got, expected = _js_outputs(model, inputs), _torch_outputs(reference, inputs, BASE_OUT)
    assert relative_error(got, expected) < TOL


def test_a_tower_loads_from_its_dual_models_folder(tmp_path):
    """transformers' rule: the tower's sub-config and the weights under its prefix."""
    reference = _reference("SiglipModel", CASES["SiglipModel"][0], tmp_path)
    tower = SiglipVisionModel.from_pretrained(tmp_path)
    assert js.models.loading_info(tower).ignored_keys[0].startswith("logit_bias")
    expected = _torch_outputs(reference.vision_model, {"pixel_values": PIXELS}, BASE_OUT)
    assert relative_error(_js_outputs(tower, {"pixel_values": PIXELS}), expected) < TOL


@pytest.mark.parametrize("antialias", [False, True])
def test_positions_resize_as_torch_bicubic(antialias):
    """Growing and shrinking, each axis on its own: PyTorch's ``F.interpolate`` bicubic."""
    table = np.random.default_rng(2).normal(size=(1, 1 + 4 * 6, 8)).astype(np.float32)
    grid = torch.tensor(table[:, 1:]).reshape(1, 4, 6, 8).permute(0, 3, 1, 2)
    for size in [(7, 3), (2, 9), (4, 6)]:
        expected = torch.nn.functional.interpolate(
            grid, size=size, mode="bicubic", align_corners=False, antialias=antialias
        )
        expected = expected.permute(0, 2, 3, 1).reshape(1, -1, 8).numpy()
        got = resize_positions(jnp.asarray(table), (4, 6), size, leading=1, antialias=antialias)
        assert np.array_equal(got[:, :1], table[:, :1])
        assert relative_error(got[:, 1:], expected) < 1e-6
    assert _bicubic(5, 5, antialias).tolist() == np.eye(5).tolist()


@pytest.mark.parametrize(
    ("cls", "config", "inputs", "match"),
    [
        (Dinov2Model, DINO, (np.ones((1, 16, 16, 3)),), r"\[batch, 3, height, width\], a patch"),
        (Dinov2Model, DINO, (np.ones((1, 3, 4, 16)),), r"got \[1, 3, 4, 16\]"),
        (CLIPVisionModel, VISION, (np.ones((1, 3, 8, 8)),), r"must be \[batch, 3, 16, 16\]"),
        (CLIPTextModel, TEXT, (np.ones((1, 17), int),), "more than max_position_embeddings=16"),
        (SiglipTextModel, TEXT, (IDS, MASK[:2]), r"attention_mask must be \[batch, seq_len\]"),
    ],
)
def test_bad_inputs_are_refused(cls, config, inputs, match):
    model = cls(cls.config_class(**config), rngs=js.Rngs(params=0)).eval()
    with pytest.raises(ValueError, match=match):
        model(*map(jnp.asarray, inputs))
