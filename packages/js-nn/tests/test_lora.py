"""js.nn.LoRALinear and js.nn.lora: the adapter's formula, merging, injection, freezing, and the
PEFT folder round trip with its refusals (the comparison with PEFT itself is js-models'
test_lora.py)."""

from __future__ import annotations

import json
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import js
from js import nn
from js.nn import lora


class Transposed(js.Module):
    """A linear layer stored ``[in, out]``, as GPT-2's Conv1D."""

    fan_in_fan_out: ClassVar[bool] = True

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        rng = np.random.default_rng(0)
        self.weight = js.Parameter(jnp.asarray(rng.standard_normal((n_in, n_out)), jnp.float32))
        self.bias = js.Parameter(jnp.asarray(rng.standard_normal(n_out), jnp.float32))

    def forward(self, x):
        return x @ self.weight.value + self.bias.value


class Block(js.Module):
    def __init__(self):
        super().__init__()
        rngs = js.Rngs(params=0)
        self.q_proj = nn.Linear(6, 6, rngs=rngs)
        self.v_proj = Transposed(6, 6)
        self.norm = nn.LayerNorm(6)

    def forward(self, x):
        return self.norm(self.q_proj(x) + self.v_proj(x))


class Net(js.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(6, 3, rngs=js.Rngs(params=1))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


X = jnp.asarray(np.random.default_rng(1).standard_normal((4, 6)), jnp.float32)


def _randomise_b(model: js.Module, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            param.value = jnp.asarray(rng.standard_normal(param.value.shape) * 0.3, jnp.float32)


@pytest.mark.parametrize("transposed", [False, True])
def test_forward_is_base_plus_scaled_update_and_merge_keeps_it(transposed):
    base = Transposed(6, 5) if transposed else nn.Linear(6, 5, rngs=js.Rngs(params=0))
    before = np.asarray(base(X))
    layer = nn.LoRALinear(base, r=3, alpha=6, rngs=js.Rngs(params=2))
    assert layer.lora_A.weight.value.shape == (3, 6) and layer.lora_B.weight.value.shape == (5, 3)
    assert not np.asarray(layer.lora_B.weight.value).any()  # a new adapter changes nothing
    assert np.abs(np.asarray(layer.lora_A.weight.value)).max() <= 1 / np.sqrt(6)
    np.testing.assert_allclose(np.asarray(layer(X)), before, rtol=1e-6)
    layer.lora_B.weight.value = jnp.ones((5, 3))
    a, b = np.asarray(layer.lora_A.weight.value), np.ones((5, 3))
    expected = before + (np.asarray(X) @ a.T @ b.T) * 2.0
    np.testing.assert_allclose(np.asarray(layer(X)), expected, rtol=1e-5, atol=1e-5)
    merged = layer.merged()
    assert type(merged) is type(base) and merged is base
    np.testing.assert_allclose(np.asarray(merged(X)), expected, rtol=1e-5, atol=1e-5)


def test_use_rslora_scales_by_the_root_of_r():
    base = nn.Linear(6, 5, rngs=js.Rngs(params=0))
    assert nn.LoRALinear(base, r=4, alpha=8, rngs=js.Rngs(params=0), use_rslora=True).scaling == 4.0


def test_inject_keeps_paths_freezes_the_base_and_merge_restores_types():
    model = Net()
    names = list(model.state_dict())
    paths = lora.inject(model, ("*.q_proj", "*.v_proj"), r=2, alpha=4)
    assert paths == ["layers.0.q_proj", "layers.1.q_proj", "layers.0.v_proj", "layers.1.v_proj"]
    # the base weights keep their names: old checkpoints and weight files still load
    assert set(names) < set(model.state_dict())
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == [
        f"layers.{i}.{p}_proj.lora_{m}.weight" for i in (0, 1) for p in "qv" for m in "AB"
    ]
    _randomise_b(model)
    out = np.asarray(model(X))
    assert sorted(lora.merge(model)) == sorted(paths)
    assert type(model.layers[0].q_proj) is nn.Linear and type(model.layers[1].v_proj) is Transposed
    assert list(model.state_dict()) == names
    np.testing.assert_allclose(np.asarray(model(X)), out, rtol=1e-5, atol=1e-5)


def test_frozen_base_parameters_get_no_gradient():
    model = Net()
    lora.inject(model, "*.q_proj", r=2, alpha=4)
    _randomise_b(model)

    def loss_fn(m, x):
        return jnp.sum(m(x) ** 2)

    loss, grads = js.value_and_grad(loss_fn)(model, X)
    got = sorted(".".join(map(str, path)) for path, _ in nnx.to_flat_state(grads))
    assert got == sorted(f"layers.{i}.q_proj.lora_{m}.weight" for i in (0, 1) for m in "AB")
    assert float(loss) > 0


def test_inject_refusals_change_nothing():
    model = Net()
    before = list(model.state_dict())
    with pytest.raises(ValueError, match=r"target '\*\.k_proj' matches no module.*layers\.0"):
        lora.inject(model, ["*.q_proj", "*.k_proj"])
    with pytest.raises(TypeError, match=r"'layers\.0\.norm', a LayerNorm, not a linear layer"):
        lora.inject(model, ["*.q_proj", "*.norm"])
    with pytest.raises(ValueError, match="dropout=0.1 needs random keys"):
        lora.inject(model, "*.q_proj", dropout=0.1)
    with pytest.raises(ValueError, match="r must be a positive integer"):
        lora.inject(model, "*.q_proj", r=0)
    assert list(model.state_dict()) == before
    assert all(p.requires_grad for _, p in model.named_parameters())
    lora.inject(model, "head")
    with pytest.raises(ValueError, match="'head' already has an adapter"):
        lora.inject(model, "head")


def test_dropout_in_training_only():
    model = Net()
    lora.inject(model, "head", r=2, dropout=0.5, rngs=js.Rngs(params=0, dropout=1))
    _randomise_b(model)
    train_out = np.asarray(model.train()(X))
    eval_out = np.asarray(model.eval()(X))
    assert not np.allclose(train_out, eval_out)
    plain = Net()
    lora.load_adapter(plain, _saved(model))
    np.testing.assert_allclose(np.asarray(plain.eval()(X)), eval_out, rtol=1e-6)
    with pytest.raises(ValueError, match="LoRALinear in training mode needs random keys"):
        plain.train()(X)


def _saved(model: js.Module, tmp=None) -> str:
    import tempfile

    folder = tempfile.mkdtemp() if tmp is None else str(tmp)
    lora.save_adapter(model, folder)
    return folder


def test_save_then_load_round_trip_in_peft_layout(tmp_path):
    model = Net()
    lora.inject(model, ["*.v_proj", "head"], r=2, alpha=8)
    _randomise_b(model)
    lora.save_adapter(model, tmp_path, task_type="CAUSAL_LM")
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 2 and config["lora_alpha"] == 8
    assert config["target_modules"] == ["head", "v_proj"] and config["fan_in_fan_out"] is True
    from safetensors.numpy import load_file

    keys = sorted(load_file(tmp_path / "adapter_model.safetensors"))
    assert keys[0] == "base_model.model.head.lora_A.weight" and len(keys) == 6
    fresh = Net()
    assert lora.load_adapter(fresh, tmp_path) == ["head", "layers.0.v_proj", "layers.1.v_proj"]
    np.testing.assert_allclose(np.asarray(fresh(X)), np.asarray(model(X)), rtol=1e-6)
    lora.load_adapter(fresh, tmp_path)  # onto existing adapters: same places, same ranks
    # a subset of one kind of layer: PEFT's suffix names would select more, so a regex
    only_first = Net()
    lora.inject(only_first, "layers.0.q_proj")
    lora.save_adapter(only_first, tmp_path / "one")
    regex = json.loads((tmp_path / "one" / "adapter_config.json").read_text())["target_modules"]
    assert regex == r"^(layers\.0\.q_proj)$"


def test_key_mapping_renames_both_ways(tmp_path):
    model = Net()
    lora.inject(model, "head")
    lora.save_adapter(model, tmp_path, key_mapping={r"^head$": "lm_head"})
    from safetensors.numpy import load_file

    assert "base_model.model.lm_head.lora_B.weight" in load_file(tmp_path / WEIGHTS)
    with pytest.raises(ValueError, match="'lm_head': no such module"):
        lora.load_adapter(Net(), tmp_path)
    assert lora.load_adapter(Net(), tmp_path, key_mapping={r"^lm_head$": "head"}) == ["head"]


WEIGHTS = "adapter_model.safetensors"


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"use_dora": True}, NotImplementedError, r"use_dora=True \(supported: False\)"),
        ({"rank_pattern": {"head": 4}}, NotImplementedError, "rank_pattern"),
        ({"bias": "all"}, NotImplementedError, r"bias='all' \(supported: 'none'\)"),
        ({"peft_type": "IA3"}, ValueError, "only peft_type 'LORA' loads"),
        ({"r": 3}, ValueError, r"needs lora_A \[r=3, in\]"),
    ],
)
def test_load_refuses_configs_it_cannot_honour(tmp_path, change, error, message):
    model = Net()
    lora.inject(model, "head", r=2)
    lora.save_adapter(model, tmp_path)
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    target = Net()
    before = list(target.state_dict())
    with pytest.raises(error, match=message):
        lora.load_adapter(target, tmp_path)
    assert list(target.state_dict()) == before


def test_load_refuses_keys_that_do_not_fit(tmp_path):
    from safetensors.numpy import load_file, save_file

    model = Net()
    lora.inject(model, "head", r=2)
    lora.save_adapter(model, tmp_path)
    tensors = load_file(tmp_path / WEIGHTS)
    save_file({**tensors, "base_model.model.head.lora_E.weight": np.zeros(2)}, tmp_path / WEIGHTS)
    with pytest.raises(KeyError, match=r"no LoRA weights.*lora_E"):
        lora.load_adapter(Net(), tmp_path)
    save_file(
        {k.replace("head", "layers.0.norm"): v for k, v in tensors.items()}, tmp_path / WEIGHTS
    )
    with pytest.raises(ValueError, match="'layers.0.norm': a LayerNorm, not a linear layer"):
        lora.load_adapter(Net(), tmp_path)
    other = Net()
    lora.inject(other, "*.q_proj", r=2)
    save_file(tensors, tmp_path / WEIGHTS)
    with pytest.raises(ValueError, match=r"the model's adapters are at \['layers.0.q_proj'"):
        lora.load_adapter(other, tmp_path)
    with pytest.raises(ValueError, match="the model has no adapters"):
        lora.save_adapter(Net(), tmp_path)
