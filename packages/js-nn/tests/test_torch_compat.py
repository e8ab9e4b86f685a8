"""Each layer against PyTorch: same weights, same outputs and gradients, training and eval."""

from __future__ import annotations

import copy
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import js
import js.nn as nn
from js._checks import flatten_state

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
tnn = torch.nn

# Largest absolute difference to PyTorch per layer (printed by test_report with -s).
MAX_DIFF: dict[str, float] = {}

PAIRS = [
    ("Linear", lambda r: nn.Linear(4, 3, rngs=r), lambda: tnn.Linear(4, 3), (2, 5, 4)),
    (
        "Conv1d",
        lambda r: nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2, rngs=r),
        lambda: tnn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2),
        (2, 4, 9),
    ),
    (
        "Conv2d",
        lambda r: nn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 0), rngs=r),
        lambda: tnn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 0)),
        (2, 3, 8, 8),
    ),
    (
        "Conv2d-same",
        lambda r: nn.Conv2d(3, 4, 3, padding="same", rngs=r),
        lambda: tnn.Conv2d(3, 4, 3, padding="same"),
        (2, 3, 6, 6),
    ),
    (
        "ConvTranspose2d",
        lambda r: nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1, rngs=r),
        lambda: tnn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1),
        (2, 3, 5, 5),
    ),
    (
        "MaxPool2d",
        lambda r: nn.MaxPool2d(3, stride=2),
        lambda: tnn.MaxPool2d(3, stride=2),
        (2, 3, 9, 9),
    ),
    ("AvgPool2d", lambda r: nn.AvgPool2d(2), lambda: tnn.AvgPool2d(2), (2, 3, 8, 8)),
    (
        "AdaptiveAvgPool2d",
        lambda r: nn.AdaptiveAvgPool2d((1, 1)),
        lambda: tnn.AdaptiveAvgPool2d((1, 1)),
        (2, 3, 5, 4),
    ),
    ("BatchNorm1d", lambda r: nn.BatchNorm1d(3), lambda: tnn.BatchNorm1d(3), (6, 3, 5)),
    ("BatchNorm1d-NC", lambda r: nn.BatchNorm1d(3), lambda: tnn.BatchNorm1d(3), (6, 3)),
    ("BatchNorm2d", lambda r: nn.BatchNorm2d(3), lambda: tnn.BatchNorm2d(3), (4, 3, 5, 5)),
    ("LayerNorm", lambda r: nn.LayerNorm((5, 8)), lambda: tnn.LayerNorm((5, 8)), (2, 5, 8)),
    ("Embedding", lambda r: nn.Embedding(10, 4, rngs=r), lambda: tnn.Embedding(10, 4), (2, 5)),
    ("ReLU", lambda r: nn.ReLU(), lambda: tnn.ReLU(), (3, 4)),
    ("GELU", lambda r: nn.GELU(), lambda: tnn.GELU(), (3, 4)),
    ("GELU-tanh", lambda r: nn.GELU("tanh"), lambda: tnn.GELU("tanh"), (3, 4)),
    ("Tanh", lambda r: nn.Tanh(), lambda: tnn.Tanh(), (3, 4)),
    ("Sigmoid", lambda r: nn.Sigmoid(), lambda: tnn.Sigmoid(), (3, 4)),
    ("Flatten", lambda r: nn.Flatten(), lambda: tnn.Flatten(), (2, 3, 4)),
]

