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
        (
            nn.Linear(4, 3, rngs=R),
            jnp.ones((2, 5)),
            r"Linear: expected input of shape \[\.\.\., I=4\], got \[2, 5\] \(the last",
        ),
        (nn.Linear(4, 3, rngs=R), jnp.ones(()), r"Linear: .*got \[\] \(a 0-D input where at least"),
        (
            nn.Conv1d(3, 4, 3, rngs=R),
            jnp.ones((2, 3, 4, 4)),
            r"Conv1d: expected input of shape \[B, C_in=3, L\], got \[2, 3, 4, 4\] \(a 4-D input "
            r"where 3-D is needed",
        ),
        (
            nn.Conv2d(3, 4, 3, rngs=R),
            jnp.ones((2, 5, 8, 8)),
            r"Conv2d: expected input of shape \[B, C_in=3, H, W\], got \[2, 5, 8, 8\] \(the "
            r"channel count is 5, expected 3\)",
        ),
        (nn.Conv2d(3, 4, 3, rngs=R), jnp.ones((3, 8, 8)), r"Conv2d: .*a 3-D input where 4-D"),
        (
            nn.Conv2d(3, 4, 5, padding=1, rngs=R),
            jnp.ones((1, 3, 2, 8)),
            r"Conv2d: .*spatial size \[4, 10\] \(after padding\) is smaller than the window",
        ),
        (
            nn.ConvTranspose2d(3, 2, 3, rngs=R),
            jnp.ones((1, 2, 4, 4)),
            r"ConvTranspose2d: .*\[B, C_in=3, H, W\].*the channel count is 2",
        ),
        (
            nn.ConvTranspose2d(3, 2, 1, padding=1, rngs=R),
            jnp.ones((1, 3, 1, 1)),
            r"ConvTranspose2d: .*the output size would be \[-1, -1\]",
        ),
        (
            nn.MaxPool2d(3),
            jnp.ones((1, 3, 2, 8)),
            r"MaxPool2d: the output size would be \[0, 2\] for spatial size \[2, 8\], kernel",
        ),
        (nn.AvgPool1d(3), jnp.ones((1, 3, 2)), r"AvgPool1d: the output size would be \[0\]"),
        (nn.MaxPool1d(2), jnp.ones((1, 3, 2, 2)), r"MaxPool1d: .*\[B, C, L\].*4-D input"),
        (
            nn.Conv2d(3, 4, 3, dilation=2, rngs=R),
            jnp.ones((1, 3, 4, 8)),
            r"Conv2d: .*spatial size \[4, 8\] \(after padding\) is smaller than the "
            r"window \[5, 5\]",
        ),
        (nn.Conv1d(3, 4, 3, rngs=R), jnp.ones((2, 4, 8)), r"Conv1d: .*the channel count is 4"),
        (
            nn.ConvTranspose1d(3, 2, 3, rngs=R),
            jnp.ones((2, 3, 4, 4)),
            r"ConvTranspose1d: expected input of shape \[B, C_in=3, L\]",
        ),
        (
            nn.GroupNorm(2, 4),
            jnp.ones((2, 3, 5)),
            r"GroupNorm: .*\[B, C=4, \*\].*channel count is 3",
        ),
        (nn.GroupNorm(2, 4), jnp.ones(4), r"GroupNorm: .*a 1-D input where at least 2-D"),
        (nn.Dropout2d(0.5), jnp.ones((2, 3, 4)), r"Dropout2d: .*\[B, C, H, W\].*3-D"),
        (nn.Dropout1d(0.5), jnp.ones((2, 3, 4, 4)), r"Dropout1d: .*\[B, C, L\] or \[C, L\].*4-D"),
        (nn.AvgPool2d(2), jnp.ones((3, 8, 8)), r"AvgPool2d: .*\[B, C, H, W\].*3-D"),
        (nn.AdaptiveAvgPool2d(1), jnp.ones((3, 8)), r"AdaptiveAvgPool2d: .*2-D input"),
        (
            nn.BatchNorm1d(3),
            jnp.ones((2, 4)),
            r"BatchNorm1d: expected input of shape \[B, C=3\] or \[B, C=3, L\], got \[2, 4\]",
        ),
        (nn.BatchNorm1d(3), jnp.ones((2, 3, 4, 4)), r"BatchNorm1d: .*a 4-D input where 2-D or 3-D"),
        (nn.BatchNorm2d(3), jnp.ones((2, 3, 4)), r"BatchNorm2d: .*\[B, C=3, H, W\]"),
        (
            nn.LayerNorm((5, 8)),
            jnp.ones((2, 4, 8)),
            r"LayerNorm: expected input of shape \[\.\.\., 5, 8\], got \[2, 4, 8\] \(the trailing",
        ),
        (nn.LayerNorm((5, 8)), jnp.ones(8), r"LayerNorm: .*at least 2-D"),
        (nn.Flatten(2, 3), jnp.ones((2, 3)), r"Flatten: .*start_dim=2, end_dim=3 do not fit a 2-D"),
    ],
)
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
    with pytest.raises(
        ValueError,
        match=r"Dropout in training mode needs random keys.* "
        r"Sequential passes no rngs: .* custom forward",
    ):
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
        (
            lambda: nn.Conv2d(3, 4, 3, groups=2, rngs=R),
            ValueError,
            r"Conv2d: groups=2 must divide in_channels=3 and out_channels=4. Fix:",
        ),
        (lambda: nn.Conv1d(4, 3, 3, groups=2, rngs=R), ValueError, r"Conv1d: groups=2"),
        (
            lambda: nn.ConvTranspose2d(4, 3, 3, groups=2, rngs=R),
            ValueError,
            r"ConvTranspose2d: groups=2 must divide",
        ),
        (
            lambda: nn.Conv1d(3, 4, 3, padding=-1, rngs=R),
            ValueError,
            r"Conv1d: padding must be >= 0, got \(-1,\)",
        ),
        (
            lambda: nn.Conv1d(3, 4, 3, padding=(1, 1), rngs=R),
            TypeError,
            r"Conv1d: padding must be an int, got \(1, 1\)",
        ),
        (
            lambda: nn.Conv2d(3, 4, 0, rngs=R),
            ValueError,
            r"Conv2d: kernel_size must be >= 1, got \(0, 0\)",
        ),
        (
            lambda: nn.Conv2d(3, 4, 3, dilation=0, rngs=R),
            ValueError,
            r"Conv2d: dilation must be >= 1, got \(0, 0\)",
        ),
        (
            lambda: nn.Conv2d(3, 4, 3, padding="full", rngs=R),
            ValueError,
            r"Conv2d: padding must be an int, a tuple of 2, 'same' or 'valid', got 'full'",
        ),
        (
            lambda: nn.Conv2d(3, 4, (3, 3, 3), rngs=R),
            TypeError,
            r"Conv2d: kernel_size must be an int or a tuple of 2 ints, got \(3, 3, 3\)",
        ),
        (
            lambda: nn.Conv2d(3, 4, 3, padding_mode="reflect", rngs=R),
            NotImplementedError,
            r"Conv2d: padding_mode='reflect' is not supported, only 'zeros'. Fix: pad",
        ),
        (
            lambda: nn.Conv1d(3, 4, 3, padding_mode="mirror", rngs=R),
            ValueError,
            r"Conv1d: padding_mode must be one of \('zeros', 'reflect', 'replicate', 'circular'\)",
        ),
        (
            lambda: nn.Conv2d(3, 4, 3, bias=1, rngs=R),
            TypeError,
            r"Conv2d: bias must be True or False, got 1 \(a int\)",
        ),
        (
            lambda: nn.ConvTranspose2d(4, 4, 3, padding="same", rngs=R),
            TypeError,
            r"ConvTranspose2d: padding must be an int or a tuple of 2 ints, got 'same'",
        ),
        (
            lambda: nn.ConvTranspose2d(4, 4, 3, stride=2, output_padding=2, rngs=R),
            ValueError,
            r"ConvTranspose2d: output_padding \(2, 2\) must be smaller than stride \(2, 2\) or "
            r"dilation \(1, 1\)",
        ),
        (
            lambda: nn.ConvTranspose1d(4, 4, 3, output_padding=-1, rngs=R),
            ValueError,
            r"ConvTranspose1d: output_padding must be >= 0, got \(-1,\)",
        ),
        (
            lambda: nn.Conv2d(3, 4, 3, rngs=R, dtype=jnp.int32),
            TypeError,
            r"Conv2d: dtype must be a floating-point dtype .*got <class 'jax.numpy.int32'>",
        ),
        (
            lambda: nn.Linear(3, 4, rngs=R, dtype="nope"),
            TypeError,
            r"Linear: dtype must be a floating-point dtype .*got 'nope'",
        ),
        (lambda: nn.MaxPool2d(2, stride=0), ValueError, r"MaxPool2d: stride must be >= 1"),
        (
            lambda: nn.MaxPool2d(3, padding=2),
            ValueError,
            r"MaxPool2d: padding \(2, 2\) must be at most half the kernel size \(3, 3\)",
        ),
        (lambda: nn.AvgPool1d(2, padding=2), ValueError, r"AvgPool1d: padding \(2,\) must be"),
        (
            lambda: nn.MaxPool2d(2, return_indices=True),
            NotImplementedError,
            r"MaxPool2d: return_indices=True is not supported",
        ),
        (lambda: nn.MaxPool1d(2, ceil_mode=1), TypeError, r"MaxPool1d: ceil_mode must be True"),
        (
            lambda: nn.AvgPool2d(2, count_include_pad=None),
            TypeError,
            r"AvgPool2d: count_include_pad must be True or False, got None",
        ),
        (
            lambda: nn.AvgPool2d(2, divisor_override=0),
            ValueError,
            r"AvgPool2d: divisor_override must be an int >= 1, got 0",
        ),
        (
            lambda: nn.AdaptiveAvgPool2d((2, 2, 2)),
            TypeError,
            r"AdaptiveAvgPool2d: output_size must be an int or a tuple of 2 ints \(or None\)",
        ),
        (
            lambda: nn.AdaptiveAvgPool1d(0),
            ValueError,
            r"AdaptiveAvgPool1d: output_size must be an int >= 1, got 0",
        ),
        (
            lambda: nn.BatchNorm2d(3, momentum=None),
            NotImplementedError,
            r"BatchNorm2d: momentum=None \(PyTorch's cumulative average",
        ),
        (lambda: nn.BatchNorm2d(3, momentum="0.1"), TypeError, r"BatchNorm2d: momentum must be a"),
        (lambda: nn.BatchNorm1d(3, 0.0), ValueError, r"BatchNorm1d: eps must be positive, got 0.0"),
        (lambda: nn.BatchNorm1d(3, "x"), TypeError, r"BatchNorm1d: eps must be a float, got 'x'"),
        (lambda: nn.BatchNorm1d(3, affine=None), TypeError, r"BatchNorm1d: affine must be True"),
        (
            lambda: nn.BatchNorm1d(3, track_running_stats=0),
            TypeError,
            r"BatchNorm1d: track_running_stats must be True or False",
        ),
        (lambda: nn.LayerNorm(4, bias="no"), TypeError, r"LayerNorm: bias must be True or False"),
        (
            lambda: nn.GroupNorm(3, 4),
            ValueError,
            r"GroupNorm: num_groups=3 must divide num_channels=4",
        ),
        (lambda: nn.GroupNorm(0, 4), ValueError, r"GroupNorm: num_groups must be an int >= 1"),
        (lambda: nn.GroupNorm(2, 4, affine="yes"), TypeError, r"GroupNorm: affine must be True"),
        (
            lambda: nn.Embedding(10, 4, padding_idx=10, rngs=R),
            ValueError,
            r"Embedding: padding_idx must be in \[-10, 10\) \(num_embeddings=10\), got 10",
        ),
        (
            lambda: nn.Embedding(10, 4, padding_idx=1.0, rngs=R),
            TypeError,
            r"Embedding: padding_idx must be an int, got 1.0",
        ),
        (
            lambda: nn.Embedding(10, 4, max_norm=1.0, rngs=R),
            NotImplementedError,
            r"Embedding: max_norm=1.0 .* is not supported",
        ),
        (
            lambda: nn.Embedding(10, 4, scale_grad_by_freq=True, rngs=R),
            NotImplementedError,
            r"Embedding: scale_grad_by_freq=True is not supported",
        ),
        (lambda: nn.Dropout2d(2.0), ValueError, r"Dropout2d: p must be in \[0, 1\], got 2.0"),
        (lambda: nn.Dropout("0.5"), TypeError, r"Dropout: p must be a float in \[0, 1\]"),
        (lambda: nn.Dropout1d(0.5, inplace=None), TypeError, r"Dropout1d: inplace must be True"),
        (lambda: nn.ReLU(None), TypeError, r"ReLU: inplace must be True or False, got None"),
        (lambda: nn.LeakyReLU("a"), TypeError, r"LeakyReLU: negative_slope must be a number"),
        (lambda: nn.ELU(alpha=None), TypeError, r"ELU: alpha must be a number, got None"),
        (
            lambda: nn.Hardtanh(1.0, -1.0),
            ValueError,
            r"Hardtanh: max_val must be greater than min_val, got min_val=1.0, max_val=-1.0",
        ),
        (
            lambda: nn.Softmax(),
            ValueError,
            r"Softmax: dim=None \(PyTorch's deprecated implicit dimension\) is not supported. "
            r"Fix: pass the dimension",
        ),
        (lambda: nn.LogSoftmax(1.0), TypeError, r"LogSoftmax: dim must be an int, got 1.0"),
        (
            lambda: nn.Upsample(),
            ValueError,
            r"Upsample: give exactly one of size and scale_factor, "
            r"got size=None, scale_factor=None",
        ),
        (
            lambda: nn.Upsample(scale_factor=2, mode="bicubic"),
            NotImplementedError,
            r"interpolate: mode='bicubic' is not supported",
        ),
        (
            lambda: nn.Upsample(scale_factor=2, mode="cubic"),
            ValueError,
            r"interpolate: mode must be 'nearest', 'linear' or 'bilinear', got 'cubic'",
        ),
        (
            lambda: nn.Upsample(scale_factor=2, align_corners=True),
            ValueError,
            r"interpolate: align_corners can only be set with the interpolating modes",
        ),
        (
            lambda: nn.BatchNorm2d(3, momentum=1.5),
            ValueError,
            r"BatchNorm2d: momentum must be in \[0, 1\], got 1.5",
        ),
        (lambda: nn.Dropout(1.5), ValueError, r"Dropout: p must be in \[0, 1\], got 1.5"),
        (lambda: nn.GELU("erf"), ValueError, r"GELU: approximate must be 'none' or 'tanh'"),
        (
            lambda: nn.Sequential(nn.ReLU(), jax.nn.relu),
            TypeError,
            r"Sequential: layer 1 must be a js Module, got \w+",
        ),
    ],
)
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
        (
            lambda: nn.Linear(True, 3, rngs=R),
            TypeError,
            r"Linear: in_features must be an int >= 1, got True \(a bool\). Fix: pass an integer",
        ),
        (
            lambda: nn.Linear(4, 0, rngs=R),
            ValueError,
            r"Linear: out_features must be an int >= 1, got 0$",
        ),
        (
            lambda: nn.Conv2d(3.0, 4, 3, rngs=R),
            TypeError,
            r"Conv2d: in_channels must be an int >= 1, got 3.0 \(a float\)",
        ),
        (lambda: nn.Conv1d(3, True, 3, rngs=R), TypeError, r"Conv1d: out_channels must be an"),
        (
            lambda: nn.Conv2d(3, 4, 3, groups=True, rngs=R),
            TypeError,
            r"Conv2d: groups must be an int >= 1, got True",
        ),
        (
            lambda: nn.Conv2d(4, 4, 3, groups=0, rngs=R),
            ValueError,
            r"Conv2d: groups must be an int >= 1, got 0",
        ),
        (
            lambda: nn.Conv1d(3, 4, 3, stride=1.0, rngs=R),
            TypeError,
            r"Conv1d: stride must be an int, got 1.0",
        ),
        (
            lambda: nn.Conv1d(3, 4, 3, padding=True, rngs=R),
            TypeError,
            r"Conv1d: padding must be an int, got True",
        ),
        (
            lambda: nn.Conv2d(3, 4, 3, stride=(1, True), rngs=R),
            TypeError,
            r"Conv2d: stride must be an int or a tuple of 2 ints, got \(1, True\)",
        ),
        (
            lambda: nn.ConvTranspose2d(3, 2, 3, padding=-1, rngs=R),
            ValueError,
            r"ConvTranspose2d: padding must be >= 0, got \(-1, -1\)",
        ),
        (
            lambda: nn.ConvTranspose2d(4, 4, 3, groups=True, rngs=R),
            TypeError,
            r"ConvTranspose2d: groups must be an int >= 1, got True",
        ),
        (
            lambda: nn.ConvTranspose2d(4, 4, 3, dilation=(1, True), rngs=R),
            TypeError,
            r"ConvTranspose2d: dilation must be an int or a tuple of 2 ints, got \(1, True\)",
        ),
        (
            lambda: nn.ConvTranspose2d(True, 4, 3, rngs=R),
            TypeError,
            r"ConvTranspose2d: in_channels must be an int >= 1, got True",
        ),
        (
            lambda: nn.ConvTranspose2d(4, 0, 3, rngs=R),
            ValueError,
            r"ConvTranspose2d: out_channels must be an int >= 1, got 0",
        ),
        (
            lambda: nn.BatchNorm1d(True),
            TypeError,
            r"BatchNorm1d: num_features must be an int >= 1, got True",
        ),
        (
            lambda: nn.LayerNorm(True),
            TypeError,
            r"LayerNorm: normalized_shape must be an int or a tuple of ints, got True",
        ),
        (
            lambda: nn.LayerNorm((5, 0)),
            ValueError,
            r"LayerNorm: normalized_shape must hold ints >= 1, got \(5, 0\)",
        ),
        (
            lambda: nn.Embedding(0, 4, rngs=R),
            ValueError,
            r"Embedding: num_embeddings must be an int >= 1, got 0",
        ),
        (
            lambda: nn.Embedding(10, True, rngs=R),
            TypeError,
            r"Embedding: embedding_dim must be an int >= 1, got True",
        ),
        (lambda: nn.Flatten(1.0), TypeError, r"Flatten: start_dim must be an int, got 1.0"),
        (lambda: nn.Flatten(1, True), TypeError, r"Flatten: end_dim must be an int, got True"),
        (
            lambda: nn.AdaptiveAvgPool2d(True),
            TypeError,
            r"AdaptiveAvgPool2d: output_size must be an int or a tuple of 2 ints \(or None\), got "
            r"True",
        ),
        (
            lambda: nn.MaxPool2d(2.0),
            TypeError,
            r"MaxPool2d: kernel_size must be an int or a tuple of 2 ints, got 2.0",
        ),
        (
            lambda: nn.MultiheadAttention(8, True, rngs=R),
            TypeError,
            r"MultiheadAttention: num_heads must be an int >= 1, got True",
        ),
        (
            lambda: nn.attention.causal_mask(True),
            TypeError,
            r"causal_mask: T must be an int >= 1, got True",
        ),
    ],
)
def test_bools_and_non_integers_are_refused_where_ints_are_meant(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_numpy_integers_are_accepted_as_ints():
    i = np.int64
    layers = [
        (nn.Linear(i(4), i(3), rngs=R), jnp.ones((2, 4))),
        (
            nn.Conv1d(i(3), i(4), i(3), stride=i(1), padding=i(1), groups=i(1), rngs=R),
            jnp.ones((1, 3, 5)),
        ),
        (
            nn.Conv2d(i(3), i(4), i(3), stride=(i(1), 1), padding=i(1), rngs=R),
            jnp.ones((1, 3, 5, 5)),
        ),
        (
            nn.ConvTranspose2d(i(3), i(2), i(3), padding=i(1), groups=i(1), rngs=R),
            jnp.ones((1, 3, 4, 4)),
        ),
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
    with pytest.raises(
        TypeError,
        match=r"Embedding: expected integer indices \(an array or a "
        r"nested list of ints\), got float64 values",
    ):
        emb([1.0, 2.0])


# -- BatchNorm in training needs more than one value per channel -------------------------------


@pytest.mark.parametrize(
    "layer, shape",
    [
        (nn.BatchNorm1d(3), (1, 3)),
        (nn.BatchNorm1d(3), (1, 3, 1)),
        (nn.BatchNorm2d(3), (1, 3, 1, 1)),
    ],
)
def test_batchnorm_training_with_one_value_per_channel_is_refused(layer, shape):
    match = (
        rf"{type(layer).__name__}: expected more than 1 value per channel when training, "
        rf"got input of shape \[{', '.join(map(str, shape))}\]"
    )
    with pytest.raises(ValueError, match=match):
        layer(jnp.ones(shape))
    with pytest.raises(ValueError, match=match):  # statically, also while tracing
        js.jit(lambda m, x: m(x))(layer, jnp.ones(shape))
    layer.eval()
    assert layer(jnp.ones(shape)).shape == shape  # evaluation uses the running statistics


def test_batchnorm_training_with_one_example_but_several_positions_is_fine():
    assert nn.BatchNorm1d(3)(jnp.ones((1, 3, 4))).shape == (1, 3, 4)
    assert nn.BatchNorm2d(3)(jnp.ones((1, 3, 2, 1))).shape == (1, 3, 2, 1)
