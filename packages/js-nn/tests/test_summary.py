"""js.nn.summary: one eager run, a row per module call, parameter counts that add up."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import js
import js.nn as nn


class Net(js.Module):
    def __init__(self, rngs):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 4, 3, rngs=rngs),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(4, 3, rngs=rngs)

    def forward(self, x):
        features = self.body(x)
        return self.head(features), features


def test_summary_tabulates_calls_shapes_and_counts(capsys):
    model = Net(js.Rngs(params=0))
    text = nn.summary(model, jnp.ones((2, 1, 8, 8)))
    assert capsys.readouterr().out.strip() == text.strip()
    lines = text.splitlines()
    assert lines[1].split() == ["Layer", "(type)", "Output", "shape", "Param", "#"]
    rows = {line.split()[0].rstrip(":"): line for line in lines if line.startswith(" ")}
    assert rows["body.0"].split() == ["body.0:", "Conv2d", "[2,", "4,", "6,", "6]", "40"]
    assert rows["body.1"].rstrip().endswith("8")  # BatchNorm2d: weight + bias
    assert "[2, 3], [2, 4]" in lines[3]  # the model's own row: both outputs
    assert rows["head"].split()[-1] == "15"
    assert "Total params: 63" in text  # 40 + 8 + 15
    assert "Trainable params: 63" in text and "Non-trainable params: 0" in text
    assert "Buffer elements: 8" in text


def test_summary_counts_frozen_parameters_apart():
    model = Net(js.Rngs(params=0))
    model.body.requires_grad_(False)
    text = nn.summary(model, jnp.ones((2, 1, 8, 8)))
    assert "Total params: 63" in text
    assert "Trainable params: 15" in text and "Non-trainable params: 48" in text


def test_summary_runs_on_hooks_and_removes_them():
    before = js.Module.__call__
    model = Net(js.Rngs(params=0))
    seen = []
    model.head.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    nn.summary(model, jnp.ones((2, 1, 8, 8)))
    assert js.Module.__call__ is before
    assert seen == [(2, 3)]  # the user's own hook ran too, and stays
    assert len(model.head._forward_hooks) == 1
    for module in model.modules():
        assert not module._forward_pre_hooks
        assert module is model.head or "_forward_hooks" not in vars(module)


def test_summary_removes_its_hooks_when_the_model_fails():
    model = _Noisy()
    try:
        nn.summary(model, jnp.ones((4, 3)), rngs=object())  # fails after BatchNorm ran
    except AttributeError:
        pass
    hooks = {"_forward_hooks", "_forward_pre_hooks"}
    assert all(not vars(m).keys() & hooks for m in model.modules())


def test_summary_rows_follow_calls_of_a_shared_module():
    relu = nn.ReLU()
    model = nn.Sequential(relu, nn.Linear(2, 2, rngs=js.Rngs(params=0)), relu)
    lines = nn.summary(model, jnp.ones((1, 2))).splitlines()
    assert [line.split()[0] for line in lines[4:7]] == ["0:", "1:", "0:"]


class _Noisy(js.Module):
    """BatchNorm (running statistics) and Dropout with the model's own Rngs, in training."""

    def __init__(self):
        super().__init__()
        self.bn, self.drop = nn.BatchNorm1d(3), nn.Dropout(0.5)
        self.rngs = js.Rngs(dropout=0)

    def forward(self, x, *, rngs=None):
        y = self.drop(self.bn(x), rngs=self.rngs)
        return y if rngs is None else y + jax.random.uniform(rngs.next("noise"))


def test_summary_has_no_side_effects_on_state_or_rngs():
    model, rngs = _Noisy(), js.Rngs(noise=1)
    x = jnp.arange(12.0).reshape(4, 3)
    before = {k: np.asarray(v) for k, v in model.state_dict().items()}
    counts = int(model.rngs.dropout.count[...]), int(rngs.noise.count[...])
    nn.summary(model, x, rngs=rngs)
    assert model.training
    after = model.state_dict()
    assert sorted(after) == sorted(before)
    for key, value in before.items():
        np.testing.assert_array_equal(after[key], value, err_msg=key)
    assert (int(model.rngs.dropout.count[...]), int(rngs.noise.count[...])) == counts == (0, 0)
    model(x, rngs=rngs)  # the check itself sees changes: a real call moves both
    assert not np.array_equal(model.state_dict()["bn.running_mean"], before["bn.running_mean"])
    assert int(rngs.noise.count[...]) == 1


def test_summary_restores_state_when_the_model_fails():
    model = _Noisy()
    before = np.asarray(model.bn.running_mean.value)
    try:
        nn.summary(model, jnp.ones((4, 3)), rngs=object())  # fails after BatchNorm ran
    except AttributeError:
        pass
    np.testing.assert_array_equal(model.bn.running_mean.value, before)
