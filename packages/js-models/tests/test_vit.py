"""ViT against transformers 5.23: folders saved by transformers (the files' older module names)
load and give its numbers (hidden state, pooled output, classifier logits); folders js saves
load back into transformers; files in transformers 5's module names load through key_mapping;
a classifier's folder loads into the base model."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.torch
from bertvit_support import PIXELS, VIT_TINY, rel, transformers, vit_outputs, vit_reference

import js
import js.models
from js.models.vit import ViTConfig, ViTForImageClassification, ViTModel

pytest.importorskip("torch")
TOL = 1e-5


@pytest.fixture(scope="module")
def classifier_folder(tmp_path_factory):
    ref = vit_reference(num_labels=5)
    folder = tmp_path_factory.mktemp("vit_cls")
    ref.save_pretrained(str(folder))
    return ref, folder


def test_classifier_folder_matches_transformers(classifier_folder):
    ref, folder = classifier_folder
    model = js.models.from_pretrained(folder)
    assert type(model) is ViTForImageClassification and model.config.num_labels == 5
    logits = model(jnp.asarray(PIXELS))
    assert logits.shape == (2, 5)
    assert rel(logits, vit_outputs(ref).logits) < TOL
    compiled = js.jit(lambda model, pixels: model(pixels))(model, jnp.asarray(PIXELS))
    assert rel(compiled, vit_outputs(ref).logits) < TOL


def test_base_model_hidden_state_and_pooled_output(tmp_path):
    ref = vit_reference("ViTModel", pooler_output_size=24, pooler_act="gelu_new")
    ref.save_pretrained(str(tmp_path))
    model = ViTModel.from_pretrained(tmp_path)
    out = vit_outputs(ref)
    hidden, pooled = model(jnp.asarray(PIXELS))
    assert hidden.shape == (2, 17, 32) and pooled.shape == (2, 24)
    assert rel(hidden, out.last_hidden_state) < TOL
    assert rel(pooled, out.pooler_output) < TOL


@pytest.mark.parametrize("cls", [ViTForImageClassification, ViTModel])
def test_js_folder_loads_into_transformers(cls, tmp_path):
    tf = transformers()
    model = cls(ViTConfig(**VIT_TINY, num_labels=3), rngs=js.Rngs(params=1))
    noise = np.random.default_rng(1)
    state = model.state_dict()
    model.load_state_dict(
        {k: v + noise.normal(size=v.shape).astype(v.dtype) * 0.3 for k, v in state.items()}
    )
    model.eval().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architectures"] == [cls.__name__] and saved["model_type"] == "vit"
    ref, info = getattr(tf, cls.__name__).from_pretrained(str(tmp_path), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    out = vit_outputs(ref.eval())
    if cls is ViTModel:
        hidden, pooled = model(jnp.asarray(PIXELS))
        assert rel(hidden, out.last_hidden_state) < TOL and rel(pooled, out.pooler_output) < TOL
    else:
        assert rel(model(jnp.asarray(PIXELS)), out.logits) < TOL


def test_base_model_from_a_classifier_folder(classifier_folder):
    """The classifier has no pooler (transformers builds its ViT without one), so the base
    model's pooler is missing: an error naming it, or kept at its initial values."""
    ref, folder = classifier_folder
    with pytest.raises(ValueError, match="pooler.dense.weight"):
        ViTModel.from_pretrained(folder)
    model = ViTModel.from_pretrained(folder, strict=False)
    info = js.models.loading_info(model)
    assert info.ignored_keys == ["classifier.bias", "classifier.weight"]
    assert sorted(info.missing_keys) == ["pooler.dense.bias", "pooler.dense.weight"]
    hidden, _ = model(jnp.asarray(PIXELS))
    import torch

    with torch.no_grad():
        ref_hidden = ref.vit(pixel_values=torch.tensor(PIXELS)).last_hidden_state
    assert rel(hidden, ref_hidden) < TOL


def test_transformers_5_module_names_load_through_key_mapping(classifier_folder, tmp_path):
    """A file written from a transformers 5 model's own state_dict (``layers.N.attention.
    q_proj``, ``mlp.fc1``...), not converted back as save_pretrained does."""
    ref, folder = classifier_folder
    state = {k: v.contiguous() for k, v in ref.state_dict().items()}
    assert any(".q_proj." in k for k in state) and not any(".query." in k for k in state)
    safetensors.torch.save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    model = js.models.from_pretrained(tmp_path)
    assert rel(model(jnp.asarray(PIXELS)), vit_outputs(ref).logits) < TOL


def test_module_names_are_the_files_keys(classifier_folder):
    _, folder = classifier_folder
    model = ViTForImageClassification(ViTConfig(**VIT_TINY, num_labels=5), rngs=js.Rngs(params=0))
    keys = safetensors.torch.load_file(str(folder / "model.safetensors")).keys()
    assert sorted(model.state_dict()) == sorted(keys)
    assert "vit.encoder.layer.1.attention.attention.query.weight" in keys
    headless = ViTForImageClassification(
        ViTConfig(**VIT_TINY, num_labels=0), rngs=js.Rngs(params=0)
    ).eval()
    hidden, _ = headless.vit(jnp.asarray(PIXELS))
    assert np.array_equal(headless(jnp.asarray(PIXELS)), hidden[:, 0])


def test_rectangular_images(tmp_path):
    ref = vit_reference("ViTModel", image_size=[16, 8], patch_size=[4, 2])
    ref.save_pretrained(str(tmp_path))
    model = ViTModel.from_pretrained(tmp_path)
    pixels = PIXELS[:, :, :, :8]
    import torch

    with torch.no_grad():
        out = ref(pixel_values=torch.tensor(pixels))
    hidden, pooled = model(jnp.asarray(pixels))
    assert rel(hidden, out.last_hidden_state) < TOL and rel(pooled, out.pooler_output) < TOL


def test_bad_inputs_are_refused():
    model = ViTModel(ViTConfig(**VIT_TINY), rngs=js.Rngs(params=0)).eval()
    with pytest.raises(ValueError, match=r"pixel_values must be \[batch, 3, 16, 16\]"):
        model(jnp.ones((2, 16, 16, 3)))
    # another image size is refused unless the positions are interpolated
    # (test_vision_towers compares interpolate_pos_encoding=True with transformers)
    with pytest.raises(ValueError, match="pixel_values must be"):
        model(jnp.ones((1, 3, 24, 40)))
    patch = VIT_TINY["patch_size"]
    hidden = model(jnp.ones((1, 3, 24, 40)), interpolate_pos_encoding=True)[0]
    assert hidden.shape[1] == 1 + (24 // patch) * (40 // patch)


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        ({"num_attention_heads": 5}, ValueError, "not a multiple of num_attention_heads=5"),
        ({"pooler_act": "mish"}, ValueError, "pooler_act='mish' is not an activation"),
        ({"patch_size": [4, 4, 4]}, ValueError, "patch_size must be a positive int or a pair"),
    ],
)
def test_unsupported_configs_are_refused(overrides, error, match):
    with pytest.raises(error, match=match):
        ViTModel(ViTConfig(**{**VIT_TINY, **overrides}), rngs=js.Rngs(params=0))
