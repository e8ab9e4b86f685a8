"""js.nn.RMSNorm and js.nn.functional.rms_norm against PyTorch 2.13's: values (float32 and the
half types, computed in float32 as torch does), eps=None, gradients, module arguments."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import js
import js.nn as nn
import js.nn.functional as F

TORCH_DTYPES = {
    jnp.float32: torch.float32,
    jnp.bfloat16: torch.bfloat16,
    jnp.float16: torch.float16,
}


def _np(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().numpy()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("eps", [None, 1e-6])
@pytest.mark.parametrize("with_weight", [True, False])
def test_functional_matches_torch(dtype, eps, with_weight):
    rng = np.random.default_rng(0)
    # small values: eps matters, and a wrong default eps (the half type's own) would show
    x = (rng.standard_normal((3, 5, 16)) * 1e-3).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)
    tdt = TORCH_DTYPES[dtype]
    tx, tw = torch.tensor(x).to(tdt), torch.tensor(w).to(tdt)
    expected = torch.nn.functional.rms_norm(tx, (16,), tw if with_weight else None, eps)
    jx, jw = jnp.asarray(tx.float().numpy(), dtype), jnp.asarray(tw.float().numpy(), dtype)
    got = F.rms_norm(jx, (16,), jw if with_weight else None, eps)
    assert got.dtype == dtype
    # one rounding of the half type apart at most
    tol = {jnp.float32: 1e-6, jnp.bfloat16: 8e-3, jnp.float16: 1e-3}[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float32), _np(expected), rtol=tol, atol=tol)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
def test_mixed_dtypes_follow_torch():
    # bfloat16 input, float32 weight: computed in float32, returned in bfloat16
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    tx = torch.tensor(x).bfloat16()
    expected = torch.nn.functional.rms_norm(tx, (8,), torch.tensor(w))
    got = F.rms_norm(jnp.asarray(tx.float().numpy(), jnp.bfloat16), 8, jnp.asarray(w))
    assert got.dtype == jnp.bfloat16 and expected.dtype == torch.bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float32), _np(expected), rtol=8e-3, atol=8e-3)


def test_two_trailing_dims_and_zeros():
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    expected = torch.nn.functional.rms_norm(torch.tensor(x), (3, 4), eps=1e-5)
    np.testing.assert_allclose(F.rms_norm(jnp.asarray(x), (3, 4), eps=1e-5), _np(expected), 1e-6)
    np.testing.assert_array_equal(F.rms_norm(jnp.zeros((2, 4)), 4), np.zeros((2, 4)))


def test_gradients_match_torch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    g = rng.standard_normal((2, 3, 8)).astype(np.float32)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (torch.nn.functional.rms_norm(tx, (8,), tw, 1e-5) * torch.tensor(g)).sum().backward()

    def loss(x, w):
        return jnp.sum(F.rms_norm(x, 8, w, 1e-5) * g)

    dx, dw = jax.jit(jax.grad(loss, (0, 1)))(jnp.asarray(x), jnp.asarray(w))
    assert tx.grad is not None and tw.grad is not None
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "args",
    [((8,), {}), ((8,), {"eps": 1e-6}), (((3, 8),), {"elementwise_affine": False})],
)
def test_module_matches_torch(args):
    positional, keywords = args
    reference = torch.nn.RMSNorm(*positional, **keywords)
    layer = nn.RMSNorm(*positional, **keywords)
    assert list(layer.state_dict()) == list(reference.state_dict())
    with torch.no_grad():
        for p in reference.parameters():
            p.uniform_(0.5, 1.5)
    nn.load_torch_state_dict(layer, reference.state_dict())
    x = np.random.default_rng(4).standard_normal((2, 3, 8)).astype(np.float32)
    np.testing.assert_allclose(
        layer(jnp.asarray(x)), _np(reference(torch.tensor(x))), rtol=1e-6, atol=1e-6
    )
    assert repr(layer).splitlines()[0].startswith(repr(reference).splitlines()[0][:-1])


def test_module_arguments_and_dtype():
    layer = nn.RMSNorm(4, dtype=jnp.bfloat16)
    assert layer.weight is not None and layer.weight.value.dtype == jnp.bfloat16
    np.testing.assert_array_equal(layer.weight.value, np.ones(4))
    assert nn.RMSNorm([2, 3]).normalized_shape == (2, 3)
    assert nn.RMSNorm(4, elementwise_affine=False).weight is None
    assert [name for name, _ in nn.RMSNorm(4).named_parameters()] == ["weight"]


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: nn.RMSNorm(True), TypeError, r"RMSNorm: normalized_shape must be an int"),
        (lambda: nn.RMSNorm((4, 0)), ValueError, r"RMSNorm: normalized_shape must hold ints >= 1"),
        (lambda: nn.RMSNorm(4, eps=-1.0), ValueError, r"RMSNorm: eps must be positive"),
        (lambda: nn.RMSNorm(4, elementwise_affine="no"), TypeError, r"elementwise_affine must be"),
        (lambda: nn.RMSNorm(4)(jnp.ones((2, 5))), ValueError, r"RMSNorm: expected input of shape"),
        (lambda: F.rms_norm(jnp.ones((2, 5)), 4), ValueError, r"normalized_shape=\[4\], expected"),
        (
            lambda: F.rms_norm(jnp.ones((2, 4)), 4, jnp.ones(3)),
            ValueError,
            r"weight must have shape normalized_shape=\[4\], got \[3\]",
        ),
        (lambda: F.rms_norm(jnp.ones(4), "4"), TypeError, r"must be an int or a tuple of ints"),
    ],
)
def test_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_under_jit_in_a_model():
    class Net(js.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(4, eps=1e-6)

        def forward(self, x):
            return self.norm(x)

    model = Net()
    x = jnp.arange(8.0).reshape(2, 4)
    np.testing.assert_allclose(js.jit(lambda m, x: m(x))(model, x), F.rms_norm(x, 4, eps=1e-6))
