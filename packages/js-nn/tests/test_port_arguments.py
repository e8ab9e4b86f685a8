"""PyTorch's constructor arguments that a port relies on (issue 12), beyond the torch table.

The numerical comparisons with PyTorch live in test_torch_compat.py (``PORT_PAIRS``); here:
what the arguments mean (positional order, initialisation, dtype), and the call-time errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.nn as nn
import js.nn.functional as F

R = js.Rngs(params=0)


def test_conv_positional_order_is_pytorchs():
    # Conv2d(i, o, k, s, p, 2) once meant groups=2; in PyTorch the sixth argument is dilation.
    conv = nn.Conv2d(4, 6, 3, 1, 2, 2, rngs=R)
    assert (conv.dilation, conv.groups, conv.padding) == ((2, 2), 1, (2, 2))
    assert conv.weight.value.shape == (6, 4, 3, 3)
    conv = nn.Conv1d(4, 6, 3, 1, 0, 1, 2, False, "zeros", rngs=R)
    assert (conv.groups, conv.bias, conv.weight.value.shape) == (2, None, (6, 2, 3))
    up = nn.ConvTranspose2d(4, 6, 3, 2, 1, 1, 2, False, 3, "zeros", rngs=R)
    assert (up.output_padding, up.groups, up.bias, up.dilation) == ((1, 1), 2, None, (3, 3))
    assert up.weight.value.shape == (6, 2, 3, 3)  # [C_out, C_in / groups, KH, KW]


def test_same_padding_puts_the_odd_zero_on_the_right():
    # A 2-tap kernel [0, 1] picks x[i + 1]: with PyTorch's 'same' the last output reads the
    # right-hand zero.
    x = jnp.arange(1.0, 5.0).reshape(1, 1, 4)
    y = F.conv1d(x, jnp.array([[[0.0, 1.0]]]), padding="same")
    assert y.tolist() == [[[2.0, 3.0, 4.0, 0.0]]]
    assert F.conv_padding("same", (4, 5), (4, 3), 1, (1, 2)) == [(1, 2), (2, 2)]


def test_max_pool_padding_is_minus_infinity_and_ceil_mode_drops_a_window_in_padding():
    x = -jnp.ones((1, 1, 4))
    assert F.max_pool1d(x, 2, 2, 1).tolist() == [[[-1.0, -1.0, -1.0]]]  # not the padding's 0
    # L=7, k=3, s=3: ceil_mode rounds 7 / 3 up to a third window that overhangs the input;
    # AvgPool divides it by its part inside (the values stay 1), as PyTorch does.
    assert F.max_pool1d(jnp.ones((1, 1, 7)), 3, 3).shape == (1, 1, 2)
    assert F.avg_pool1d(jnp.ones((1, 1, 7)), 3, 3, ceil_mode=True).tolist() == [[[1.0] * 3]]
    # L=5, k=2, s=2, p=1: the formula's fourth window would start at input index 5, in the
    # right padding only, so ceil_mode drops it (PyTorch's rule): 3 windows, not 4.
    assert F.max_pool1d(jnp.ones((1, 1, 5)), 2, 2, 1, ceil_mode=True).shape == (1, 1, 3)


def test_batchnorm_without_running_stats_uses_batch_statistics_in_eval():
    bn = nn.BatchNorm2d(3, track_running_stats=False).eval()
    assert bn.running_mean is None and list(bn.state_dict()) == ["weight", "bias"]
    x = jax.random.normal(jax.random.key(0), (4, 3, 2, 2)) * 3 + 1
    y = np.asarray(bn(x))
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0.0, atol=1e-5)
    assert list(nn.torch_state_dict(bn)) == ["weight", "bias"]  # no num_batches_tracked
    with pytest.raises(ValueError, match=r"BatchNorm2d: expected more than 1 value per channel"):
        bn(jnp.ones((1, 3, 1, 1)))  # batch statistics in eval too: PyTorch refuses this as well


def test_embedding_padding_row_starts_at_zero_and_gets_no_gradient():
    emb = nn.Embedding(6, 3, padding_idx=-2, rngs=R)
    assert emb.padding_idx == 4
    np.testing.assert_array_equal(emb.weight.value[4], 0.0)
    assert np.all(np.asarray(emb.weight.value[:4]) != 0.0)
    idx = jnp.array([[4, 1, 4, 0]])
    grad = jax.grad(lambda w: (F.embedding(idx, w, 4) * 2.0).sum())(emb.weight.value + 1.0)
    np.testing.assert_array_equal(grad[4], 0.0)
    np.testing.assert_array_equal(grad[1], 2.0)
    assert F.embedding(idx, jnp.ones((6, 3)), 4)[0, 0].tolist() == [1.0, 1.0, 1.0]  # kept value


@pytest.mark.parametrize(
    "layer, shape, axes",
    [
        (nn.Dropout1d(0.5), (4, 16, 5), (2,)),
        (nn.Dropout1d(0.5), (16, 5), (1,)),
        (nn.Dropout2d(0.5), (4, 16, 3, 3), (2, 3)),
    ],
)
def test_channel_dropout_zeroes_whole_channels_in_training_only(layer, shape, axes):
    rngs = js.Rngs(dropout=0)
    y = np.asarray(layer(jnp.ones(shape), rngs=rngs))
    zeroed, kept = (y == 0).all(axis=axes), (y == 2.0).all(axis=axes)
    assert np.all(zeroed | kept) and zeroed.any() and kept.any()
    assert int(rngs.state_dict()["dropout.count"]) == 1
    with pytest.raises(ValueError, match=rf"{type(layer).__name__} in training mode needs random"):
        layer(jnp.ones(shape))
    np.testing.assert_array_equal(layer.eval()(jnp.ones(shape)), 1.0)


def test_dropout_accepts_inplace_positionally():
    assert nn.Dropout(0.2, True).inplace and "inplace=True" in repr(nn.Dropout(0.2, True))
    assert F.dropout(jnp.ones(3), 0.5, False, True).tolist() == [1.0, 1.0, 1.0]


def test_inplace_is_accepted_on_every_activation_that_has_it():
    x = jnp.linspace(-2.0, 8.0, 6)
    for layer in (
        nn.ReLU(True),
        nn.ReLU6(True),
        nn.SiLU(True),
        nn.LeakyReLU(0.1, True),
        nn.ELU(1.0, True),
        nn.Hardtanh(-1.0, 1.0, True),
    ):
        assert layer.inplace and layer(x).shape == x.shape
    assert F.relu(x, inplace=True).tolist() == F.relu(x).tolist()


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: nn.AdaptiveAvgPool2d((3, 2))(jnp.ones((1, 2, 4, 4))),
            NotImplementedError,
            r"AdaptiveAvgPool2d: output_size \(3, 2\) must divide the input's spatial "
            r"size \[4, 4\]",
        ),
        (
            lambda: nn.AdaptiveAvgPool1d(3)(jnp.ones((1, 2, 4))),
            NotImplementedError,
            r"AdaptiveAvgPool1d: output_size \(3,\) must divide",
        ),
        (
            lambda: nn.Upsample(scale_factor=2, mode="bilinear")(jnp.ones((1, 2, 4))),
            ValueError,
            r"interpolate\(mode='bilinear'\): expected input of shape \[B, C, H, W\], "
            r"got \[1, 2, 4\]",
        ),
        (
            lambda: nn.Upsample(size=(2, 3, 4))(jnp.ones((1, 2, 4, 4))),
            ValueError,
            r"interpolate: size must be one or 2 positive ints for a 4-D input, got \(2, 3, 4\)",
        ),
        (
            lambda: nn.Upsample(scale_factor=-1.0)(jnp.ones((1, 2, 4))),
            ValueError,
            r"interpolate: scale_factor must be one or 1 positive numbers",
        ),
        (
            lambda: nn.Upsample(scale_factor=0.1)(jnp.ones((1, 2, 4))),
            ValueError,
            r"interpolate: the output size would be \[0\]",
        ),
        (
            lambda: F.interpolate(jnp.ones((1, 2, 4)), 3, 2.0),
            ValueError,
            r"interpolate: only one of size or scale_factor must be given",
        ),
        (
            lambda: F.interpolate(jnp.ones((1, 2, 4))),
            ValueError,
            r"interpolate: either size or scale_factor must be given",
        ),
        (
            lambda: F.interpolate(jnp.ones((1, 2, 4)), 3, antialias=True),
            NotImplementedError,
            r"interpolate: antialias=True is not supported",
        ),
        (
            lambda: F.max_pool2d(jnp.ones((1, 1, 4, 4)), 2, padding=2),
            ValueError,
            r"max_pool2d: padding \(2, 2\) must be at most half the kernel size \(2, 2\)",
        ),
        (
            lambda: F.dropout2d(jnp.ones((1, 2, 3, 3)), 0.5),
            ValueError,
            r"dropout in training needs a random key",
        ),
    ],
)
def test_call_time_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_dtype_argument_sets_every_parameter_and_statistic():
    layers = [
        nn.Linear(2, 3, rngs=R, dtype=jnp.bfloat16),
        nn.Conv2d(2, 4, 3, rngs=R, dtype="float16"),
        nn.ConvTranspose1d(2, 4, 3, rngs=R, dtype=jnp.bfloat16),
        nn.BatchNorm1d(3, dtype=jnp.bfloat16),
        nn.LayerNorm(3, dtype=jnp.bfloat16),
        nn.GroupNorm(1, 3, dtype=jnp.bfloat16),
        nn.Embedding(5, 3, rngs=R, dtype=jnp.bfloat16),
    ]
    for layer in layers:
        dtypes = {np.dtype(v.dtype) for v in layer.state_dict().values()}
        assert len(dtypes) == 1 and dtypes <= {np.dtype(jnp.bfloat16), np.dtype(np.float16)}


_X64_SCRIPT = """
import json, jax, numpy as np
jax.config.update("jax_enable_x64", True)
import js, js.nn as nn
r = js.Rngs(params=0)
layers = {
    "Linear": nn.Linear(3, 4, rngs=r), "Conv1d": nn.Conv1d(2, 4, 3, rngs=r),
    "Conv2d": nn.Conv2d(2, 4, 3, rngs=r), "ConvTranspose1d": nn.ConvTranspose1d(2, 4, 3, rngs=r),
    "ConvTranspose2d": nn.ConvTranspose2d(2, 4, 3, rngs=r), "BatchNorm1d": nn.BatchNorm1d(3),
    "BatchNorm2d": nn.BatchNorm2d(3), "LayerNorm": nn.LayerNorm(3), "GroupNorm": nn.GroupNorm(1, 3),
    "Embedding": nn.Embedding(5, 3, padding_idx=0, rngs=r),
    "MultiheadAttention": nn.MultiheadAttention(4, 2, rngs=r),
    "RNN": nn.RNN(3, 4, rngs=r), "LSTM": nn.LSTM(3, 4, rngs=r),
}
dtypes = {name: sorted({str(v.dtype) for v in layer.state_dict().values()})
          for name, layer in layers.items()}
