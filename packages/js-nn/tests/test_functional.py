"""js.nn.functional: the pure kernels, their errors, and the spec's losses (js.losses')."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import js
import js.losses
import js.nn.functional as F
from js import nn

LOSSES = [
    "cross_entropy",
    "binary_cross_entropy_with_logits",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
]


@pytest.mark.parametrize("name", LOSSES)
def test_the_spec_s_losses_are_js_losses_own_functions(name):
    # The spec: "nn.functional exposes cross_entropy, ...": js.losses is their one implementation.
    assert getattr(F, name) is getattr(js.losses, name)


def test_the_spec_s_training_step_with_f_cross_entropy_learns():
    class Net(nn.Module):
        def __init__(self, *, rngs):
            super().__init__()
            self.body = nn.Sequential(
                nn.Linear(4, 16, rngs=rngs), nn.ReLU(), nn.Linear(16, 3, rngs=rngs)
            )

        def forward(self, x):
            return self.body(x)

    model = Net(rngs=js.Rngs(params=0))
    x = jax.random.normal(jax.random.key(1), (32, 4))
    y = jnp.argmax(x[:, :3], axis=-1)

    @js.jit
    def train_step(model, x, y):
        loss, grads = js.value_and_grad(lambda m: F.cross_entropy(m(x), y))(model)
        parameters = dict(model.named_parameters())
        for path, grad in nnx.to_flat_state(grads):  # plain SGD (js-optim is not installed here)
            parameter = parameters[".".join(map(str, path))]
            parameter.value = parameter.value - 0.5 * grad
        return loss

    losses = [float(train_step(model, x, y)) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="module 'js.nn.functional' has no attribute 'nope'"):
        F.nope  # noqa: B018


def test_dropout_keeps_or_scales_and_needs_a_key():
    x = jnp.arange(1.0, 1001.0)
    y = F.dropout(x, 0.25, key=jax.random.key(0))
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] / 0.75, rtol=1e-6)
    assert 0.65 < float(kept.mean()) < 0.85
    grad = jax.grad(lambda v: F.dropout(v, 0.25, key=jax.random.key(0)).sum())(x)
    np.testing.assert_allclose(grad, jnp.where(kept, 1 / 0.75, 0.0), rtol=1e-6)
    np.testing.assert_array_equal(F.dropout(x, 0.5, training=False), x)
    np.testing.assert_array_equal(F.dropout(x, 1.0, key=jax.random.key(0)), 0.0)
    with pytest.raises(ValueError, match=r"dropout in training needs a random key.*rngs.next"):
        F.dropout(x, 0.5)
    with pytest.raises(ValueError, match=r"functional.dropout: p must be in \[0, 1\], got -0.1"):
        F.dropout(x, -0.1)


def test_dropout_layer_draws_one_key_per_call():
    drop, rngs = js.nn.Dropout(0.5), js.Rngs(dropout=0)
    a, b = drop(jnp.ones(64), rngs=rngs), drop(jnp.ones(64), rngs=rngs)
    assert not np.array_equal(a, b)
    assert int(rngs.state_dict()["dropout.count"]) == 2
    np.testing.assert_array_equal(drop.eval()(jnp.ones(4)), 1.0)


def test_batch_norm_is_pure_and_uses_population_variance():
    x = jax.random.normal(jax.random.key(0), (6, 3, 4))
    mean, var = jnp.zeros(3), jnp.ones(3)
    y, new_mean, new_var = F.batch_norm(x, mean, var, training=True, momentum=0.1)
    batch_var = x.var(axis=(0, 2))  # population (ddof=0)
    np.testing.assert_allclose(new_var, 0.9 + 0.1 * batch_var, rtol=1e-6)
    np.testing.assert_allclose(new_mean, 0.1 * x.mean(axis=(0, 2)), atol=1e-7)
    np.testing.assert_allclose(y.mean(axis=(0, 2)), 0.0, atol=1e-6)
    y_eval, same_mean, _ = F.batch_norm(x, mean, var, training=False)
    np.testing.assert_allclose(y_eval, x / np.sqrt(1 + 1e-5), rtol=1e-6)
    assert same_mean is mean


def test_activations():
    x = jnp.linspace(-3.0, 3.0, 7)
    np.testing.assert_allclose(F.softmax(x), jnp.exp(F.log_softmax(x)), rtol=1e-6)
    np.testing.assert_allclose(F.softmax(x).sum(), 1.0, rtol=1e-6)
    exact, tanh = F.gelu(x), F.gelu(x, approximate="tanh")
    assert 0 < float(jnp.max(jnp.abs(exact - tanh))) < 1e-3
    np.testing.assert_allclose(F.sigmoid(x), 1 / (1 + np.exp(-np.asarray(x))), rtol=1e-6)
    with pytest.raises(ValueError, match=r"gelu approximate must be 'none' or 'tanh', got 'x'"):
        F.gelu(x, approximate="x")


def test_functional_option_errors():
    with pytest.raises(
        NotImplementedError,
        match=r"adaptive_avg_pool2d: output_size \(3, 3\) "
        r"must divide the input's spatial size \[4, 4\] .*Fix:",
    ):
        F.adaptive_avg_pool2d(jnp.ones((1, 1, 4, 4)), 3)
    with pytest.raises(ValueError, match=r"padding must be an int, a tuple, 'same' or 'valid'"):
        F.conv2d(jnp.ones((1, 1, 4, 4)), jnp.ones((1, 1, 3, 3)), padding="full")


def test_conv_transpose_is_the_adjoint_of_conv():
    # <conv(x), y> == <x, conv_transpose(y)> with the same [O, I, KH, KW] read as [I, O] swap.
    kx, ky, kw = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (1, 2, 7, 7))
    w = jax.random.normal(kw, (3, 2, 3, 3))  # conv: 2 -> 3 channels
    y = jax.random.normal(ky, (1, 3, 3, 3))
    forward = F.conv2d(x, w, stride=2)
    back = F.conv_transpose2d(y, jnp.swapaxes(w, 0, 1), stride=2)
    np.testing.assert_allclose(jnp.vdot(forward, y), jnp.vdot(x, back), rtol=1e-4)
