"""js.nn.summary: one eager run, a row per module call, parameter counts that add up."""

from __future__ import annotations

import jax.numpy as jnp

import js
import js.nn as nn


class Net(js.Module):
    def __init__(self, rngs):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3, rngs=rngs), nn.BatchNorm2d(4), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten())  # fmt: skip
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
    assert "Buffer elements: 8" in text


def test_summary_restores_module_calls():
    before = js.Module.__call__
    nn.summary(nn.ReLU(), jnp.ones(2))
    assert js.Module.__call__ is before