model = nn.Sequential(nn.Conv2d(2, 4, 3, rngs=r), nn.BatchNorm2d(4))
torch_sd = {k: (v.astype(np.float32) if v.dtype.kind == "f" else v)
            for k, v in nn.torch_state_dict(model).items()}
print(json.dumps({"dtypes": dtypes, "loaded": list(nn.load_torch_state_dict(model, torch_sd))}))
"""


@pytest.mark.process
@pytest.mark.slow
def test_layers_create_float32_under_jax_enable_x64():
    # x64 is process-wide, so it runs in a fresh interpreter.
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_X64_SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["dtypes"] == {name: ["float32"] for name in result["dtypes"]}
    assert result["loaded"] == [[], []]  # a float32 state dict loads strictly


def test_pytorch_only_keywords_are_refused_as_porting_md_says():
    with pytest.raises(TypeError, match="device"):
        nn.Linear(2, 3, rngs=R, device="cpu")
    with pytest.raises(TypeError, match="_weight"):
        nn.Embedding(5, 3, rngs=R, _weight=np.zeros((5, 3)))
    up = nn.ConvTranspose2d(2, 2, 3, 2, rngs=R)
    with pytest.raises(TypeError, match="output_size"):
        up(jnp.ones((1, 2, 4, 4)), output_size=(9, 9))


def test_sequential_refuses_an_ordered_dict_as_porting_md_says():
    import collections

    with pytest.raises(TypeError, match=r"Sequential: layer 0 must be a js Module, got Ordered"):
        nn.Sequential(collections.OrderedDict(act=nn.ReLU()))


def test_refused_construction_leaves_rngs_untouched():
    rngs = js.Rngs(params=0)
    for build in (
        lambda: nn.Conv2d(2, 4, 3, bias="yes", rngs=rngs),
        lambda: nn.Embedding(5, 3, rngs=rngs, dtype=jnp.int32),
        lambda: nn.Linear(2, 3, rngs=rngs, dtype=jnp.int8),
    ):
        with pytest.raises(TypeError):
            build()
    assert int(rngs.state_dict()["params.count"]) == 0
