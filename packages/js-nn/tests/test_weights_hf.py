"""Loading files shaped like Hugging Face's: key_mapping, prefix, tied weights, plan_load."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import js
import js.nn as nn
from js.nn._keys import LoadPlan, compile_key_mapping, plan_load, rename_key


@pytest.fixture(autouse=True)
def _no_torchvision(monkeypatch):
    # The torchvision wheel here cannot be imported beside the CPU torch (FACTS.md), and
    # transformers imports it when it is installed: None in sys.modules reads as not installed.
    monkeypatch.setitem(sys.modules, "torchvision", None)


class Attention(js.Module):
    def __init__(self, rngs):
        super().__init__()
        self.q, self.k = nn.Linear(4, 4, rngs=rngs), nn.Linear(4, 4, rngs=rngs)


class Block(js.Module):
    def __init__(self, rngs):
        super().__init__()
        self.attn = Attention(rngs)
        self.norm = nn.LayerNorm(4)


class Encoder(js.Module):
    """A ViT-like trunk with js's names (blocks.N.attn.q) where HF's ViT has
    encoder.layer.N.attention.attention.query."""

    def __init__(self, rngs, depth=2):
        super().__init__()
        self.blocks = [Block(rngs) for _ in range(depth)]


HF_VIT = {
    r"encoder\.layer": "blocks",
    r"attention\.attention\.query": "attn.q",
    r"attention\.attention\.key": "attn.k",
    "layernorm_before": "norm",
}


def _vit_file(model: js.Module, head: bool = True) -> dict[str, np.ndarray]:
    """model's state under HF ViT's names, nested under 'vit.', with a classifier head."""
    sd = {}
    for path, value in model.state_dict().items():
        name = path.replace("blocks", "encoder.layer").replace(
            "attn.q", "attention.attention.query"
        )
        name = name.replace("attn.k", "attention.attention.key").replace("norm", "layernorm_before")
        sd["vit." + name] = value
    if head:
        sd["classifier.weight"] = np.ones((3, 4), np.float32)
        sd["classifier.bias"] = np.zeros(3, np.float32)
    return sd


def _values(model: js.Module) -> dict[str, np.ndarray]:
    return {key: np.array(value) for key, value in model.state_dict().items()}


def _assert_same(model: js.Module, expected: dict[str, np.ndarray]) -> None:
    got = _values(model)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def _save(sd: dict, path) -> str:
    nn.save_weights(sd, path)
    return str(path)


# -- key_mapping ----------------------------------------------------------------------------


def test_key_mapping_renames_vit_names_and_prefix_ignores_the_head(tmp_path):
    source, model = Encoder(js.Rngs(params=0)), Encoder(js.Rngs(params=1))
    path = _save(_vit_file(source), tmp_path / "vit.safetensors")
    keys = nn.load_weights(model, path, prefix="vit.", key_mapping=HF_VIT)  # strict
    assert keys == js.IncompatibleKeys([], [])
    assert keys.ignored_keys == ["classifier.bias", "classifier.weight"]
    _assert_same(model, _values(source))


def test_every_rule_applies_in_turn_as_transformers_5():
    # transformers 5.23 (core_model_loading.apply_renamings) runs every rule on the result of
    # the previous ones; 4.x stopped at the first rule that matched.
    rules = compile_key_mapping({"a": "b", "b": "c"})
    assert rename_key(rules, "a.weight") == "c.weight"
    assert rename_key(rules, "x.b.weight") == "x.c.weight"
    # re.search, the first match only, and a pattern ending in a letter ends on a name boundary
    rules = compile_key_mapping({"q": "query"})
    assert rename_key(rules, "attn.q.q.weight") == "attn.query.q.weight"
    assert rename_key(rules, "attn.qk.weight") == "attn.qk.weight"
    # '^' anchors, and \1 copies the pattern's group
    rules = compile_key_mapping({r"^(encoder|decoder)\.": r"model.\1.", "gamma": "weight"})
    assert rename_key(rules, "encoder.norm.gamma") == "model.encoder.norm.weight"
    assert rename_key(rules, "x.encoder.y") == "x.encoder.y"


def test_key_mapping_errors_name_the_rule_and_change_nothing(tmp_path):
    source, model = Encoder(js.Rngs(params=0)), Encoder(js.Rngs(params=1))
    path = _save(_vit_file(source), tmp_path / "vit.safetensors")
    before = _values(model)
    with pytest.raises(
        ValueError, match=r"key_mapping pattern 'encoder.\(layer' is not a valid regular expression"
    ):
        nn.load_weights(model, path, prefix="vit.", key_mapping={"encoder.(layer": "blocks"})
    with pytest.raises(ValueError, match=r"replacement 'blocks\.\\\\1' uses \\1, but pattern"):
        nn.load_weights(model, path, key_mapping={"layer": r"blocks.\1"})
    collide = {**HF_VIT, r"attention\.attention\.key": "attn.q"}
    with pytest.raises(
        ValueError,
        match=r"file keys 'vit\.encoder\.layer\.0\.attention\.attention\.key\.bias' and "
        r"'vit\.encoder\.layer\.0\.attention\.attention\.query\.bias' both become "
        r"'blocks\.0\.attn\.q\.bias'|file keys .*query\.bias' and .*key\.bias' both become",
    ):
        nn.load_weights(model, path, prefix="vit.", key_mapping=collide)
    with pytest.raises(TypeError, match=r"key_mapping must be a dict"):
        nn.load_weights(model, path, key_mapping=[("a", "b")])  # type: ignore[arg-type]
    _assert_same(model, before)


def test_key_mapping_matches_transformers_own_renaming():
    core = pytest.importorskip("transformers.core_model_loading")
    mappings = [
        HF_VIT,
        {"a": "b", "b": "c"},
        {"q": "query"},
        {r"^(encoder|decoder)\.": r"model.\1.", "*.gamma": "weight"},
        {"^vit.": "model.", r"layer\.(\d+)\.": r"blocks.\1."},
        {"language_model.model": "model.language_model", "lm_head": "language_model.lm_head"},
    ]
    keys = [
        "vit.encoder.layer.0.attention.attention.query.weight",
        "vit.encoder.layer.11.layernorm_before.bias",
        "a.weight",
        "x.b.weight",
        "attn.q.q.weight",
        "attn.qk.weight",
        "encoder.norm.gamma",
        "decoder.block.0.gamma",
        "x.encoder.y",
        "language_model.model.layers.0.mlp.weight",
        "language_model.lm_head.weight",
        "lm_head.weight",
    ]
    for mapping in mappings:
        renamings = [core.WeightRenaming(k, v) for k, v in mapping.items()]
        rules = compile_key_mapping(mapping)
        for key in keys:
            assert rename_key(rules, key) == core.apply_renamings(key, renamings), (mapping, key)


# -- prefix ---------------------------------------------------------------------------------


def test_strictness_still_applies_under_the_prefix(tmp_path):
    source, model = Encoder(js.Rngs(params=0)), Encoder(js.Rngs(params=1))
    sd = _vit_file(source)
    del sd["vit.encoder.layer.1.layernorm_before.weight"]
    sd["vit.pooler.dense.weight"] = np.zeros((4, 4), np.float32)
    path = _save(sd, tmp_path / "vit.safetensors")
    before = _values(model)
    with pytest.raises(
        ValueError,
        match=r"(?s)nothing was loaded.*missing keys: 'blocks\.1\.norm\.weight'.*"
        r"unexpected keys: 'vit\.pooler\.dense\.weight'",
    ):
        nn.load_weights(model, path, prefix="vit.", key_mapping=HF_VIT)
    _assert_same(model, before)
    keys = nn.load_weights(model, path, prefix="vit.", key_mapping=HF_VIT, strict=False)
    assert keys == (["blocks.1.norm.weight"], ["vit.pooler.dense.weight"])
    assert keys.ignored_keys == ["classifier.bias", "classifier.weight"]
    np.testing.assert_array_equal(
        model.blocks[0].attn.q.weight.value, source.blocks[0].attn.q.weight.value
    )
    with pytest.raises(KeyError, match=r"no tensor of .* starts with prefix 'bert\.' after"):
        nn.load_weights(model, path, prefix="bert.", key_mapping=HF_VIT)


# -- tied weights ---------------------------------------------------------------------------


class TinyGPT(js.Module):
    """GPT-2's layout: lm_head.weight is transformer.wte.weight (one Parameter, two paths)."""

    def __init__(self, rngs):
        super().__init__()
        self.transformer = js.Module()
        self.transformer.wte = nn.Embedding(10, 4, rngs=rngs)
        self.transformer.ln_f = nn.LayerNorm(4)
        self.lm_head = nn.Linear(4, 10, bias=False, rngs=rngs)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, ids):
        return self.lm_head(self.transformer.ln_f(self.transformer.wte(ids)))


