"""Non-persistent buffers stay out of weight files and checkpoints, and state_dict keys match
PyTorch's for the same module."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import js
import js.nn as nn
from js.nn import checkpoint


class Block(js.Module):
    def __init__(self, seed: int = 0):
        super().__init__()
        self.proj = nn.Linear(4, 4, rngs=js.Rngs(params=seed))
        self.norm = nn.BatchNorm1d(4)
        self.register_buffer("inv_freq", jnp.arange(2.0) + seed, persistent=False)

    def forward(self, x):
        return self.norm(self.proj(x)) + self.inv_freq.value.sum()


class TorchBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.norm = torch.nn.BatchNorm1d(4)
        self.register_buffer("inv_freq", torch.arange(2.0), persistent=False)


def test_state_dict_keys_match_torch():
    expected = list(TorchBlock().state_dict())
    assert "inv_freq" not in expected
    assert list(nn.torch_state_dict(Block())) == expected
    # both list the non-persistent buffer among named_buffers
    assert "inv_freq" in dict(TorchBlock().named_buffers())
    assert "inv_freq" in dict(Block().named_buffers())


def test_torch_state_dict_loads_both_ways():
    reference = TorchBlock()
    model = Block(seed=5)
    nn.load_torch_state_dict(model, reference.state_dict())
    np.testing.assert_array_equal(model.inv_freq.value, [5.0, 6.0])  # the model's own
    back = TorchBlock()
    result = back.load_state_dict(
        {k: torch.from_numpy(v) for k, v in nn.torch_state_dict(model).items()}
    )
    assert not result.missing_keys and not result.unexpected_keys
    # a file holding the non-persistent buffer: torch and js both report it as unexpected
    extra = {**reference.state_dict(), "inv_freq": torch.zeros(2)}
    torch_result = TorchBlock().load_state_dict(extra, strict=False)
    js_result = nn.load_torch_state_dict(Block(), extra, strict=False)
    assert torch_result.unexpected_keys == js_result.unexpected_keys == ["inv_freq"]


@pytest.mark.parametrize("layout", ["js", "torch"])
def test_weight_file_round_trip(tmp_path, layout):
    path = tmp_path / "w.safetensors"
    nn.save_weights(Block(seed=1), path, layout=layout)
    assert "inv_freq" not in nn.weights_info(path).tensors
    model = Block(seed=2)
    assert nn.load_weights(model, path, layout=layout) == js.IncompatibleKeys([], [])
    np.testing.assert_array_equal(model.proj.weight.value, Block(seed=1).proj.weight.value)
    np.testing.assert_array_equal(model.inv_freq.value, [2.0, 3.0])


def test_checkpoint_round_trip_and_export(tmp_path):
    saved = Block(seed=1)
    checkpoint.save_checkpoint(tmp_path / "ckpt", {"model": saved, "epoch": 3})
    step, arrays = checkpoint.read_checkpoint(tmp_path / "ckpt", "model")
    assert step == 0 and "inv_freq" not in arrays
    assert sorted(arrays) == sorted(saved.state_dict())
    model = Block(seed=2)
    restored = checkpoint.load_checkpoint(tmp_path / "ckpt", {"model": model, "epoch": 0})
    assert restored["epoch"] == 3
    np.testing.assert_array_equal(model.proj.weight.value, saved.proj.weight.value)
    np.testing.assert_array_equal(model.inv_freq.value, [2.0, 3.0])  # left as the model has it
    nn.load_weights(model, tmp_path / "ckpt")
    np.testing.assert_array_equal(model.inv_freq.value, [2.0, 3.0])
    nn.export_weights(tmp_path / "ckpt", tmp_path / "w.safetensors")
    assert "inv_freq" not in nn.weights_info(tmp_path / "w.safetensors").tensors