# The arguments a port needs (issue 12), each called positionally where PyTorch code does.
PORT_PAIRS = [
    (
        "Conv2d-dilation-positional",
        lambda r: nn.Conv2d(4, 6, 3, 1, 2, 2, rngs=r),
        lambda: tnn.Conv2d(4, 6, 3, 1, 2, 2),
        (2, 4, 9, 9),
    ),
    (
        "Conv2d-same-even",
        lambda r: nn.Conv2d(3, 4, (4, 2), 1, "same", (1, 2), rngs=r),
        lambda: tnn.Conv2d(3, 4, (4, 2), 1, "same", (1, 2)),
        (2, 3, 7, 6),
    ),
    (
        "Conv1d-same-groups-nobias",
        lambda r: nn.Conv1d(4, 6, 4, 1, "same", 3, 2, False, rngs=r),
        lambda: tnn.Conv1d(4, 6, 4, 1, "same", 3, 2, False),
        (2, 4, 11),
    ),
    (
        "Conv1d-valid-zeros",
        lambda r: nn.Conv1d(3, 2, 3, 2, "valid", padding_mode="zeros", rngs=r),
        lambda: tnn.Conv1d(3, 2, 3, 2, "valid", padding_mode="zeros"),
        (2, 3, 9),
    ),
    (
        "ConvTranspose2d-groups-dilation",
        lambda r: nn.ConvTranspose2d(4, 6, 3, 2, 1, 1, 2, True, 2, rngs=r),
        lambda: tnn.ConvTranspose2d(4, 6, 3, 2, 1, 1, 2, True, 2),
        (2, 4, 5, 4),
    ),
    (
        "ConvTranspose1d",
        lambda r: nn.ConvTranspose1d(4, 6, 4, 2, 1, groups=2, rngs=r),
        lambda: tnn.ConvTranspose1d(4, 6, 4, 2, 1, groups=2),
        (2, 4, 7),
    ),
    (
        "MaxPool2d-stem",
        lambda r: nn.MaxPool2d(3, 2, 1),
        lambda: tnn.MaxPool2d(3, 2, 1),
        (2, 3, 9, 9),
    ),
    (
        "MaxPool2d-ceil-dilation",
        lambda r: nn.MaxPool2d(3, 2, 1, 2, ceil_mode=True),
        lambda: tnn.MaxPool2d(3, 2, 1, 2, ceil_mode=True),
        (2, 3, 10, 9),
    ),
    (
        "MaxPool1d-ceil",
        lambda r: nn.MaxPool1d(2, 2, 1, ceil_mode=True),
        lambda: tnn.MaxPool1d(2, 2, 1, ceil_mode=True),
        (2, 3, 8),
    ),
    (
        "AvgPool2d-pad-ceil",
        lambda r: nn.AvgPool2d(3, 2, 1, True),
        lambda: tnn.AvgPool2d(3, 2, 1, True),
        (2, 3, 8, 7),
    ),
    (
        "AvgPool2d-exclude-pad",
        lambda r: nn.AvgPool2d((3, 2), 2, (1, 1), True, False),
        lambda: tnn.AvgPool2d((3, 2), 2, (1, 1), True, False),
        (2, 3, 8, 7),
    ),
    (
        "AvgPool2d-divisor",
        lambda r: nn.AvgPool2d(2, divisor_override=3),
        lambda: tnn.AvgPool2d(2, divisor_override=3),
        (2, 3, 6, 6),
    ),
    (
        "AvgPool1d",
        lambda r: nn.AvgPool1d(3, 2, 1, True, False),
        lambda: tnn.AvgPool1d(3, 2, 1, True, False),
        (2, 3, 8),
    ),
    (
        "AdaptiveAvgPool2d-2x3",
        lambda r: nn.AdaptiveAvgPool2d((2, 3)),
        lambda: tnn.AdaptiveAvgPool2d((2, 3)),
        (2, 3, 4, 6),
    ),
    (
        "AdaptiveAvgPool2d-None",
        lambda r: nn.AdaptiveAvgPool2d((None, 2)),
        lambda: tnn.AdaptiveAvgPool2d((None, 2)),
        (2, 3, 3, 4),
    ),
    (
        "AdaptiveAvgPool1d",
        lambda r: nn.AdaptiveAvgPool1d(2),
        lambda: tnn.AdaptiveAvgPool1d(2),
        (2, 3, 6),
    ),
    (
        "BatchNorm2d-positional",
        lambda r: nn.BatchNorm2d(3, 1e-3, 0.3),
        lambda: tnn.BatchNorm2d(3, 1e-3, 0.3),
        (4, 3, 3, 3),
    ),
    (
        "BatchNorm2d-noaffine",
        lambda r: nn.BatchNorm2d(3, affine=False),
        lambda: tnn.BatchNorm2d(3, affine=False),
        (4, 3, 3, 3),
    ),
    (
        "BatchNorm1d-untracked",
        lambda r: nn.BatchNorm1d(3, 1e-5, 0.1, True, False),
        lambda: tnn.BatchNorm1d(3, 1e-5, 0.1, True, False),
        (6, 3, 4),
    ),
    (
        "LayerNorm-nobias",
        lambda r: nn.LayerNorm(8, bias=False),
        lambda: tnn.LayerNorm(8, bias=False),
        (2, 5, 8),
    ),
    (
        "LayerNorm-noaffine",
        lambda r: nn.LayerNorm(8, 1e-3, False),
        lambda: tnn.LayerNorm(8, 1e-3, False),
        (2, 5, 8),
    ),
    ("GroupNorm", lambda r: nn.GroupNorm(2, 4), lambda: tnn.GroupNorm(2, 4), (2, 4, 5, 3)),
    (
        "GroupNorm-noaffine",
        lambda r: nn.GroupNorm(4, 4, 1e-3, False),
        lambda: tnn.GroupNorm(4, 4, 1e-3, False),
        (2, 4, 6),
    ),
    (
        "Embedding-padding",
        lambda r: nn.Embedding(10, 4, 0, rngs=r),
        lambda: tnn.Embedding(10, 4, 0),
        (4, 6),
    ),
    (
        "Embedding-padding-negative",
        lambda r: nn.Embedding(10, 4, padding_idx=-1, rngs=r),
        lambda: tnn.Embedding(10, 4, padding_idx=-1),
        (4, 6),
    ),
    ("ReLU-inplace", lambda r: nn.ReLU(True), lambda: tnn.ReLU(), (3, 4)),
    ("LeakyReLU", lambda r: nn.LeakyReLU(0.2, True), lambda: tnn.LeakyReLU(0.2), (3, 4)),
    ("SiLU", lambda r: nn.SiLU(), lambda: tnn.SiLU(), (3, 4)),
    ("ELU", lambda r: nn.ELU(0.5), lambda: tnn.ELU(0.5), (3, 4)),
    ("Hardtanh", lambda r: nn.Hardtanh(-0.5, 1.5), lambda: tnn.Hardtanh(-0.5, 1.5), (3, 4)),
    ("ReLU6", lambda r: nn.ReLU6(), lambda: tnn.ReLU6(), (3, 4)),
    ("Softmax", lambda r: nn.Softmax(dim=1), lambda: tnn.Softmax(dim=1), (3, 4, 2)),
    ("LogSoftmax", lambda r: nn.LogSoftmax(-1), lambda: tnn.LogSoftmax(-1), (3, 4)),
    (
        "Identity-args",
        lambda r: nn.Identity(3, unused=1),
        lambda: tnn.Identity(3, unused=1),
        (3, 4),
    ),
    (
        "Upsample-nearest",
        lambda r: nn.Upsample(scale_factor=2),
        lambda: tnn.Upsample(scale_factor=2),
        (2, 3, 3, 4),
    ),
    (
        "Upsample-nearest-1.7",
        lambda r: nn.Upsample(scale_factor=1.7),
        lambda: tnn.Upsample(scale_factor=1.7),
        (2, 3, 4, 5),
    ),
    (
        "Upsample-nearest-size-1d",
        lambda r: nn.Upsample(size=7),
        lambda: tnn.Upsample(size=7),
        (2, 3, 4),
    ),
    (
        "Upsample-bilinear",
        lambda r: nn.Upsample(scale_factor=2, mode="bilinear"),
        lambda: tnn.Upsample(scale_factor=2, mode="bilinear"),
        (2, 3, 3, 4),
    ),
    (
        "Upsample-bilinear-1.5",
        lambda r: nn.Upsample(scale_factor=(1.5, 2.5), mode="bilinear"),
        lambda: tnn.Upsample(scale_factor=(1.5, 2.5), mode="bilinear"),
        (2, 3, 4, 3),
    ),
    (
        "Upsample-bilinear-corners",
        lambda r: nn.Upsample((7, 9), None, "bilinear", True),
        lambda: tnn.Upsample((7, 9), None, "bilinear", True),
        (2, 3, 3, 4),
    ),
    (
        "Upsample-bilinear-recompute",
        lambda r: nn.Upsample(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
        lambda: tnn.Upsample(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
        (2, 3, 4, 5),
    ),
    (
        "Upsample-linear",
        lambda r: nn.Upsample(size=7, mode="linear"),
        lambda: tnn.Upsample(size=7, mode="linear"),
        (2, 3, 4),
    ),
    (
        "Upsample-linear-corners",
        lambda r: nn.Upsample(scale_factor=3, mode="linear", align_corners=True),
        lambda: tnn.Upsample(scale_factor=3, mode="linear", align_corners=True),
        (2, 3, 4),
    ),
]
PAIRS += PORT_PAIRS


def _randomise(module) -> None:
    # Non-trivial affine parameters and running statistics, so that every term is exercised.
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            if tensor.is_floating_point():
                tensor.copy_(torch.rand(tensor.shape, generator=gen) + 0.5)


def _js_forward_and_grads(layer, x, cotangent):
    """Output, d<out, cotangent>/dx and d/dparams, in one compiled call (buffer updates kept).

    Compiled rather than eager: eagerly, each operation of the forward and backward pass is
    its own XLA program, compiled once per shape, which cost 2-5x the compiled call over this
    table (the default run's comparisons: 903 programs and 55 s of CPU time -> 176 and 22 s;
    GroupNorm 3.2 s -> 0.7 s). Under the gradient the inputs and parameters are traced either
    way; compiled and eager calls are compared by test_layers.py (forward, every layer of its
    table) and test_ports.py's test_padded_pools_differentiate_under_jit (gradients).
    """
    integer = jnp.issubdtype(x.dtype, jnp.integer)

    def loss(model, inp, cot):
        out = model(inp)
        return jnp.sum(out * cot), out

    argnums = nnx.DiffState(0, js.Parameter) if integer else (nnx.DiffState(0, js.Parameter), 1)
    grad_fn = nnx.grad(loss, argnums=argnums, has_aux=True, graph=True, graph_updates=True)
    grads, out = nnx.jit(grad_fn)(layer, x, cotangent)
    param_grads, x_grad = (grads, None) if integer else grads
    return out, x_grad, flatten_state(param_grads)


def _torch_forward_and_grads(module, x, cotangent):
    tx = torch.from_numpy(np.array(x))
    if tx.is_floating_point():
        tx.requires_grad_(True)
    out = module(tx)
    (out * torch.from_numpy(np.array(cotangent))).sum().backward()
    grads = {name: p.grad.numpy() for name, p in module.named_parameters()}
    return out.detach().numpy(), (tx.grad.numpy() if tx.grad is not None else None), grads


def _record(name: str, *pairs) -> float:
    diff = max(
        (float(np.max(np.abs(np.asarray(a) - np.asarray(b)), initial=0.0)) for a, b in pairs),
        default=0.0,
    )
    MAX_DIFF[name] = max(MAX_DIFF.get(name, 0.0), diff)
    return diff


def _make_input(name, shape, seed=1):
    # NumPy, not jax.random: a jax.random draw compiles one program per new shape, which cost
    # more than the comparison itself over this table.
    rng = np.random.default_rng(seed)
    if name.startswith("Embedding"):
        return jnp.asarray(rng.integers(0, 10, shape))
    return jnp.asarray(rng.standard_normal(shape, np.float32))


# Only BatchNorm (and Dropout, below) behave differently in the two modes: the other layers'
# evaluation-mode comparisons repeat the training ones and run with the slow tests.
CALLS = [
    pytest.param(
        *pair,
        mode,
        id=f"{pair[0]}-{mode}",
        marks=() if mode == "train" or "BatchNorm" in pair[0] else pytest.mark.slow,
    )
    for pair in PAIRS
    for mode in ("train", "eval")
]


def _check_state_dict_names_and_round_trip(layer, module):
    """PyTorch's keys in PyTorch's order, and ``to_torch(from_torch(v)) == v`` for each."""
    exported = nn.torch_state_dict(layer)
    assert list(exported) == list(module.state_dict())
    for key, value in module.state_dict().items():
        np.testing.assert_array_equal(exported[key], value.numpy())


# torch warns that an even 'same' kernel pads a copy of the input (a speed note, not a bug).
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("name, make_js, make_torch, shape, mode", CALLS)
def test_matches_pytorch(name, make_js, make_torch, shape, mode):
    torch.manual_seed(0)
    module = make_torch()
    _randomise(module)
    layer = make_js(js.Rngs(params=0))
    nn.load_torch_state_dict(layer, module.state_dict())
    _check_state_dict_names_and_round_trip(layer, module)
    module.train(mode == "train")
    layer.train(mode == "train")
    x = _make_input(name, shape)
    with torch.no_grad():  # the output shape, from a copy (its buffers may update)
        out_shape = tuple(copy.deepcopy(module)(torch.from_numpy(np.array(x))).shape)
    cot = _make_input("cotangent", out_shape, seed=2)
    out, x_grad, grads = _js_forward_and_grads(layer, x, cot)
    to_torch = getattr(layer, "to_torch", lambda key, array: array)
    grads = {key: to_torch(key, np.asarray(value)) for key, value in grads.items()}
    t_out, t_x_grad, t_grads = _torch_forward_and_grads(module, x, cot)
    pairs = [(out, t_out), *((grads[k], t_grads[k]) for k in t_grads)]
    if x_grad is not None:
        pairs.append((x_grad, t_x_grad))
    assert sorted(grads) == sorted(t_grads)
    assert _record(name, *pairs) < 1e-5 * max(1.0, float(np.max(np.abs(t_out))))
    if name.startswith("BatchNorm") and mode == "train" and layer.track_running_stats:
        _check_running_stats(layer, module, x)


def _check_running_stats(layer, module, x):
    axes, m = (0,) + tuple(range(2, x.ndim)), layer.momentum
    mean = module.running_mean.numpy()  # torch's running mean follows the same rule
    np.testing.assert_allclose(layer.running_mean.value, mean, atol=1e-6)
    population = np.asarray(x).var(axis=axes)  # ddof=0, the spec's rule (torch: ddof=1)
    torch_var = module.running_var.numpy()
    unbiased = np.asarray(x).var(axis=axes, ddof=1)
    start = (torch_var - m * unbiased) / (1 - m)  # the running_var both started from
    want = (1 - m) * start + m * population
    np.testing.assert_allclose(layer.running_var.value, want, atol=1e-5)
    assert not np.allclose(layer.running_var.value, torch_var, atol=1e-4)


def test_dropout_training_matches_pytorch_formula():
    # Masks differ between generators; check js's mask against PyTorch's formula instead.
    x = jax.random.normal(jax.random.key(0), (8, 16))
    layer = nn.Dropout(0.25)
    out, x_grad, _ = _js_forward_and_grads_dropout(layer, x)
    keep = np.asarray(out) != 0
    t_x = torch.from_numpy(np.array(x)).requires_grad_(True)
    t_out = t_x * torch.from_numpy(keep.astype(np.float32)) / 0.75
    t_out.sum().backward()
    assert _record("Dropout", (out, t_out.detach().numpy()), (x_grad, t_x.grad.numpy())) < 1e-6
    t_eval = tnn.Dropout(0.25).eval()(torch.from_numpy(np.array(x)))
    assert _record("Dropout", (layer.eval()(x), t_eval.numpy())) == 0.0


def _js_forward_and_grads_dropout(layer, x):
    def loss(inp):
        out = layer(inp, rngs=js.Rngs(dropout=0))
        return out.sum(), out

    x_grad, out = jax.grad(loss, has_aux=True)(x)
    return out, x_grad, None


# -- whole models ----------------------------------------------------------------------------


class TorchCNN(tnn.Module):
    def __init__(self):
        super().__init__()
        self.features = tnn.Sequential(
            tnn.Conv2d(3, 8, 3, padding=1),
            tnn.BatchNorm2d(8),
            tnn.ReLU(),
            tnn.MaxPool2d(2),
            tnn.Conv2d(8, 16, 3),
            tnn.BatchNorm2d(16),
            tnn.ReLU(),
            tnn.AdaptiveAvgPool2d((1, 1)),
            tnn.Flatten(),
        )
        self.head = tnn.Linear(16, 10)
        self.up = tnn.ConvTranspose2d(3, 2, 2, stride=2)

    def forward(self, x):
        return self.head(self.features(x)), self.up(x)


class CNN(js.Module):
    def __init__(self, rngs):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, rngs=rngs),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, rngs=rngs),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d((1, 1)),
            nn.Flatten(),
        )
        self.head = nn.Linear(16, 10, rngs=rngs)
        self.up = nn.ConvTranspose2d(3, 2, 2, stride=2, rngs=rngs)

    def forward(self, x):
        return self.head(self.features(x)), self.up(x)


