"""Every error the layers raise: what failed, where, expected against got."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import js
import js.nn as nn

R = js.Rngs(params=0)


@pytest.mark.parametrize(
    "layer, x, match",
    [
        (nn.Linear(4, 3, rngs=R), jnp.ones((2, 5)),
         r"Linear: expected input of shape \[\.\.\., I=4\], got \[2, 5\] \(the last"),
        (nn.Linear(4, 3, rngs=R), jnp.ones(()), r"Linear: .*got \[\] \(a 0-D input where at least"),
        (nn.Conv1d(3, 4, 3, rngs=R), jnp.ones((2, 3, 4, 4)),
         r"Conv1d: expected input of shape \[B, C_in=3, L\], got \[2, 3, 4, 4\] \(a 4-D input "
         r"where 3-D is needed"),
        (nn.Conv2d(3, 4, 3, rngs=R), jnp.ones((2, 5, 8, 8)),
         r"Conv2d: expected input of shape \[B, C_in=3, H, W\], got \[2, 5, 8, 8\] \(the "
         r"channel count is 5, expected 3\)"),
        (nn.Conv2d(3, 4, 3, rngs=R), jnp.ones((3, 8, 8)), r"Conv2d: .*a 3-D input where 4-D"),
        (nn.Conv2d(3, 4, 5, padding=1, rngs=R), jnp.ones((1, 3, 2, 8)),
         r"Conv2d: .*spatial size \[4, 10\] \(after padding\) is smaller than the window"),
        (nn.ConvTranspose2d(3, 2, 3, rngs=R), jnp.ones((1, 2, 4, 4)),
         r"ConvTranspose2d: .*\[B, C_in=3, H, W\].*the channel count is 2"),
        (nn.ConvTranspose2d(3, 2, 1, padding=1, rngs=R), jnp.ones((1, 3, 1, 1)),
         r"ConvTranspose2d: .*the output size would be \[-1, -1\]"),
        (nn.MaxPool2d(3), jnp.ones((1, 3, 2, 8)), r"MaxPool2d: .*smaller than the window \[3, 3\]"),
        (nn.AvgPool2d(2), jnp.ones((3, 8, 8)), r"AvgPool2d: .*\[B, C, H, W\].*3-D"),
        (nn.AdaptiveAvgPool2d(1), jnp.ones((3, 8)), r"AdaptiveAvgPool2d: .*2-D input"),
        (nn.BatchNorm1d(3), jnp.ones((2, 4)),
         r"BatchNorm1d: expected input of shape \[B, C=3\] or \[B, C=3, L\], got \[2, 4\]"),
        (nn.BatchNorm1d(3), jnp.ones((2, 3, 4, 4)), r"BatchNorm1d: .*a 4-D input where 2-D or 3-D"),
        (nn.BatchNorm2d(3), jnp.ones((2, 3, 4)), r"BatchNorm2d: .*\[B, C=3, H, W\]"),
        (nn.LayerNorm((5, 8)), jnp.ones((2, 4, 8)),
         r"LayerNorm: expected input of shape \[\.\.\., 5, 8\], got \[2, 4, 8\] \(the trailing"),
        (nn.LayerNorm((5, 8)), jnp.ones(8), r"LayerNorm: .*at least 2-D"),
        (nn.Flatten(2, 3), jnp.ones((2, 3)), r"Flatten: .*start_dim=2, end_dim=3 do not fit a 2-D"),
    ],
)  # fmt: skip
def test_bad_input_shape_names_layer_expected_and_got(layer, x, match):
    with pytest.raises(ValueError, match=match):
        layer(x)


def test_shape_errors_also_fire_while_tracing():
    layer = nn.Linear(4, 3, rngs=js.Rngs(params=0))
    with pytest.raises(ValueError, match=r"Linear: expected input of shape \[\.\.\., I=4\]"):
        js.jit(lambda model, x: model(x))(layer, jnp.ones((2, 5)))


def test_embedding_refuses_float_indices():
    emb = nn.Embedding(10, 4, rngs=js.Rngs(params=0))
    with pytest.raises(TypeError, match=r"Embedding: expected integer indices, got dtype float32"):
        emb(jnp.ones((2, 3)))


def test_dropout_in_training_without_rngs():
    with pytest.raises(ValueError, match=r"Dropout in training mode needs random keys.*rngs=rngs"):
        nn.Dropout(0.5)(jnp.ones(3))


@pytest.mark.parametrize(
    "build, error, match",
    [
        (lambda: nn.Conv2d(3, 4, 3, groups=2, rngs=R), ValueError,
         r"Conv2d: groups=2 must be positive and divide in_channels=3 and out_channels=4"),
        (lambda: nn.Conv1d(4, 3, 3, groups=2, rngs=R), ValueError, r"Conv1d: groups=2"),
        (lambda: nn.Conv1d(3, 4, 3, padding="SAME", rngs=R), TypeError,
         r"Conv1d: padding must be an int, got 'SAME'"),
        (lambda: nn.Conv1d(3, 4, (3,), rngs=R), TypeError, r"Conv1d: kernel_size must be an int"),
        (lambda: nn.Conv1d(3, 4, 3, padding=-1, rngs=R), ValueError,
         r"Conv1d: padding must be non-negative, got \(-1,\)"),
        (lambda: nn.Conv2d(3, 4, 0, rngs=R), ValueError,
         r"Conv2d: kernel_size must be positive, got \(0, 0\)"),
        (lambda: nn.Conv2d(3, 4, 3, padding="full", rngs=R), ValueError,
         r"Conv2d: padding must be an int, a pair, 'SAME' or 'VALID', got 'full'"),
        (lambda: nn.Conv2d(3, 4, (3, 3, 3), rngs=R), TypeError,
         r"Conv2d: kernel_size must be an int or a pair of ints, got \(3, 3, 3\)"),
        (lambda: nn.ConvTranspose2d(4, 4, 3, groups=2, rngs=R), NotImplementedError,
         r"ConvTranspose2d supports only groups=1 and dilation=1, got groups=2"),
        (lambda: nn.ConvTranspose2d(4, 4, 3, dilation=2, rngs=R), NotImplementedError,
         r"ConvTranspose2d supports only groups=1 and dilation=1, got groups=1, dilation=2"),
        (lambda: nn.ConvTranspose2d(4, 4, 3, stride=2, output_padding=2, rngs=R), ValueError,
         r"ConvTranspose2d: output_padding \(2, 2\) must be non-negative and smaller than"),
        (lambda: nn.MaxPool2d(2, stride=0), ValueError, r"MaxPool2d: stride must be positive"),
        (lambda: nn.AdaptiveAvgPool2d((2, 2)), NotImplementedError,
         r"AdaptiveAvgPool2d supports only output_size \(1, 1\) \(a global mean\), got \(2, 2\)"),
        (lambda: nn.BatchNorm2d(3, momentum=1.5), ValueError,
         r"BatchNorm2d: momentum must be in \[0, 1\], got 1.5"),
        (lambda: nn.Dropout(1.5), ValueError, r"Dropout: p must be in \[0, 1\], got 1.5"),
        (lambda: nn.GELU("erf"), ValueError, r"GELU: approximate must be 'none' or 'tanh'"),
        (lambda: nn.Sequential(nn.ReLU(), jax.nn.relu), TypeError,
         r"Sequential: layer 1 must be a js Module, got \w+"),
    ],
)  # fmt: skip
def test_bad_configuration_is_refused_at_construction(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_rngs_is_keyword_only_and_required():
    with pytest.raises(TypeError, match="rngs"):
        nn.Linear(4, 3)
    with pytest.raises(TypeError, match="positional"):
        nn.Linear(4, 3, True, js.Rngs(params=0))
