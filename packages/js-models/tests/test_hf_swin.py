"""transformers' Swin (``model_type`` ``"swin"``) both ways: transformers' folders load into
js.models with transformers' outputs, and the folders js writes load back in transformers with
js's outputs.

Each reference is random-initialised with every 1-D weight perturbed (``family_support.perturb``)
and the tables transformers initialises to zeros (relative position biases, absolute positions)
drawn at random, so a tensor dropped or misread cannot pass; outputs are compared in float32,
eval mode, to 1e-4 of the output scale on a batch of 2 images.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from family_support import perturb, relative_error

import js.models
from js.models.hf_swin import SwinConfig, SwinModel

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

TINY = {"patch_size": 4, "embed_dim": 16, "depths": [2, 2], "num_heads": [2, 4], "num_labels": 3}
# window 4 on an 8x8 grid: the odd blocks shifted, the 4x4 last stage one unshifted window;
# 36 pixels: a 9x9 grid padded to whole windows, merged to 5x5 (padded to even first).
CASES = {
    "SwinModel": ({"image_size": 32, "window_size": 4, "use_absolute_embeddings": True}, 32),
    "SwinForImageClassification": ({"image_size": 36, "window_size": 4}, 36),
}


def _reference(transformers, name: str, folder):
    torch.manual_seed(0)
    cls = getattr(transformers, name)
    keys, _ = CASES[name]
    model = cls(transformers.SwinConfig(**TINY, **keys)).eval()
    perturb(model)
    with torch.no_grad():
        for key, parameter in model.named_parameters():
            if key.endswith(("relative_position_bias_table", "position_embeddings")):
                parameter.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return model


def _pixels(size: int) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(2, 3, size, size)).astype(np.float32)


def _torch_outputs(model, pixels) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(torch.tensor(pixels))
    names = ("logits",) if hasattr(out, "logits") else ("last_hidden_state", "pooler_output")
    return [getattr(out, name).numpy() for name in names]


def _js_outputs(model, pixels) -> list[np.ndarray]:
    """The model's outputs, compiled whole (one XLA program builds faster than the ~150
    programs of an eager first call)."""
    out = js.jit(lambda model, pixels: model(pixels))(model, jnp.asarray(pixels))
    return [np.asarray(value) for value in (out if isinstance(out, tuple) else (out,))]


def _error(got, expected) -> float:
    return max(relative_error(g, e) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize("name", sorted(CASES))
def test_loads_and_saves_both_ways(transformers, name, tmp_path):
    reference = _reference(transformers, name, tmp_path / "theirs")
    pixels = _pixels(CASES[name][1])

    model = js.models.from_pretrained(tmp_path / "theirs")
    assert type(model).__name__ == name and type(model).__module__ == "js.models.hf_swin"
    ours = _js_outputs(model, pixels)
    there = _error(ours, _torch_outputs(reference, pixels))

    model.save_pretrained(tmp_path / "ours")
    back = getattr(transformers, name).from_pretrained(tmp_path / "ours").eval()
    back_error = _error(_torch_outputs(back, pixels), ours)
    print(name, {"js from transformers": there, "transformers from js": back_error})
    assert there < 1e-4 and back_error < 1e-4
    assert set(back.state_dict()) == set(reference.state_dict())


def test_transformers_5_module_names_and_old_index_buffers_load(transformers, tmp_path):
    """A file in transformers 5's module names (``attention.q_proj``, ``mlp.fc1``) with the
    ``relative_position_index`` buffers older files hold loads as the folder does."""
    from safetensors.torch import save_file

    reference = _reference(transformers, "SwinModel", tmp_path)
    weights = {key: value.contiguous() for key, value in reference.state_dict().items()}
    assert any(".attention.q_proj." in key for key in weights)
    index = "encoder.layers.0.blocks.0.attention.self.relative_position_index"
    weights[index] = torch.zeros(16 * 16, dtype=torch.int64)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    pixels = _pixels(32)
    got = _js_outputs(js.models.from_pretrained(tmp_path), pixels)
    assert _error(got, _torch_outputs(reference, pixels)) < 1e-4


def test_a_grid_smaller_than_the_window_is_refused():
    config = SwinConfig(**TINY, image_size=16, window_size=4)
    model = SwinModel(config, rngs=js.Rngs(params=0))
    with pytest.raises(
        NotImplementedError, match="would be 2x2 .from 4x4., smaller than window_size=4"
    ):
        model(jnp.zeros((1, 3, 16, 16)))


def test_heads_must_divide_each_stage():
    with pytest.raises(ValueError, match=r"stage 1 is 32 wide .* num_heads\[1\]=3"):
        SwinModel(SwinConfig(**{**TINY, "num_heads": [2, 3]}), rngs=js.Rngs(params=0))
    with pytest.raises(ValueError, match=r"num_heads \[2\] must give one head count per stage"):
        SwinConfig(**{**TINY, "num_heads": [2]}).validate()
