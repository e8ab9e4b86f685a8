"""Models and data for the multi-device tests: the digits CNN and a small transformer block."""

import sys
from pathlib import Path

import jax
import numpy as np

import js
import js.losses as losses
import js.nn as nn
import js.optim
from js.nn.attention import causal_mask
from js.training import steps

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "docs" / "examples"))
from digits import DigitsCNN, split_digits  # noqa: E402  (the docs example's model)


class Block(js.Module):
    """Pre-norm transformer block: causal self-attention and a D -> 4D -> D MLP, residuals."""

    def __init__(self, dim: int = 32, heads: int = 4, *, rngs):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, rngs=rngs)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim, rngs=rngs)
        self.fc2 = nn.Linear(4 * dim, dim, rngs=rngs)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, mask=causal_mask(x.shape[1]))  # [B, T, D]
        return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x))))


def cnn_step(model, optimizer, rngs, x, y):
    """The Task's default dropout step (js-train's reference step): its loss."""
    return steps.dropout_classification_step(model, optimizer, (x, y), rngs)["loss"]


@js.jit
def block_step(model, optimizer, x, y):
    loss, grads = js.value_and_grad(lambda m: losses.mse_loss(m(x), y))(model)
    optimizer.step(grads)
    return loss


def digits_batches(steps: int, batch: int):
    (x, y), _, _ = split_digits()
    return [(x[i * batch : (i + 1) * batch], y[i * batch : (i + 1) * batch]) for i in range(steps)]


def block_batches(steps: int, batch: int, T: int = 8, dim: int = 32):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps, batch, T, dim)).astype(np.float32)
    return [(x[i], np.roll(x[i], 1, axis=1)) for i in range(steps)]


def cnn(seed: int = 0):
    """The docs' digits CNN without its conv biases, and a dropout stream.

    BatchNorm follows each conv and subtracts the batch mean, so a conv bias has an exact
    gradient of zero; Adam would turn its float rounding noise into steps of +-lr that differ
    between device counts (measured: 0.018 after 20 steps), which says nothing about sharding.
    """
    model = DigitsCNN(rngs=js.Rngs(params=seed))
    model.conv1.bias = model.conv2.bias = None
    return model, js.Rngs(dropout=1)


def adam(model):
    # At lr 2e-3 the CNN's 20 steps amplify reduction-order rounding to 8e-5 in a few conv2
    # weights on 8 devices against one; at 5e-4 every weight agrees to 1e-7.
    return js.optim.Adam(model.parameters(), lr=5e-4)


def comparable(model) -> list:
    """Parameter arrays to compare across device counts: all, but the attention key bias.

    Softmax is unchanged by a constant added to every score, so the key part of the input
    projection bias has an exact gradient of zero, and Adam moves it by rounding noise alone.
    """
    arrays = []
    for path, p in model.named_parameters():
        value = np.asarray(p.value)
        if path.endswith("in_proj_bias"):
            third = value.shape[0] // 3
            value = np.concatenate([value[:third], value[2 * third :]])  # q and v, not k
        arrays.append(value)
    return arrays
