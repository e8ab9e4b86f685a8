"""GPT-2 against transformers 5.23: logits and hidden states both ways, padded batches, tied
weights, dtypes."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
from gpt2_support import IDS, MASK, TINY, reference, rel, save_reference, torch_outputs
from safetensors import safe_open

import js
import js.models
from js.models import GPT2Config, GPT2LMHeadModel, GPT2Model

pytest.importorskip("torch")
pytestmark = pytest.mark.torch
TOL = 1e-4


@pytest.fixture(scope="module")
def ref():
    return reference()


@pytest.fixture(scope="module")
def folder(ref, tmp_path_factory):
    return save_reference(ref, tmp_path_factory.mktemp("gpt2"))


def test_lm_head_matches_transformers_on_a_padded_batch(ref, folder):
    model = js.models.from_pretrained(folder)
    assert type(model) is GPT2LMHeadModel and not model.training
    logits, hidden = torch_outputs(ref)
    assert rel(model(input_ids=IDS, attention_mask=MASK), logits) < TOL
    assert rel(model.transformer(input_ids=IDS, attention_mask=MASK), hidden) < TOL
    # padded positions are finite (a fully masked row gets uniform weights, not NaN)
    assert np.isfinite(np.asarray(model(input_ids=IDS, attention_mask=MASK))).all()


def test_position_and_token_type_ids(ref, folder):
    model = js.models.from_pretrained(folder)
    positions = np.clip(np.cumsum(MASK, axis=1) - 1, 0, None)
    types = (np.arange(IDS.size).reshape(IDS.shape) % 3).astype(np.int64)
    logits, _ = torch_outputs(ref, position_ids=positions, token_type_ids=types)
    ours = model(input_ids=IDS, attention_mask=MASK, position_ids=positions, token_type_ids=types)
    assert rel(ours, logits) < TOL


def test_base_model_loads_the_head_folder(ref, folder):
    model = GPT2Model.from_pretrained(folder)
    _, hidden = torch_outputs(ref, mask=None)
    assert rel(model(input_ids=IDS), hidden, mask=None) < TOL


def test_tied_head_is_one_parameter(folder, tmp_path):
    model = js.models.from_pretrained(folder)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert len(list(model.named_parameters())) == len(model.state_dict()) - 1
    # the same traversal order as a model built eagerly: the tie's canonical path is wte's
    eager = GPT2LMHeadModel(model.config, rngs=js.Rngs(params=0))
    assert list(model.state_dict()) == list(eager.state_dict())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in eager.named_parameters()]
    model.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), framework="numpy") as file:
        keys = set(file.keys())
    assert "lm_head.weight" not in keys and "transformer.wte.weight" in keys


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, "bfloat16"])
def test_dtype_casts_floating_parameters(ref, folder, dtype):
    model = js.models.from_pretrained(folder, dtype=dtype)
    want = jnp.dtype(dtype)
    assert {p.value.dtype for _, p in model.named_parameters()} == {want}
    logits, _ = torch_outputs(ref)
    out = model(input_ids=IDS, attention_mask=MASK)
    assert out.dtype == want
    assert rel(out, logits) < 3e-2


def test_js_folder_loads_in_transformers(tmp_path):
    """js -> transformers: a random js model, perturbed, saved and read by AutoModelForCausalLM."""
    import torch
    from gpt2_support import transformers

    config = GPT2Config(**TINY)
    model = GPT2LMHeadModel(config, rngs=js.Rngs(params=1))
    rng = np.random.default_rng(0)
    for name, param in model.named_parameters():
        if name.endswith("bias") or ".ln_" in name:
            param.value = param.value + rng.normal(0, 0.2, param.value.shape).astype(np.float32)
    model.eval().save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), framework="numpy") as file:
        assert file.metadata() == {"format": "pt"}
        keys = set(file.keys())
    assert "lm_head.weight" not in keys and "transformer.wte.weight" in keys
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architectures"] == ["GPT2LMHeadModel"] and saved["model_type"] == "gpt2"
    theirs = transformers().AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
    logits, hidden = torch_outputs(theirs)
    assert rel(model(input_ids=IDS, attention_mask=MASK), logits) < TOL
    assert rel(model.transformer(input_ids=IDS, attention_mask=MASK), hidden) < TOL
    with torch.no_grad():  # the tie survived in transformers too
        assert theirs.lm_head.weight.data_ptr() == theirs.transformer.wte.weight.data_ptr()


def test_config_variants_match(tmp_path):
    """Untied head, other activation, unscaled/inverse-layer-scaled attention, n_inner, eps."""
    ref = reference(
        seed=3,
        activation_function="relu",
        scale_attn_weights=False,
        scale_attn_by_inverse_layer_idx=True,
        layer_norm_epsilon=1e-3,
        n_inner=48,
        tie_word_embeddings=False,
    )
    folder = save_reference(ref, tmp_path / "ref")
    model = js.models.from_pretrained(folder)
    assert model.lm_head.weight is not model.transformer.wte.weight
    logits, _ = torch_outputs(ref)
    assert rel(model(input_ids=IDS, attention_mask=MASK), logits) < TOL
    model.save_pretrained(tmp_path / "js")
    back = js.models.from_pretrained(tmp_path / "js")
    assert rel(back(input_ids=IDS, attention_mask=MASK), logits) < TOL


def test_config_aliases_and_defaults():
    config = GPT2Config(n_layer=3)
    assert config.num_hidden_layers == 3 and config.hidden_size == 768
    config.hidden_size = 64
    assert config.n_embd == 64 and "hidden_size" not in config.to_dict()
    with pytest.raises(AttributeError, match="no key"):
        config.not_a_key  # noqa: B018


def test_heads_must_divide_the_width():
    config = GPT2Config(n_embd=10, n_head=3, n_layer=1, vocab_size=20, n_positions=8)
    with pytest.raises(ValueError, match=r"n_embd=10 is not a multiple of n_head=3"):
        GPT2LMHeadModel(config, rngs=js.Rngs(params=0))


def test_attention_dropout_draws_in_training_only():
    config = GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=20, n_positions=8)
    config.attn_pdrop, config.resid_pdrop, config.embd_pdrop = 0.5, 0.0, 0.0
    model = GPT2LMHeadModel(config, rngs=js.Rngs(params=0))
    ids = jnp.array([[1, 2, 3, 4]])
    first = model(ids, rngs=js.Rngs(dropout=1))
    assert not np.allclose(first, model(ids, rngs=js.Rngs(dropout=2)))
    model.eval()
    np.testing.assert_array_equal(model(ids), model(ids))
