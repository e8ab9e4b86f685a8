"""Every error the layers raise: what failed, where, expected against got."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
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


def test_sequential_with_dropout_in_training_says_to_write_a_custom_forward():
    model = nn.Sequential(nn.Linear(4, 4, rngs=R), nn.Dropout(0.5))
    with pytest.raises(ValueError, match=r"Dropout in training mode needs random keys.* "
                                         r"Sequential passes no rngs: .* custom forward"):
        model(jnp.ones((2, 4)))
    assert model.eval()(jnp.ones((2, 4))).shape == (2, 4)  # evaluation needs no keys

    class Net(js.Module):  # what the message asks for
        def __init__(self):
            super().__init__()
            self.body, self.drop = nn.Linear(4, 4, rngs=R), nn.Dropout(0.5)

        def forward(self, x, rngs):
            return self.drop(self.body(x), rngs=rngs)

    assert Net()(jnp.ones((2, 4)), js.Rngs(dropout=0)).shape == (2, 4)


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


# -- integer arguments: NumPy integers accepted, bools and non-integers refused --------------


@pytest.mark.parametrize(
    "build, error, match",
    [
        (lambda: nn.Linear(True, 3, rngs=R), ValueError,
         r"Linear: in_features must be an integer >= 1, got True"),
        (lambda: nn.Linear(4, 0, rngs=R), ValueError, r"Linear: out_features must be an integer"),
        (lambda: nn.Conv2d(3.0, 4, 3, rngs=R), ValueError,
         r"Conv2d: in_channels must be an integer >= 1, got 3.0"),
        (lambda: nn.Conv1d(3, True, 3, rngs=R), ValueError, r"Conv1d: out_channels must be an"),
        (lambda: nn.Conv2d(3, 4, 3, groups=True, rngs=R), ValueError,
         r"Conv2d: groups must be an integer >= 1, got True"),
        (lambda: nn.Conv1d(3, 4, 3, stride=1.0, rngs=R), TypeError,
         r"Conv1d: stride must be an int, got 1.0"),
        (lambda: nn.Conv1d(3, 4, 3, padding=True, rngs=R), TypeError,
         r"Conv1d: padding must be an int, got True"),
        (lambda: nn.Conv2d(3, 4, 3, stride=(1, True), rngs=R), TypeError,
         r"Conv2d: stride must be an int or a pair of ints, got \(1, True\)"),
        (lambda: nn.ConvTranspose2d(3, 2, 3, padding=-1, rngs=R), ValueError,
         r"ConvTranspose2d: padding must be non-negative, got \(-1, -1\)"),
        (lambda: nn.ConvTranspose2d(4, 4, 3, groups=True, rngs=R), NotImplementedError,
         r"ConvTranspose2d supports only groups=1 and dilation=1, got groups=True"),
        (lambda: nn.ConvTranspose2d(4, 4, 3, dilation=(1, True), rngs=R), NotImplementedError,
         r"ConvTranspose2d supports only .* dilation=\(1, True\)"),
        (lambda: nn.ConvTranspose2d(True, 4, 3, rngs=R), ValueError,
         r"ConvTranspose2d: in_channels must be an integer >= 1, got True"),
        (lambda: nn.ConvTranspose2d(4, 0, 3, rngs=R), ValueError,
         r"ConvTranspose2d: out_channels must be an integer >= 1, got 0"),
        (lambda: nn.BatchNorm1d(True), ValueError,
         r"BatchNorm1d: num_features must be an integer >= 1, got True"),
        (lambda: nn.LayerNorm(True), ValueError,
         r"LayerNorm: normalized_shape must be an integer >= 1 or a tuple of them, got True"),
        (lambda: nn.LayerNorm((5, 0)), ValueError, r"LayerNorm: normalized_shape .* \(5, 0\)"),
        (lambda: nn.Embedding(0, 4, rngs=R), ValueError,
         r"Embedding: num_embeddings must be an integer >= 1, got 0"),
        (lambda: nn.Embedding(10, True, rngs=R), ValueError,
         r"Embedding: embedding_dim must be an integer >= 1, got True"),
        (lambda: nn.Flatten(1.0), ValueError, r"Flatten: start_dim must be an integer, got 1.0"),
        (lambda: nn.Flatten(1, True), ValueError, r"Flatten: end_dim must be an integer, got True"),
        (lambda: nn.AdaptiveAvgPool2d(True), NotImplementedError,
         r"AdaptiveAvgPool2d supports only output_size \(1, 1\) .* got True"),
        (lambda: nn.MultiheadAttention(8, True, rngs=R), ValueError,
         r"MultiheadAttention: num_heads must be an integer >= 1, got True"),
        (lambda: nn.attention.causal_mask(True), ValueError,
         r"causal_mask: T must be an integer >= 1, got True"),
    ],
)  # fmt: skip
def test_bools_and_non_integers_are_refused_where_ints_are_meant(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_numpy_integers_are_accepted_as_ints():
    i = np.int64
    layers = [
        (nn.Linear(i(4), i(3), rngs=R), jnp.ones((2, 4))),
        (nn.Conv1d(i(3), i(4), i(3), stride=i(1), padding=i(1), groups=i(1), rngs=R),
         jnp.ones((1, 3, 5))),
        (nn.Conv2d(i(3), i(4), i(3), stride=(i(1), 1), padding=i(1), rngs=R),
         jnp.ones((1, 3, 5, 5))),
        (nn.ConvTranspose2d(i(3), i(2), i(3), padding=i(1), groups=i(1), rngs=R),
         jnp.ones((1, 3, 4, 4))),
        (nn.BatchNorm1d(i(3)), jnp.ones((2, 3))),
        (nn.LayerNorm(i(4)), jnp.ones((2, 4))),
        (nn.Embedding(i(10), i(4), rngs=R), jnp.ones((2,), jnp.int32)),
        (nn.Flatten(i(1), i(-1)), jnp.ones((2, 3, 4))),
        (nn.MaxPool2d(i(2)), jnp.ones((1, 1, 4, 4))),
        (nn.MultiheadAttention(i(8), i(2), rngs=R), jnp.ones((1, 3, 8))),
    ]
    for layer, x in layers:
        args = (x, x, x) if isinstance(layer, nn.MultiheadAttention) else (x,)
        assert np.all(np.isfinite(layer(*args))), layer
    lstm = nn.LSTM(i(4), i(5), i(2), unroll=i(2), rngs=R)
    assert type(lstm.hidden_size) is int and lstm(jnp.ones((1, 3, 4)))[0].shape == (1, 3, 5)
    assert type(nn.Linear(i(4), i(3), rngs=R).in_features) is int
    np.testing.assert_array_equal(nn.attention.causal_mask(i(3)), nn.attention.causal_mask(3))


# -- Embedding with array-likes ----------------------------------------------------------------


def test_embedding_accepts_lists_and_refuses_non_integer_ones():
    emb = nn.Embedding(10, 4, rngs=js.Rngs(params=0))
    np.testing.assert_array_equal(emb([[1, 2], [3, 0]]), emb(jnp.array([[1, 2], [3, 0]])))
    np.testing.assert_array_equal(emb(np.int64(3)), emb(jnp.array(3)))
    with pytest.raises(TypeError, match=r"Embedding: expected integer indices \(an array or a "
                                        r"nested list of ints\), got float64 values"):
        emb([1.0, 2.0])


# -- BatchNorm in training needs more than one value per channel -------------------------------


@pytest.mark.parametrize("layer, shape", [
    (nn.BatchNorm1d(3), (1, 3)), (nn.BatchNorm1d(3), (1, 3, 1)), (nn.BatchNorm2d(3), (1, 3, 1, 1)),
])  # fmt: skip
def test_batchnorm_training_with_one_value_per_channel_is_refused(layer, shape):
    match = (rf"{type(layer).__name__}: expected more than 1 value per channel when training, "
             rf"got input of shape \[{', '.join(map(str, shape))}\]")
    with pytest.raises(ValueError, match=match):
        layer(jnp.ones(shape))
    with pytest.raises(ValueError, match=match):  # statically, also while tracing
        js.jit(lambda m, x: m(x))(layer, jnp.ones(shape))
    layer.eval()
    assert layer(jnp.ones(shape)).shape == shape  # evaluation uses the running statistics


def test_batchnorm_training_with_one_example_but_several_positions_is_fine():
    assert nn.BatchNorm1d(3)(jnp.ones((1, 3, 4))).shape == (1, 3, 4)
    assert nn.BatchNorm2d(3)(jnp.ones((1, 3, 2, 1))).shape == (1, 3, 2, 1)
