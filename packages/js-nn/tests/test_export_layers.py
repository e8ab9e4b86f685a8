"""js.export with js-nn's layers: dropout and batch statistics in train mode are refused; in
eval mode the artifact matches the module, with a symbolic batch through conv, pool, flatten and
attention with a mask."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import js
import js.nn as nn
from js.nn.attention import causal_mask


class CNN(js.Module):
    def __init__(self, rngs):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, rngs=rngs)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * 4 * 4, 10, rngs=rngs)

    def forward(self, x, *, rngs=None):
        h = self.pool(jax.nn.relu(self.bn(self.conv(x))))  # [B, 4, 4, 4]
        return self.fc(self.drop(self.flatten(h), rngs=rngs))  # [B, 10]


X = np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32)


def test_train_mode_dropout_is_refused_and_eval_mode_exports():
    model = CNN(js.Rngs(params=0))
    with pytest.raises(
        ValueError,
        match=r"(?s)CNN is in train mode .* depends on the mode.*"
        r"in train mode it raises ValueError: Dropout in training mode needs",
    ):
        js.export(model, X)
    model(X, rngs=js.Rngs(dropout=0))  # move BatchNorm's running statistics
    exported = js.export(model.eval(), X)
    batch = np.random.default_rng(1).random((7, 1, 8, 8), dtype=np.float32)
    np.testing.assert_allclose(exported.call(batch), model(batch), rtol=1e-5, atol=1e-6)


def test_train_mode_batch_norm_alone_is_refused():
    with pytest.raises(ValueError, match=r"BatchNorm2d is in train mode \(modules \['Batch"):
        js.export(nn.BatchNorm2d(3), np.ones((2, 3, 4, 4), np.float32))


def test_attention_with_a_mask_exports_with_a_symbolic_batch():
    attn = nn.MultiheadAttention(8, 2, rngs=js.Rngs(params=0)).eval()
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    mask = np.asarray(causal_mask(5))  # [1, 1, T, T]: not batched
    exported = js.export(attn, x, x, x, mask, dynamic_batch=(0, 1, 2))
    assert str(exported.in_avals[0].shape) == "(batch, 5, 8)"
    x6 = np.concatenate([x, x, x])
    np.testing.assert_allclose(
        exported.call(x6, x6, x6, mask), attn(x6, x6, x6, mask=mask), rtol=1e-5, atol=1e-6
    )
