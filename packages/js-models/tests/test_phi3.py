"""js.models.phi3 against transformers 5.23 (family_support's harness): a Phi-3 with LongRoPE
over half of each head, whose generation outgrows the original context of 8 positions (the
step where transformers runs the whole sequence again), and one within a sliding window of 3;
loaded both ways and generating greedily."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from family_support import greedy_matches, loads_both_ways, reference  # noqa: E402

import js  # noqa: E402
import js.models  # noqa: E402
from js.models import phi3  # noqa: E402

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

# pad_token_id 0: Phi-3's default (32000) is no row of a 96-token embedding
SIZES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    pad_token_id=0,
)
FACTORS = np.random.default_rng(2)
CASES = {
    # prompts of 7 and 24 new tokens: short factors up to 8 positions, long ones past (the
    # attention factor from 64 / 8); rotary over 8 of the 16 features of a head. Weights of
    # std 0.3 (not 0.02): attention sharp enough that the rotation shows in the tokens (without
    # running the sequence again at 9 positions, 64 of the 72 new tokens differ)
    "longrope": dict(
        initializer_range=0.3,
        max_position_embeddings=64,
        original_max_position_embeddings=8,
        rope_scaling={
            "type": "longrope",
            "short_factor": list(map(float, FACTORS.uniform(1.0, 3.0, 4))),
            "long_factor": list(map(float, FACTORS.uniform(2.0, 8.0, 4))),
        },
        partial_rotary_factor=0.5,
    ),
    "sliding": dict(sliding_window=3, initializer_range=0.3),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, transformers, tmp_path_factory):
    """(name, transformers reference model, its folder)."""
    name = request.param
    folder = tmp_path_factory.mktemp(name)
    return (
        name,
        reference(transformers, "Phi3ForCausalLM", {**SIZES, **CASES[name]}, folder),
        folder,
    )


def test_loads_both_ways(transformers, case, tmp_path):
    name, reference_model, folder = case
    assert type(js.models.from_pretrained(folder)) is phi3.Phi3ForCausalLM
    there, back = loads_both_ways(transformers, reference_model, folder, tmp_path)
    print("phi3", name, {"js from transformers": there, "transformers from js": back})
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == ["Phi3ForCausalLM"] and written["model_type"] == "phi3"
    assert written["rope_parameters"] == reference_model.config.rope_parameters
    assert there < 1e-4 and back < 1e-4


def test_greedy_matches(case):
    name, reference_model, folder = case
    tokens = greedy_matches(js.models.from_pretrained(folder), reference_model)
    print("phi3", name, "greedy tokens match", tokens[:, -8:].tolist())


def test_config_defaults_match_transformers(transformers):
    expected = transformers.Phi3Config().to_diff_dict()
    expected.pop("transformers_version")
    assert phi3.Phi3Config().to_dict() == expected
    for name, cls in phi3.ARCHITECTURES.items():
        assert cls.__name__ == name and cls.config_class is phi3.Phi3Config


def test_base_model_architecture(tmp_path):
    config = phi3.Phi3Config(vocab_size=96, **SIZES)
    phi3.Phi3Model(config, rngs=js.Rngs(params=0)).save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == ["Phi3Model"]