def test_a_gpt2_style_file_without_lm_head_loads_strictly(tmp_path):
    source, model = TinyGPT(js.Rngs(params=0)), TinyGPT(js.Rngs(params=1))
    sd = source.state_dict()
    assert "lm_head.weight" in sd  # listed under both names, as torch lists them
    del sd["lm_head.weight"]  # as Hugging Face's GPT-2 file
    path = _save(sd, tmp_path / "gpt2.safetensors")
    plan = plan_load(model, nn.weights_info(path).tensors)
    assert plan.tied == {"lm_head.weight": "transformer.wte.weight"} and plan.missing == []
    assert nn.load_weights(model, path) == js.IncompatibleKeys([], [])
    _assert_same(model, _values(source))
    assert model.lm_head.weight is model.transformer.wte.weight
    ids = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(model(ids), source(ids))


def test_a_tied_parameter_given_twice_must_agree(tmp_path):
    source, model = TinyGPT(js.Rngs(params=0)), TinyGPT(js.Rngs(params=1))
    sd = source.state_dict()
    assert nn.load_weights(model, _save(sd, tmp_path / "equal.safetensors")) == ([], [])
    _assert_same(model, _values(source))
    fresh = TinyGPT(js.Rngs(params=2))
    before = _values(fresh)
    sd["lm_head.weight"] = sd["lm_head.weight"] * 2.0
    with pytest.raises(
        ValueError,
        match=r"tied entries that differ: 'transformer\.wte\.weight' and 'lm_head\.weight'",
    ):
        nn.load_weights(fresh, _save(sd, tmp_path / "differ.safetensors"))
    _assert_same(fresh, before)


