"""js.models.qwen3, olmo2, granite and smollm3 against transformers 5.23 (family_support's
harness): each family with its features on, loaded both ways and generating greedily."""

from __future__ import annotations

import json
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
from js.models import granite, olmo2, qwen3, smollm3  # noqa: E402

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SIZES = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
# initializer_range: weights large enough that the greedy tokens vary (at transformers' 0.02
# these tiny Qwen3, OLMo 2 and SmolLM3 models repeat one token: a weak check of decoding)
# name -> (transformers class, js class, config keys beyond SIZES)
CASES = {
    # layer 0 full, layer 1 within a window of 3; per-head q/k norms; biases on q, k, v, o
    "qwen3": (
        "Qwen3ForCausalLM",
        qwen3.Qwen3ForCausalLM,
        dict(
            num_hidden_layers=2,
            head_dim=16,
            attention_bias=True,
            use_sliding_window=True,
            sliding_window=3,
            max_window_layers=1,
            initializer_range=0.2,
        ),
    ),
    "olmo2": (
        "Olmo2ForCausalLM",
        olmo2.Olmo2ForCausalLM,
        dict(num_hidden_layers=2, initializer_range=0.1),
    ),
    "granite": (
        "GraniteForCausalLM",
        granite.GraniteForCausalLM,
        dict(
            num_hidden_layers=2,
            embedding_multiplier=12.0,
            residual_multiplier=0.22,
            attention_multiplier=0.1,
            logits_scaling=4.0,
        ),
    ),
    # layer 0 rotary and full, layer 1 without rotary and within a window of 3
    "smollm3": (
        "SmolLM3ForCausalLM",
        smollm3.SmolLM3ForCausalLM,
        dict(
            num_hidden_layers=2,
            no_rope_layers=[1, 0],
            use_sliding_window=True,
            sliding_window=3,
            pad_token_id=0,
            initializer_range=0.2,
        ),
    ),
}


case = case_fixture(CASES, SIZES)


def test_loads_both_ways(transformers, case, tmp_path):
    loads_and_saves(transformers, case, CASES, tmp_path)


def test_greedy_matches(case):
    greedy_case(case)


def test_base_model_architecture(tmp_path):
    """A base model's config.json names the family's XModel."""
    for name, (_, js_class, keys) in CASES.items():
        config = js_class.config_class(vocab_size=96, **{**SIZES, **keys})
        js_class.base_model_class(config, rngs=js.Rngs(params=0)).save_pretrained(tmp_path / name)
        written = json.loads((tmp_path / name / "config.json").read_text())
        assert written["architectures"] == [js_class.base_model_class.__name__]


@pytest.mark.parametrize("module", [qwen3, olmo2, granite, smollm3])
def test_config_defaults_match_transformers(transformers, module):
    config_class = next(iter(module.ARCHITECTURES.values())).config_class
    expected = getattr(transformers, config_class.__name__)().to_diff_dict()
    expected.pop("transformers_version")
    assert config_class().to_dict() == expected
    for name, cls in module.ARCHITECTURES.items():
        assert cls.__name__ == name and cls.config_class is config_class


def test_smollm3_no_rope_layers_need_one_entry_per_layer():
    config = smollm3.SmolLM3Config(num_hidden_layers=3, no_rope_layers=[1, 0], layer_types=None)
    with pytest.raises(ValueError, match="no_rope_layers has 2 entries for 3 layers"):
        config.layer_ropes()
