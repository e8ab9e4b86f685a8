"""TransformerEncoderLayer and TransformerEncoder: PyTorch numbers, state dicts, dropout, errors."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js._checks import flatten_state
from js.nn import LayerNorm, TransformerEncoder, TransformerEncoderLayer
from js.nn.attention import padding_mask

B, T, D, HEADS, FF = 2, 5, 8, 2, 12
TOLERANCE = 2e-5  # float32 on CPU; measured: outputs <= 1e-6, gradients <= 4e-6
VALID = np.array([[True] * T, [True, True, True, False, False]])
CAUSAL = np.tril(np.ones((T, T), bool))


def _x(seed=0, batch_first=True):
    x = jnp.asarray(np.random.default_rng(seed).normal(size=(B, T, D)), jnp.float32)
    return x if batch_first else jnp.swapaxes(x, 0, 1)


def _layer(**kwargs):
    kwargs = {"dropout": 0.0} | kwargs
    return TransformerEncoderLayer(D, HEADS, FF, rngs=js.Rngs(params=0), **kwargs)


def _js_mask():
    return jnp.asarray(CAUSAL)[None, None] & padding_mask(VALID)  # True = allowed


# -- PyTorch ---------------------------------------------------------------------------------


def _weighted(out, like):
    w = np.cos(np.arange(np.prod(out.shape))).reshape(tuple(out.shape)).astype(np.float32)
    return (out * like(w)).sum()


def _torch_run(torch, ref, x, **masks):
    xt = torch.tensor(np.asarray(x), requires_grad=True)
    masks = {k: torch.tensor(~v) for k, v in masks.items()}  # PyTorch: True = blocked
    out = ref(xt, **masks)
    _weighted(out, torch.tensor).backward()
    result = {"output": out, "grad_x": xt.grad}
    result |= {f"grad_{k}": p.grad for k, p in ref.named_parameters()}
    return {k: v.detach().numpy() for k, v in result.items()}


def _js_run(model, x, mask):
    graphdef, params = js.split(model)

    def loss(params, x):
        out = js.merge(graphdef, params)(x, mask)
        return _weighted(out, jnp.asarray), {"output": out}

    # One program (eager, every op of the forward and backward compiled on its own: 8 s).
    grads, result = jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True))(params, x)
    result["grad_x"] = grads[1]
    return result | {f"grad_{k}": g for k, g in flatten_state(grads[0]).items()}


def _compare(want, got):
    assert sorted(want) == sorted(got)
    diffs = {k: float(np.abs(np.asarray(got[k]) - want[k]).max()) for k in want}
    assert max(diffs.values()) <= TOLERANCE, diffs


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"activation": "relu", "norm_first": False},
        {"activation": "gelu", "norm_first": True},
        {"activation": "gelu", "norm_first": False, "batch_first": False},
        {"activation": "relu", "norm_first": True, "bias": False},
    ],
)
def test_layer_matches_pytorch(kwargs, mode):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    kwargs = {"batch_first": True} | kwargs
    ref = torch.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, **kwargs)
    layer = _layer(**kwargs)
    assert list(layer.state_dict()) == list(ref.state_dict())
    js.nn.load_torch_state_dict(layer, ref.state_dict())
    getattr(ref, mode)(), getattr(layer, mode)()
    x = _x(batch_first=kwargs["batch_first"])
    want = _torch_run(torch, ref, x, src_mask=CAUSAL, src_key_padding_mask=VALID)
    _compare(want, _js_run(layer, x, _js_mask()))


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_two_layer_encoder_loads_pytorch_weights_and_matches(mode):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    ref = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(
            D, HEADS, FF, dropout=0.0, batch_first=True, norm_first=True
        ),
        2,
        norm=torch.nn.LayerNorm(D),
        enable_nested_tensor=False,
    )
    with torch.no_grad():  # PyTorch's copies start equal: make layer 1 differ from layer 0
        for p in ref.layers[1].parameters():
            p.add_(0.1 * torch.randn_like(p))
        ref.norm.bias.add_(0.5)
    layer = _layer(norm_first=True)
    model = TransformerEncoder(layer, 2, norm=LayerNorm(D), enable_nested_tensor=False)
    assert sorted(model.state_dict()) == sorted(ref.state_dict())  # deepcopy sorts the keys
    assert js.nn.load_torch_state_dict(model, ref.state_dict()) == ([], [])
    getattr(ref, mode)(), getattr(model, mode)()
    want = _torch_run(torch, ref, _x(), mask=CAUSAL, src_key_padding_mask=VALID)
    _compare(want, _js_run(model, _x(), _js_mask()))
    exported = js.nn.torch_state_dict(model)
    ref.load_state_dict({k: torch.from_numpy(v) for k, v in exported.items()})


# -- the encoder's copies --------------------------------------------------------------------


def test_encoder_copies_start_equal_and_are_independent_under_jit():
    model = TransformerEncoder(_layer(), 2)
    sd = model.state_dict()
    for key in ("self_attn.in_proj_weight", "linear2.weight"):
        np.testing.assert_array_equal(sd[f"layers.0.{key}"], sd[f"layers.1.{key}"])
    optimizer_step = js.jit(lambda m, x: _apply_sgd(m, js.grad(_loss)(m, x)))
    optimizer_step(model, _x())  # every copy owns its buffers: js.jit donates each once
    after = model.state_dict()
    assert not np.array_equal(after["layers.0.linear1.weight"], sd["layers.0.linear1.weight"])
    assert not np.array_equal(after["layers.0.linear1.weight"], after["layers.1.linear1.weight"])


def _loss(model, x):
    return jnp.sum(model(x) ** 2)


def _apply_sgd(model, grads):
    for name, parameter in model.named_parameters():
        parameter.value = parameter.value - 0.1 * flatten_state(grads)[name]


# -- dropout, activation, dtype --------------------------------------------------------------


def test_dropout_in_training_needs_rngs_and_changes_the_output():
    layer = TransformerEncoderLayer(D, HEADS, FF, rngs=js.Rngs(params=0))  # dropout=0.1
    x = _x()
    with pytest.raises(
        ValueError,
        match=r"TransformerEncoderLayer: dropout=0.1 in training mode"
        r" needs random keys. Fix: pass rngs=rngs",
    ):
        layer(x)
    first = layer(x, rngs=js.Rngs(dropout=0))
    np.testing.assert_array_equal(first, layer(x, rngs=js.Rngs(dropout=0)))
    clean = layer.eval()(x)
    assert first.shape == clean.shape and not np.allclose(first, clean)
    encoder = TransformerEncoder(layer, 2).train()
    assert encoder(x, rngs=js.Rngs(dropout=0)).shape == (B, T, D)


def test_callable_activations():
    x = _x()
    by_name, as_module, as_function = (
        _layer(activation=a) for a in ("gelu", js.nn.GELU(), lambda v: js.nn.functional.gelu(v))
    )
    for other in (as_module, as_function):
        js.nn.load_torch_state_dict(other, by_name.state_dict())
        np.testing.assert_allclose(other(x), by_name(x), atol=1e-6)
    assert "activation=gelu" in repr(by_name).splitlines()[0]


def test_parameters_are_float32_under_x64_unless_given_dtype():
    with jax.enable_x64(True):
        default, wide = _layer(), _layer(dtype=jnp.float64, bias=False)
    assert {v.dtype for v in default.state_dict().values()} == {np.dtype(np.float32)}
    assert {v.dtype for v in wide.state_dict().values()} == {np.dtype(np.float64)}
    assert not [k for k in wide.state_dict() if k.endswith("bias")]


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (
            {"activation": "tanh"},
            ValueError,
            r"TransformerEncoderLayer: activation must be 'relu', "
            r"'gelu' or a callable, got 'tanh'",
        ),
        ({"activation": 3}, TypeError, r"activation must be 'relu', 'gelu' or a callable, got int"),
        (
            {"norm_first": 1},
            TypeError,
            r"TransformerEncoderLayer: norm_first must be True or False, got 1",
        ),
        ({"batch_first": None}, TypeError, r"TransformerEncoderLayer: batch_first must be True or"),
        ({"dropout": 2.0}, ValueError, r"TransformerEncoderLayer: dropout must be in \[0, 1\]"),
        ({"dtype": "int32"}, TypeError, r"TransformerEncoderLayer: dtype must be a floating-point"),
    ],
)
def test_bad_layer_options_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        _layer(**kwargs)


@pytest.mark.parametrize(
    "owner, name",
    [
        ("TransformerEncoderLayer", "src_mask"),
        ("TransformerEncoderLayer", "src_key_padding_mask"),
        ("TransformerEncoder", "src_key_padding_mask"),
    ],
)
def test_pytorch_mask_keywords_are_refused_with_the_polarity_fix(owner, name):
    model = _layer() if owner == "TransformerEncoderLayer" else TransformerEncoder(_layer(), 1)
    with pytest.raises(TypeError, match=rf"{owner}: {name} is PyTorch's mask \(True = blocked"):
        model(_x(), **{name: ~VALID})


def test_float_masks_are_refused():
    additive = jnp.where(jnp.asarray(CAUSAL), 0.0, -jnp.inf)  # PyTorch's square subsequent mask
    with pytest.raises(
        TypeError,
        match=r"MultiheadAttention: mask must be boolean \(True = "
        r"allowed\), got dtype float32",
    ):
        TransformerEncoder(_layer(), 2)(_x(), mask=additive)


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        (
            (_layer, 2),
            {},
            TypeError,
            r"TransformerEncoder: encoder_layer must be a Module \(a "
            r"TransformerEncoderLayer\), got function",
        ),
        (
            (None, 0),
            {},
            ValueError,
            r"TransformerEncoder: num_layers must be an int >= 1, got 0",
        ),
        (
            (None, 2),
            {"norm": jnp.ones(D)},
            TypeError,
            r"TransformerEncoder: norm must be a Module or None, got ArrayImpl",
        ),
        (
            (None, 2),
            {"enable_nested_tensor": "no"},
            TypeError,
            r"TransformerEncoder: enable_nested_tensor must be True or False, got 'no'",
        ),
    ],
)
def test_bad_encoder_arguments_are_refused(args, kwargs, error, match):
    layer = args[0] if args[0] is not None else _layer()
    with pytest.raises(error, match=match):
        TransformerEncoder(layer, args[1], **kwargs)


def test_deepcopy_of_a_layer_is_a_torch_style_clone():
    layer = _layer()
    clone = copy.deepcopy(layer)
    clone.linear1.weight.value = clone.linear1.weight.value * 0
    assert np.abs(layer.linear1.weight.value).max() > 0


def test_sequence_layers_are_exported():
    names = {"GRU", "TransformerEncoder", "TransformerEncoderLayer"}
    assert names <= set(js.nn.__all__) and all(hasattr(js.nn, n) for n in names)