def test_a_torch_model_with_tied_weights_saved_once_loads_strictly(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")

    class TorchGPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = torch.nn.Module()
            self.transformer.wte = torch.nn.Embedding(10, 4)
            self.transformer.ln_f = torch.nn.LayerNorm(4)
            self.lm_head = torch.nn.Linear(4, 10, bias=False)
            self.lm_head.weight = self.transformer.wte.weight

        def forward(self, ids):
            return self.lm_head(self.transformer.ln_f(self.transformer.wte(ids)))

    torch.manual_seed(0)
    t_model = TorchGPT()
    torch.nn.init.normal_(t_model.transformer.ln_f.weight)
    # torch's state_dict names both paths; save_model writes a shared tensor once
    assert list(t_model.state_dict()) == list(TinyGPT(js.Rngs(params=0)).state_dict())
    st_torch.save_model(t_model, str(tmp_path / "gpt.safetensors"))
    written = set(nn.weights_info(tmp_path / "gpt.safetensors").tensors)
    assert len(written & {"lm_head.weight", "transformer.wte.weight"}) == 1
    model = TinyGPT(js.Rngs(params=1))
    keys = nn.load_weights(model, tmp_path / "gpt.safetensors", layout="torch")
    assert keys == js.IncompatibleKeys([], [])
    ids = np.array([[1, 2, 3, 9]])
    with torch.no_grad():
        expected = t_model(torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(model(ids), expected, rtol=1e-5, atol=1e-6)
    # torch's own strict load_state_dict refuses that file; transformers ties after loading
    with pytest.raises(RuntimeError, match="Missing key"):
        TorchGPT().load_state_dict(st_torch.load_file(str(tmp_path / "gpt.safetensors")))


def test_hugging_face_gpt2_files_omit_the_tied_head_which_wte_supplies(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=10, n_positions=8, n_embd=4, n_layer=1, n_head=1, bos_token_id=0, eos_token_id=0
    )
    hf = transformers.GPT2LMHeadModel(config)
    hf.save_pretrained(tmp_path)
    written = nn.weights_info(tmp_path / "model.safetensors").tensors
    assert "lm_head.weight" not in written and "transformer.wte.weight" in written
    model = TinyGPT(js.Rngs(params=1))
    # TinyGPT holds only wte and ln_f of GPT-2's trunk: the blocks and wpe are unexpected
    keys = nn.load_weights(model, tmp_path / "model.safetensors", layout="torch", strict=False)
    assert keys.missing_keys == []  # lm_head.weight is supplied by transformer.wte.weight
    assert "transformer.h.0.attn.c_attn.weight" in keys.unexpected_keys
    np.testing.assert_array_equal(model.lm_head.weight.value, hf.lm_head.weight.detach().numpy())


# -- plan_load ------------------------------------------------------------------------------


def test_plan_load_resolves_names_without_reading_tensors():
    model = Encoder(js.Rngs(params=0), depth=1)
    file_keys = [*_vit_file(model), "vit.pooler.dense.weight"]
    file_keys.remove("vit.encoder.layer.0.attention.attention.key.bias")
    plan = plan_load(model, file_keys, prefix="vit.", key_mapping=HF_VIT)
    assert isinstance(plan, LoadPlan)
    assert plan.rename == {
        "vit.encoder.layer.0.attention.attention.query.weight": "blocks.0.attn.q.weight",
        "vit.encoder.layer.0.attention.attention.query.bias": "blocks.0.attn.q.bias",
        "vit.encoder.layer.0.attention.attention.key.weight": "blocks.0.attn.k.weight",
        "vit.encoder.layer.0.layernorm_before.weight": "blocks.0.norm.weight",
        "vit.encoder.layer.0.layernorm_before.bias": "blocks.0.norm.bias",
    }
    assert plan.missing == ["blocks.0.attn.k.bias"]
    assert plan.unexpected == ["vit.pooler.dense.weight"]
    assert plan.ignored == ["classifier.weight", "classifier.bias"]
    assert plan.tied == {} and plan.dropped == [] and plan.strict and plan.owner == "Encoder"
    with pytest.raises(ValueError, match=r"load_state_dict for Encoder failed; nothing"):
        plan.check()
    assert plan.incompatible_keys() == (["blocks.0.attn.k.bias"], ["vit.pooler.dense.weight"])
    assert plan.incompatible_keys().ignored_keys == plan.ignored
    lenient = plan_load(model, file_keys, prefix="vit.", key_mapping=HF_VIT, strict=False)
    lenient.check()  # missing and unexpected are not errors without strict
    with pytest.raises(ValueError, match=r"mismatched entries: 'x': expected"):
        lenient.check(mismatched=["'x': expected [4] float32, got [5] float32"])
    with pytest.raises(dataclasses_frozen_error()):
        plan.strict = False  # type: ignore[misc]


def dataclasses_frozen_error() -> type[Exception]:
    import dataclasses

    return dataclasses.FrozenInstanceError


def test_plan_load_for_torch_names_drops_what_js_does_not_keep():
    model = nn.Sequential(nn.Conv2d(1, 2, 3, rngs=js.Rngs(params=0)), nn.BatchNorm2d(2))
    file_keys = list(nn.torch_state_dict(model))
    assert "1.num_batches_tracked" in file_keys
    plan = plan_load(model, file_keys, layout="torch")
    assert plan.dropped == ["1.num_batches_tracked"] and plan.unexpected == []
    assert plan.missing == [] and "1.num_batches_tracked" not in plan.rename
    assert plan_load(model, file_keys).unexpected == ["1.num_batches_tracked"]  # js layout


def test_load_torch_state_dict_takes_prefix_and_key_mapping():
    model = nn.Sequential(nn.Linear(2, 3, rngs=js.Rngs(params=0)))
    sd = {
        "backbone.fc.weight": np.ones((3, 2), np.float32),
        "backbone.fc.bias": np.arange(3, dtype=np.float32),
        "head.weight": np.zeros((1, 3), np.float32),
    }
    keys = nn.load_torch_state_dict(model, sd, prefix="backbone.", key_mapping={"fc": "0"})
    assert keys == ([], []) and keys.ignored_keys == ["head.weight"]
    np.testing.assert_array_equal(model[0].bias.value, sd["backbone.fc.bias"])
