"""layout='torch': safetensors files written by PyTorch load into js, and the reverse."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import js
import js.nn as nn

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")
pytestmark = pytest.mark.torch
tnn = torch.nn


class TorchNet(tnn.Module):
    """Every layer whose PyTorch entries differ from js's, and two that share them."""

    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv2d(3, 8, 3, padding=1)
        self.bn = tnn.BatchNorm2d(8)
        self.up = tnn.ConvTranspose2d(8, 4, 2, stride=2)
        self.lstm = tnn.LSTM(4, 6, num_layers=2, batch_first=True)
        self.attn = tnn.MultiheadAttention(6, 2, batch_first=True)
        self.head = tnn.Linear(6, 5)

    def forward(self, x):
        h = self.up(torch.relu(self.bn(self.conv(x))))  # [B, 4, 2H, 2W]
        seq = h.flatten(2).transpose(1, 2)  # [B, T, 4]
        seq, _ = self.lstm(seq)  # [B, T, 6]
        seq = seq + self.attn(seq, seq, seq, need_weights=False)[0]
        return self.head(seq.mean(1))  # [B, 5]


class Net(js.Module):
    def __init__(self, rngs):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, rngs=rngs)
        self.bn = nn.BatchNorm2d(8)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2, rngs=rngs)
        self.lstm = nn.LSTM(4, 6, num_layers=2, rngs=rngs)
        self.attn = nn.MultiheadAttention(6, 2, rngs=rngs)
        self.head = nn.Linear(6, 5, rngs=rngs)

    def forward(self, x):
        h = self.up(jax.nn.relu(self.bn(self.conv(x))))  # [B, 4, 2H, 2W]
        seq = h.reshape(h.shape[0], h.shape[1], -1).swapaxes(1, 2)  # [B, T, 4]
        seq, _ = self.lstm(seq)  # [B, T, 6]
        seq = seq + self.attn(seq, seq, seq)
        return self.head(seq.mean(1))  # [B, 5]


X = np.random.default_rng(0).standard_normal((2, 3, 3, 3)).astype(np.float32)


def _torch_model() -> TorchNet:
    torch.manual_seed(0)
    model = TorchNet()
    with torch.no_grad():  # non-trivial BatchNorm terms and statistics
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.5, 0.5)
    model.train()(torch.randn(4, 3, 3, 3))
    return model.eval()


def _diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def test_a_file_torch_wrote_loads_and_matches_torch(tmp_path):
    t_model = _torch_model()
    st_torch.save_file(t_model.state_dict(), tmp_path / "torch.safetensors")
    model = Net(js.Rngs(params=0)).eval()
    keys = nn.load_weights(model, tmp_path / "torch.safetensors", layout="torch")
    assert keys == js.IncompatibleKeys([], [])
    with torch.no_grad():
        expected = t_model(torch.from_numpy(X)).numpy()
    assert _diff(model(X), expected) < 1e-5
    info = nn.weights_info(tmp_path / "torch.safetensors")
    assert info.layout is None and info.tensors["up.weight"] == ((8, 4, 2, 2), "F32")


def test_a_torch_file_loaded_in_the_js_layout_is_told_to_use_the_torch_layout(tmp_path):
    """It used to list 'bn.num_batches_tracked' as unexpected and suggest strict=False."""
    st_torch.save_file(_torch_model().state_dict(), tmp_path / "torch.safetensors")
    model = Net(js.Rngs(params=0)).eval()
    before = {key: np.asarray(value) for key, value in model.state_dict().items()}
    with pytest.raises(
        ValueError,
        match=r"looks like a PyTorch state dict: its names fit Net's PyTorch layout \(e\.g\. "
        r"'bn\.num_batches_tracked'\), not js's; nothing was loaded\. Fix: "
        r"load_weights\(model, path, layout='torch'\)",
    ):
        nn.load_weights(model, tmp_path / "torch.safetensors")
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key], err_msg=key)


def test_a_torch_layout_file_js_wrote_loads_strictly_into_torch(tmp_path):
    model = Net(js.Rngs(params=3))
    model(X)  # move the running statistics
    model.eval()
    path = tmp_path / "js.safetensors"
    nn.save_weights(model, path, layout="torch", metadata={"source": "js"})
    assert nn.weights_info(path).layout == "torch"
    t_model = TorchNet().eval()
    t_model.load_state_dict(st_torch.load_file(path), strict=True)
    with torch.no_grad():
        expected = t_model(torch.from_numpy(X)).numpy()
    assert _diff(model(X), expected) < 1e-5
    back = Net(js.Rngs(params=4))
    nn.load_weights(back, path, layout="torch")
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(back.state_dict()[key], value, err_msg=key)


def test_hugging_face_style_prefix_both_ways(tmp_path):
    class Wrapper(tnn.Module):  # a checkpoint that nests the module under 'model.'
        def __init__(self, inner):
            super().__init__()
            self.model, self.lm_head = inner, tnn.Linear(5, 2)

    t_model = _torch_model()
    st_torch.save_file(Wrapper(t_model).state_dict(), tmp_path / "hf.safetensors")
    model = Net(js.Rngs(params=0)).eval()
    keys = nn.load_weights(model, tmp_path / "hf.safetensors", layout="torch", prefix="model.")
    assert keys == js.IncompatibleKeys([], [])  # strict: the head outside the prefix is ignored
    assert sorted(keys.ignored_keys) == ["lm_head.bias", "lm_head.weight"]
    with torch.no_grad():
        expected = t_model(torch.from_numpy(X)).numpy()
    assert _diff(model(X), expected) < 1e-5
    nn.save_weights(model, tmp_path / "out.safetensors", layout="torch", prefix="model.")
    wrapper = Wrapper(TorchNet())
    missing, unexpected = wrapper.load_state_dict(
        st_torch.load_file(tmp_path / "out.safetensors"), strict=False
    )
    assert sorted(missing) == ["lm_head.bias", "lm_head.weight"] and unexpected == []


def test_torch_layout_load_is_all_or_nothing(tmp_path):
    state = dict(_torch_model().state_dict())
    state.pop("head.bias")
    state["conv.weight"] = torch.zeros(8, 3, 5, 5)
    st_torch.save_file(state, tmp_path / "bad.safetensors")
    model = Net(js.Rngs(params=0))
    before = model.state_dict()
    with pytest.raises(
        ValueError,
        match=r"(?s)missing keys: 'head\.bias'.*'conv\.weight': "
        r"expected \[8, 3, 3, 3\] float32, got \[8, 3, 5, 5\]",
    ):
        nn.load_weights(model, tmp_path / "bad.safetensors", layout="torch")
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])


def test_torch_save_pickles_are_refused(tmp_path):
    torch.save(_torch_model().state_dict(), tmp_path / "model.pt")
    with pytest.raises(ValueError, match=r"zip archive \(torch\.save's format\), not a safet"):
        nn.load_weights(Net(js.Rngs(params=0)), tmp_path / "model.pt", layout="torch")
