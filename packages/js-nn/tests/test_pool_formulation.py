"""Max pooling's forward is one maximum per window; the first-maximum gradient (PyTorch's rule
for ties) comes from a ``jax.custom_jvp``, so forward and reverse mode both work."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js.nn.functional as F


def _ties(shape):
    """Small integers: most 2x2 windows hold a tied maximum."""
    return jnp.asarray(np.random.default_rng(0).integers(0, 3, shape).astype(np.float32))


@pytest.mark.parametrize("kernel, stride, padding, dilation", [(2, None, 0, 1), (3, 2, 1, 2)])
def test_the_forward_alone_builds_no_argmax(kernel, stride, padding, dilation):
    x = _ties((2, 3, 8, 8))

    def pooled(x):
        return F.max_pool2d(x, kernel, stride, padding, dilation)

    assert "argmax" not in str(jax.make_jaxpr(pooled)(x))
    assert "argmax" in str(jax.make_jaxpr(jax.grad(lambda x: pooled(x).sum()))(x))


# The full tier adds a wider window (3x3, the 2x2 one's rule) and a dilated 2x2 one; the default
# run's (3, 2, 1, 1) and (3, 1, 1, 2) tie windows that overlap, are padded and are dilated.
@pytest.mark.torch
@pytest.mark.parametrize(
    "kernel, stride, padding, dilation",
    [
        (2, None, 0, 1),
        pytest.param(3, None, 0, 1, marks=pytest.mark.slow),
        pytest.param(2, None, 0, 2, marks=pytest.mark.slow),
        (3, 2, 1, 1),
        (3, 1, 1, 2),
    ],
)
def test_tied_windows_send_the_gradient_to_the_first_maximum_as_torch(
    kernel, stride, padding, dilation
):
    torch = pytest.importorskip("torch")
    x = _ties((2, 3, 9, 8))
    options = dict(stride=stride, padding=padding, dilation=dilation)
    out = F.max_pool2d(x, kernel, **options)
    weights = np.random.default_rng(1).normal(size=out.shape).astype(np.float32)

    def loss(x):
        return (F.max_pool2d(x, kernel, **options) * weights).sum()

    t_x = torch.tensor(np.array(x), requires_grad=True)
    t_out = torch.nn.functional.max_pool2d(t_x, kernel, **options)
    (t_out * torch.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(np.asarray(out), t_out.detach().numpy())
    np.testing.assert_array_equal(np.asarray(jax.grad(loss)(x)), t_x.grad.numpy())


@pytest.mark.parametrize("kernel, stride, padding", [(2, None, 0), (3, 2, 1)])
def test_forward_mode_agrees_with_reverse_mode(kernel, stride, padding):
    x, tangent = _ties((2, 3, 8, 8)), jnp.ones((2, 3, 8, 8))

    def pooled(x):
        return F.max_pool2d(x, kernel, stride, padding).sum()

    _, jvp = jax.jvp(pooled, (x,), (tangent,))
    assert float(jvp) == float(jnp.vdot(jax.grad(pooled)(x), tangent))
    assert float(jvp) == 2 * 3 * 4 * 4  # one unit of tangent per window: ties do not split it
