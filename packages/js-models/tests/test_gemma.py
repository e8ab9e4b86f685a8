"""js.models.gemma against transformers 5.23 (family_support's harness): Gemma (tied, head_dim
apart from hidden / heads), Gemma 2 (sandwich norms, windows of 3, both soft-caps) and Gemma 3
text (q/k norms, a rotary table per layer type), loaded both ways and generating greedily; a
Gemma 3 multimodal folder loading as its text model; configs as transformers reads them."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import jax.numpy as jnp
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from family_support import (  # noqa: E402
    IDS,
    MASK,
    VOCAB,
    case_fixture,
    greedy_case,
    js_logits,
    loads_and_saves,
    perturb,
    relative_error,
    torch_logits,
)

import js.models  # noqa: E402
from js.models import gemma  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

# eos_token_id None: transformers' min_new_tokens bans the eos token (Gemma's is 1) where js's
# generate(eos_token_id=[]) does not, which would part the greedy tokens
SIZES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    eos_token_id=None,
)
GEMMA3_TEXT = dict(
    **SIZES,
    num_hidden_layers=3,
    head_dim=16,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"],
    sliding_window=3,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
        "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0},
    },
    query_pre_attn_scalar=4,
    # transformers 5.23's Gemma 3 applies the final cap and not the attention one
    attn_logit_softcapping=1.0,
    final_logit_softcapping=2.0,
    initializer_range=0.05,
)
# initializer_range: weights large enough that the greedy tokens vary (at transformers' 0.02
# these tied models repeat their last token) and, with query_pre_attn_scalar, that Gemma 2's
# soft-caps matter (test_softcaps_matter)
# name -> (transformers class, js class, config keys)
CASES = {
    "gemma": (
        "GemmaForCausalLM",
        gemma.GemmaForCausalLM,
        dict(**SIZES, num_hidden_layers=2, head_dim=32, hidden_act="gelu", initializer_range=0.4),
    ),
    # layers 0, 2 within a window of 3; 1, 3 full
    "gemma2": (
        "Gemma2ForCausalLM",
        gemma.Gemma2ForCausalLM,
        dict(
            **SIZES,
            num_hidden_layers=4,
            head_dim=16,
            sliding_window=3,
            query_pre_attn_scalar=1,
            attn_logit_softcapping=1.0,
            final_logit_softcapping=2.0,
            tie_word_embeddings=False,
            initializer_range=0.05,
        ),
    ),
    "gemma3_text": ("Gemma3ForCausalLM", gemma.Gemma3ForCausalLM, GEMMA3_TEXT),
}


case = case_fixture(CASES)


def test_loads_both_ways(transformers, case, tmp_path):
    loads_and_saves(transformers, case, CASES, tmp_path)


def test_greedy_matches(case):
    greedy_case(case)


@pytest.mark.parametrize("case", ["gemma2"], indirect=True)
def test_softcaps_matter(case):
    """Gemma 2's caps change the logits (so the comparisons above check them)."""
    name, _, folder = case
    model = js.models.from_pretrained(folder)
    capped = js_logits(model)
    model.config.final_logit_softcapping = None
    uncapped = js_logits(model)
    for layer in model.model.layers:
        layer.self_attn.softcap = None
    neither = js_logits(model)
    print(
        name,
        {
            "final cap": relative_error(capped, uncapped),
            "attention cap": relative_error(uncapped, neither),
        },
    )
    assert relative_error(capped, uncapped) > 0.05 and relative_error(uncapped, neither) > 0.05


def test_multimodal_folder_loads_as_text_model(transformers, tmp_path):
    """A Gemma3ForConditionalGeneration folder (tiny SigLIP tower): Gemma3ForCausalLM of its
    text_config and language-model weights, the logits of the multimodal model on text (whose
    head transformers 5.23 does not soft-cap: the text config's final cap is dropped)."""
    torch.manual_seed(0)
    config = transformers.Gemma3Config(
        text_config={"vocab_size": VOCAB, **GEMMA3_TEXT},
        vision_config=dict(
            model_type="siglip_vision_model",
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=16,
            patch_size=4,
        ),
        mm_tokens_per_image=4,
    )
    multimodal = transformers.Gemma3ForConditionalGeneration(config).eval()
    perturb(multimodal)
    multimodal.save_pretrained(tmp_path / "hf")
    model = js.models.from_pretrained(tmp_path / "hf")
    assert type(model) is gemma.Gemma3ForCausalLM
    assert model.config.final_logit_softcapping is None
    ignored = js.models.loading_info(model).ignored_keys
    assert ignored and all(
        key.startswith(("vision_tower.", "multi_modal_projector.")) for key in ignored
    )
    expected = torch_logits(multimodal)
    there = relative_error(js_logits(model), expected)
    model.save_pretrained(tmp_path / "js")
    back = transformers.Gemma3ForCausalLM.from_pretrained(tmp_path / "js").eval()
    back_error = relative_error(torch_logits(back), expected)
    print(
        "gemma3 multimodal",
        {"js from transformers": there, "transformers text from js": back_error},
    )
    assert there < 1e-4 and back_error < 1e-4


@pytest.mark.parametrize("name", ["GemmaConfig", "Gemma2Config", "Gemma3TextConfig"])
def test_config_defaults_match_transformers(transformers, name):
    expected = getattr(transformers, name)().to_diff_dict()
    expected.pop("transformers_version")
    assert getattr(gemma, name)().to_dict() == expected


def test_gemma3_hub_style_config(transformers):
    """Older Gemma 3 files: rope_theta, rope_local_base_freq, rope_scaling and
    sliding_window_pattern, read as transformers reads them."""
    keys = dict(
        num_hidden_layers=8,
        rope_theta=5e5,
        rope_local_base_freq=2e3,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        sliding_window_pattern=4,
    )
    expected = transformers.Gemma3TextConfig(**keys).to_diff_dict()
    expected.pop("transformers_version")
    assert gemma.Gemma3TextConfig(**keys).to_dict() == expected


def test_default_class_builds_each_family(case, tmp_path):
    """A folder without "architectures" reaches GemmaForCausalLM (the family default), which
    builds the blocks of the file's model_type."""
    name, reference_model, folder = case
    shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
    written = json.loads((tmp_path / "config.json").read_text())
    del written["architectures"]
    (tmp_path / "config.json").write_text(json.dumps(written))
    model = js.models.from_pretrained(tmp_path)
    assert type(model) is gemma.GemmaForCausalLM
    assert type(model.config) is CASES[name][1].config_class
    assert relative_error(js_logits(model), torch_logits(reference_model)) < 1e-4


def test_inputs_embeds_are_not_scaled(case):
    """transformers scales the looked-up embeddings only: inputs_embeds enter as given."""
    _, _, folder = case
    decoder = js.models.from_pretrained(folder).model
    ids, mask = jnp.asarray(IDS), jnp.asarray(MASK)
    embeds = decoder.embed_tokens(ids) * jnp.float32(decoder.config.hidden_size**0.5)
    assert (
        relative_error(
            decoder(inputs_embeds=embeds, attention_mask=mask), decoder(ids, attention_mask=mask)
        )
        == 0
    )