def _trained_torch_cnn():
    torch.manual_seed(0)
    model = TorchCNN()
    for module in model.modules():  # BatchNorm's affine terms; PyTorch's init elsewhere
        if isinstance(module, tnn.BatchNorm2d):
            _randomise(module)
    model.train()
    model(torch.randn(4, 3, 12, 12))  # move the running statistics and num_batches_tracked
    return model.eval()


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_cnn_loads_pytorch_weights_and_matches(mode):
    t_model = _trained_torch_cnn().train(mode == "train")
    model = CNN(js.Rngs(params=0))
    missing, unexpected = nn.load_torch_state_dict(model, t_model.state_dict())  # tensors
    assert missing == [] and unexpected == []
    model.train(mode == "train")
    x = jax.random.normal(jax.random.key(0), (2, 3, 12, 12))
    logits, up = js.jit(lambda m, v: m(v))(model, x)
    with torch.no_grad():
        t_logits, t_up = t_model(torch.from_numpy(np.array(x)))
    assert _record("CNN", (logits, t_logits.numpy()), (up, t_up.numpy())) < 1e-5


def test_torch_state_dict_round_trips_into_pytorch():
    model = CNN(js.Rngs(params=3))
    state = nn.torch_state_dict(model)
    assert state["features.1.num_batches_tracked"].dtype == np.int64
    t_model = TorchCNN().eval()
    t_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})  # strict
    x = jax.random.normal(jax.random.key(1), (2, 3, 12, 12))
    with torch.no_grad():
        t_logits, t_up = t_model(torch.from_numpy(np.array(x)))
    logits, up = model.eval()(x)
    assert _record("CNN", (logits, t_logits.numpy()), (up, t_up.numpy())) < 1e-5
    back = CNN(js.Rngs(params=4))
    nn.load_torch_state_dict(back, t_model.state_dict())
    for key, value in back.state_dict().items():
        np.testing.assert_array_equal(value, model.state_dict()[key])


