"""js.models.phi and gpt_neox against transformers 5.23 (family_support's harness): Phi with
partial rotary positions and q/k LayerNorms, GPT-NeoX with parallel and sequential residuals,
loaded both ways and generating greedily; their configs' rotary keys read as transformers
reads them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from family_support import (  # noqa: E402
    case_fixture,
    greedy_case,
    loads_and_saves,
)

import js.models  # noqa: E402
from js.models import gpt_neox, phi  # noqa: E402

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

# initializer_range 0.5: weights large enough that greedy tokens vary (at transformers' 0.02
# the perturbed biases decide, and every step repeats one token)
SIZES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    initializer_range=0.5,
)
# name -> (transformers class, js class, config keys beyond SIZES)
CASES = {
    # grouped-query attention, half of each head rotates, LayerNorms over q and k per head
    "phi": (
        "PhiForCausalLM",
        phi.PhiForCausalLM,
        dict(num_key_value_heads=2, partial_rotary_factor=0.5, qk_layernorm=True, rope_theta=1e3),
    ),
    # a quarter of each head rotates; attn and MLP side by side; embed_out untied
    "gpt_neox_parallel": (
        "GPTNeoXForCausalLM",
        gpt_neox.GPTNeoXForCausalLM,
        dict(use_parallel_residual=True, rotary_pct=0.25, rotary_emb_base=1000),
    ),
    # half of each head rotates; MLP after attention; embed_out tied to embed_in
    "gpt_neox_sequential": (
        "GPTNeoXForCausalLM",
        gpt_neox.GPTNeoXForCausalLM,
        dict(use_parallel_residual=False, rotary_pct=0.5, tie_word_embeddings=True),
    ),
}


case = case_fixture(CASES, SIZES)


def test_loads_both_ways(transformers, case, tmp_path):
    written = loads_and_saves(transformers, case, CASES, tmp_path)
    _, reference_model, _ = case
    assert written["rope_parameters"] == reference_model.config.rope_parameters


def test_greedy_matches(case):
    tokens = greedy_case(case)
    assert len(set(tokens[:, 7:].ravel().tolist())) > 5  # not one repeated token


@pytest.mark.parametrize("module", [phi, gpt_neox])
def test_config_defaults_match_transformers(transformers, module):
    config_class = next(iter(module.ARCHITECTURES.values())).config_class
    expected = getattr(transformers, config_class.__name__)().to_diff_dict()
    expected.pop("transformers_version")
    assert config_class().to_dict() == expected
    for name, cls in module.ARCHITECTURES.items():
        assert cls.__name__ == name and cls.config_class is config_class


@pytest.mark.parametrize(
    ("module", "keys"),
    [
        # phi-2's config.json: the rotary keys at the top level
        (phi, dict(partial_rotary_factor=0.4, rope_theta=1e4, rope_scaling=None)),
        # rope_parameters wins over the top-level key, as in transformers
        (phi, dict(partial_rotary_factor=0.4, rope_parameters={"partial_rotary_factor": 0.25})),
        # Pythia's config.json
        (gpt_neox, dict(rotary_pct=0.25, rotary_emb_base=10000, rope_scaling=None)),
        (gpt_neox, dict(rotary_pct=1.0, rotary_emb_base=5e5)),
    ],
)
def test_hub_rotary_keys(transformers, module, keys):
    """Hub files' rotary keys end up in rope_parameters (and leave the config) as
    transformers 5.23 reads them."""
    config_class = next(iter(module.ARCHITECTURES.values())).config_class
    expected = getattr(transformers, config_class.__name__)(**keys).to_diff_dict()
    expected.pop("transformers_version")
    assert config_class(**keys).to_dict() == expected


def test_gpt_neox_older_file_names(tmp_path):
    """A head saved as lm_head (transformers 5's module name) and the buffers of older files
    (attention.bias, masked_bias, rotary_emb.inv_freq) load; embed_out is written back."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    config = gpt_neox.GPTNeoXConfig(vocab_size=96, pad_token_id=1, **SIZES)
    model = gpt_neox.GPTNeoXForCausalLM(config, rngs=js.Rngs(params=0))
    assert model.gpt_neox.embed_in.padding_idx is None  # as transformers' embed_in
    model.save_pretrained(tmp_path / "js")
    weights = load_file(tmp_path / "js" / "model.safetensors")
    weights["lm_head.weight"] = weights.pop("embed_out.weight")
    for i in range(2):
        prefix = f"gpt_neox.layers.{i}.attention."
        weights[prefix + "bias"] = np.tril(np.ones((1, 1, 8, 8), bool))
        weights[prefix + "masked_bias"] = np.array(-1e9, np.float32)
        weights[prefix + "rotary_emb.inv_freq"] = np.ones(2, np.float32)
    save_file(weights, tmp_path / "js" / "model.safetensors")
    loaded = js.models.from_pretrained(tmp_path / "js")
    assert np.array_equal(loaded.embed_out.weight.value, model.embed_out.weight.value)
    loaded.save_pretrained(tmp_path / "back")
    assert "embed_out.weight" in load_file(tmp_path / "back" / "model.safetensors")
