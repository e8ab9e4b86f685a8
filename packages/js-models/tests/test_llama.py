"""js.models.llama against transformers 5.23: Llama (biases, linear and llama3 rope), Qwen2
(tied embeddings, sliding layers) and Mistral (sliding window shorter than the sequence), in
both directions, with padded batches, packed position ids and hub-style config files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from llama_support import (  # noqa: E402
    TINY,
    load_folder,
    load_js,
    perturb_js,
    perturb_torch,
    relative_error,
    save_js,
    transformers_without_torchvision,
)

import js  # noqa: E402
from js.models import llama  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
# name -> (transformers model class, js class, config keys beyond TINY)
CASES = {
    "llama_bias": (
        "LlamaForCausalLM",
        llama.LlamaForCausalLM,
        dict(attention_bias=True, mlp_bias=True),
    ),
    "llama_linear": (
        "LlamaForCausalLM",
        llama.LlamaForCausalLM,
        dict(rope_scaling={"rope_type": "linear", "factor": 2.0}, rope_theta=1000.0, head_dim=32),
    ),
    "llama3": (
        "LlamaForCausalLM",
        llama.LlamaForCausalLM,
        dict(rope_scaling=LLAMA3, rope_theta=5e5),
    ),
    "qwen2": (
        "Qwen2ForCausalLM",
        llama.Qwen2ForCausalLM,
        dict(
            tie_word_embeddings=True, use_sliding_window=True, sliding_window=3, max_window_layers=1
        ),
    ),
    "mistral": ("MistralForCausalLM", llama.MistralForCausalLM, dict(sliding_window=3)),
}
IDS = np.random.default_rng(0).integers(0, TINY["vocab_size"], (2, 7))  # L = 7 > window 3
PACKED = np.array([[0, 1, 2, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6]])  # two sequences in row 0
MASK = np.array([[1, 1, 1, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1, 1]])  # right and left padding


@pytest.fixture(scope="module")
def transformers():
    with transformers_without_torchvision() as module:
        yield module


def _reference(transformers, case: str, folder):
    """A perturbed tiny transformers model of ``case``, saved to ``folder``."""
    hf_name, _, keys = CASES[case]
    torch.manual_seed(0)
    cls = getattr(transformers, hf_name)
    model = cls(cls.config_class(**TINY, **keys)).eval()
    perturb_torch(model)
    model.save_pretrained(folder)
    return model


def _torch_outputs(model, ids, **kwargs):
    kwargs = {key: torch.tensor(value) for key, value in kwargs.items() if value is not None}
    with torch.no_grad():
        logits = model(torch.tensor(ids), **kwargs).logits.numpy()
        hidden = model.model(torch.tensor(ids), **kwargs).last_hidden_state.numpy()
    return logits, hidden


def _js_outputs(model, ids, **kwargs):
    kwargs = {key: jnp.asarray(value) for key, value in kwargs.items() if value is not None}
    return np.asarray(model(jnp.asarray(ids), **kwargs)), np.asarray(
        model.model(jnp.asarray(ids), **kwargs)
    )


@pytest.mark.parametrize("case", list(CASES))
def test_loads_transformers_folder(transformers, tmp_path, case):
    reference = _reference(transformers, case, tmp_path)
    model = load_js(CASES[case][1], tmp_path)
    figures = {}
    for label, inputs in {
        "plain": {},
        "padded": {"attention_mask": MASK},
        "padded+positions": {
            "attention_mask": MASK,
            "position_ids": np.maximum(MASK.cumsum(-1) - 1, 0),
        },
        "restarting positions": {"position_ids": PACKED},
    }.items():
        logits, hidden = _js_outputs(model, IDS, **inputs)
        ref_logits, ref_hidden = _torch_outputs(reference, IDS, **inputs)
        figures[label] = (relative_error(logits, ref_logits), relative_error(hidden, ref_hidden))
    print(case, figures)
    for label, (logits_error, hidden_error) in figures.items():
        assert logits_error < 1e-4 and hidden_error < 1e-4, (label, figures)


@pytest.mark.parametrize("case", list(CASES))
def test_transformers_loads_js_folder(transformers, tmp_path, case):
    hf_name, cls, keys = CASES[case]
    model = cls(cls.config_class(**TINY, **keys), rngs=js.Rngs(params=1)).eval()
    perturb_js(model)
    save_js(model, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["model_type"] == cls.config_class.model_type
    assert written["architectures"] == [hf_name]
    reference = getattr(transformers, hf_name).from_pretrained(tmp_path).eval()
    assert reference.config.rope_parameters == model.config.rope_parameters
    logits, hidden = _js_outputs(model, IDS, attention_mask=MASK)
    ref_logits, ref_hidden = _torch_outputs(reference, IDS, attention_mask=MASK)
    figures = relative_error(logits, ref_logits), relative_error(hidden, ref_hidden)
    print(case, figures)
    assert max(figures) < 1e-4, figures


def test_packed_sequences_without_cache(transformers, tmp_path):
    """With use_cache false, transformers keeps packed sequences (restarting position ids)
    apart; with its default use_cache=True it does not (both checked above and here)."""
    reference = _reference(transformers, "mistral", tmp_path)
    model = load_js(llama.MistralForCausalLM, tmp_path)
    model.config.use_cache = False
    with torch.no_grad():
        ref = reference(torch.tensor(IDS), position_ids=torch.tensor(PACKED), use_cache=False)
    logits = np.asarray(model(jnp.asarray(IDS), position_ids=jnp.asarray(PACKED)))
    assert relative_error(logits, ref.logits.numpy()) < 1e-4
    # the second sequence of row 0 sees nothing of the first: as if it were alone
    with torch.no_grad():
        alone = reference(torch.tensor(IDS[:1, 3:])).logits.numpy()
    assert relative_error(logits[0, 3:], alone[0]) < 1e-4


def test_base_model_from_causal_lm_folder(transformers, tmp_path):
    reference = _reference(transformers, "llama_bias", tmp_path)
    model = load_js(llama.LlamaModel, tmp_path)
    hidden = np.asarray(model(jnp.asarray(IDS), attention_mask=jnp.asarray(MASK)))
    assert relative_error(hidden, _torch_outputs(reference, IDS, attention_mask=MASK)[1]) < 1e-4


def test_hub_style_rope_scaling_folder(transformers, tmp_path):
    """An older hub config.json: rope_theta and rope_scaling (with "type") beside each other."""
    reference = _reference(transformers, "llama3", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["rope_parameters"]["rope_type"] == "llama3"  # what transformers 5.23 writes
    rope = config.pop("rope_parameters")
    config["rope_theta"] = rope.pop("rope_theta")
    config["rope_scaling"] = {"type": rope.pop("rope_type"), **rope}
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = load_js(llama.LlamaForCausalLM, tmp_path)
    hub = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    assert model.config.rope_parameters == hub.config.rope_parameters
    logits, _ = _js_outputs(model, IDS)
    assert relative_error(logits, _torch_outputs(reference, IDS)[0]) < 1e-4
    assert relative_error(logits, _torch_outputs(hub, IDS)[0]) < 1e-4
    written = model.config.to_dict()
    assert "rope_scaling" not in written and "rope_theta" not in written
    assert written["rope_parameters"]["rope_theta"] == 5e5


@pytest.mark.parametrize("name", ["LlamaConfig", "Qwen2Config", "MistralConfig"])
def test_config_defaults_match_transformers(transformers, name):
    expected = getattr(transformers, name)().to_diff_dict()
    expected.pop("transformers_version")
    assert getattr(llama, name)().to_dict() == expected


def test_family_default_class_builds_qwen2(transformers, tmp_path):
    """A Qwen2 folder without "architectures" reaches LlamaForCausalLM (the family default):
    it builds Qwen2's blocks, and saves as Qwen2ForCausalLM."""
    reference = _reference(transformers, "qwen2", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    del config["architectures"]
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    model = load_folder(tmp_path / "hf")
    assert type(model) is llama.LlamaForCausalLM and type(model.config) is llama.Qwen2Config
    logits, _ = _js_outputs(model, IDS, attention_mask=MASK)
    assert relative_error(logits, _torch_outputs(reference, IDS, attention_mask=MASK)[0]) < 1e-4
    save_js(model, tmp_path / "js")
    written = json.loads((tmp_path / "js" / "config.json").read_text())
    assert written["architectures"] == ["Qwen2ForCausalLM"] and written["model_type"] == "qwen2"


def test_jit_matches_eager():
    _, cls, keys = CASES["mistral"]
    model = cls(cls.config_class(**TINY, **keys), rngs=js.Rngs(params=0)).eval()
    ids, mask = jnp.asarray(IDS), jnp.asarray(MASK)
    step = js.jit(lambda model, ids, mask: model(ids, attention_mask=mask))
    assert relative_error(step(model, ids, mask), model(ids, attention_mask=mask)) < 1e-5


def test_tied_head_is_one_parameter():
    _, cls, keys = CASES["qwen2"]
    model = cls(cls.config_class(**TINY, **keys), rngs=js.Rngs(params=0))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert len(list(model.parameters())) == len(list(model.model.parameters()))


def test_registry_names():
    assert next(iter(llama.ARCHITECTURES)) == "LlamaForCausalLM"
    for name, cls in llama.ARCHITECTURES.items():
        assert cls.__name__ == name
        assert cls.base_model_prefix == "model"


def _tiny(cls=llama.LlamaConfig, **keys):
    return cls(**{**TINY, **keys})


@pytest.mark.parametrize(
    ("keys", "error", "match"),
    [
        (
            dict(rope_scaling={"rope_type": "su", "factor": 2.0}),
            NotImplementedError,
            "rope_type 'su' is not supported; supported: default, linear, dynamic, yarn, "
            "longrope, llama3",
        ),
        (dict(rope_parameters={"rope_type": "linear"}), KeyError, "needs 'factor'"),
        (dict(num_key_value_heads=3), ValueError, r"num_attention_heads \(4\) must be a multiple"),
        (dict(hidden_act="mish"), ValueError, "hidden_act='mish' is not an activation"),
    ],
)
def test_bad_configs(keys, error, match):
    with pytest.raises(error, match=match):
        llama.LlamaForCausalLM(_tiny(**keys), rngs=js.Rngs(params=0))


def test_qwen2_sliding_layers_need_a_window():
    config = _tiny(llama.Qwen2Config, layer_types=["sliding_attention"] * 2)
    with pytest.raises(ValueError, match="sliding_window is None"):
        llama.Qwen2Model(config, rngs=js.Rngs(params=0))


def test_bad_inputs():
    model = llama.LlamaModel(_tiny(), rngs=js.Rngs(params=0))
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        model()
    with pytest.raises(ValueError, match=r"attention_mask must be \[B, L\] = \[2, 7\]"):
        model(jnp.asarray(IDS), attention_mask=jnp.ones((2, 6)))
    with pytest.raises(
        ValueError, match=r"input_ids must be integer token ids \[B, L\].*Fix: add the batch axis"
    ):
        model(jnp.asarray(IDS[0]))
    with pytest.raises(ValueError, match=r"inputs_embeds must be floating \[B, L, hidden\]"):
        model(inputs_embeds=jnp.ones((7, 64)))
    with pytest.raises(ValueError, match=r"position_ids must be \[B, L\], \[1, L\] or \[L\]"):
        model(jnp.asarray(IDS), position_ids=jnp.arange(6))
    embeds = model.embed_tokens(jnp.asarray(IDS))
    assert relative_error(model(inputs_embeds=embeds), model(jnp.asarray(IDS))) == 0