def test_load_is_strict_and_all_or_nothing():
    model = CNN(js.Rngs(params=0))
    before = model.state_dict()
    state = dict(_trained_torch_cnn().state_dict())
    state.pop("head.bias")
    state["head.extra"] = torch.zeros(1)
    state["features.0.weight"] = torch.zeros(8, 3, 5, 5)
    with pytest.raises(
        ValueError,
        match=r"(?s)missing keys: 'head.bias'.*unexpected keys: "
        r"'head.extra'.*'features.0.weight': expected \[8, 3, 3, 3\]",
    ):
        nn.load_torch_state_dict(model, state)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])
    state.pop("features.0.weight")
    _, unexpected = nn.load_torch_state_dict(model, state, strict=False)
    assert unexpected == ["head.extra"]


@pytest.mark.skipif(not os.environ.get("JS_NN_REPORT"), reason="set JS_NN_REPORT=1 to print")
def test_report_max_differences(capsys):
    # JS_NN_REPORT=1 pytest ... test_torch_compat.py prints the table used in docs/nn.md.
    with capsys.disabled():
        for name, diff in sorted(MAX_DIFF.items()):
            print(f"max |js - torch| {name:<20} {diff:.2e}")


def test_recurrent_and_attention_keys_pass_through_unchanged():
    # These layers share PyTorch's keys and layouts, so they need no conversion hook.
    torch.manual_seed(0)
    t_lstm, t_mha = tnn.LSTM(4, 5, num_layers=2, batch_first=True), tnn.MultiheadAttention(8, 2)
    lstm = nn.LSTM(4, 5, num_layers=2, rngs=js.Rngs(params=0))
    mha = nn.MultiheadAttention(8, 2, rngs=js.Rngs(params=0))
    for layer, module in ((lstm, t_lstm), (mha, t_mha)):
        nn.load_torch_state_dict(layer, module.state_dict())
        exported = nn.torch_state_dict(layer)
        assert list(exported) == list(module.state_dict())
        for key, value in module.state_dict().items():
            np.testing.assert_array_equal(exported[key], value.numpy())
