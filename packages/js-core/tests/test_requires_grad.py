"""Freezing: ``Parameter.requires_grad`` and ``Module.requires_grad_``, as in PyTorch.

A frozen Parameter is not differentiated: the gradient state has no entry for it, the compiled
step holds no backward pass into it (fewer FLOPs), and it stays module state.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from core_models import MLP, mse

import js
from js._checks import flatten_state


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.normal(size=(32, 10)), jnp.float32), jnp.zeros((32, 4))


def sgd_step(lr=0.1):
    """A step updating exactly the Parameters that received a gradient."""
    traces = []

    @js.jit
    def step(model, x, y):
        traces.append(1)
        loss, grads = js.value_and_grad(mse)(model, x, y)
        flat = flatten_state(grads)
        for path, param in model.named_parameters():
            if path in flat:
                param.value = param.value - lr * flat[path]
        return loss

    return step, traces


def test_requires_grad_defaults_to_true_and_is_checked():
    w = js.Parameter(jnp.zeros(3))
    assert w.requires_grad is True
    assert w.requires_grad_(False) is w and w.requires_grad is False
    assert repr(w) == "Parameter(shape=[3], dtype=float32, requires_grad=False)"
    assert js.Parameter(jnp.zeros(3), requires_grad=False).requires_grad is False
    with pytest.raises(TypeError, match="requires_grad must be True or False, got int 0"):
        w.requires_grad = 0
    with pytest.raises(TypeError, match="requires_grad must be True or False, got str 'no'"):
        js.Parameter(jnp.zeros(3), requires_grad="no")
    assert w.requires_grad is False  # the refused assignment changed nothing


def test_frozen_parameters_get_no_gradient(data):
    model = MLP(rngs=js.Rngs(params=0))
    full = flatten_state(js.grad(mse)(model, *data))
    assert model.layers[0].requires_grad_(False) is model.layers[0]
    grads = flatten_state(js.grad(mse)(model, *data))
    assert sorted(grads) == sorted(k for k in full if not k.startswith("layers.0."))
    for key, value in grads.items():  # the others are unchanged by freezing
        np.testing.assert_array_equal(value, full[key])
    model.requires_grad_(True)
    assert sorted(flatten_state(js.grad(mse)(model, *data))) == sorted(full)


def test_frozen_parameters_stay_bit_unchanged_and_in_the_state_dict(data):
    model = MLP(rngs=js.Rngs(params=0))
    model.layers[0].requires_grad_(False)
    before = {k: np.asarray(v) for k, v in model.state_dict().items()}
    step, traces = sgd_step()
    for _ in range(20):
        step(model, *data)
    after = model.state_dict()
    assert sorted(after) == sorted(before)  # frozen parameters are still saved
    for key in before:
        if key.startswith("layers.0."):
            np.testing.assert_array_equal(after[key], before[key])
        else:
            assert not np.array_equal(after[key], before[key])
    assert len(traces) == 1


def test_changing_requires_grad_traces_the_step_again(data):
    model = MLP(rngs=js.Rngs(params=0))
    step, traces = sgd_step()
    step(model, *data)
    model.layers[1].weight.requires_grad = False
    weight = np.asarray(model.layers[1].weight.value)
    step(model, *data)
    assert len(traces) == 2  # the frozen flag is part of the program's structure
    np.testing.assert_array_equal(model.layers[1].weight.value, weight)
    model.layers[1].weight.requires_grad = False  # unchanged: no new structure
    step(model, *data)
    assert len(traces) == 2
    model.layers[1].weight.requires_grad = True
    step(model, *data)
    assert len(traces) == 2  # back to the first program, already compiled
    assert not np.array_equal(model.layers[1].weight.value, weight)


def flops(step, model, data) -> float:
    cost = step.lower(model, *data).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list | tuple) else cost)["flops"]


def test_a_half_frozen_step_computes_no_backward_into_the_frozen_half():
    x, y = jnp.ones((256, 128)), jnp.zeros((256, 128))
    model = MLP((128, 256, 256, 256, 128), rngs=js.Rngs(params=0))
    step, _ = sgd_step()
    full = flops(step, model, (x, y))
    model.layers[0].requires_grad_(False)
    model.layers[1].requires_grad_(False)
    half = flops(step, model, (x, y))
    # No weight gradients and no input gradients for the frozen first half: about 0.6x the
    # FLOPs (masking the gradients to zero instead would keep 1.0x).
    assert half < 0.8 * full, (half, full)


def test_requires_grad_survives_the_copies_of_a_compiled_call(data):
    model = MLP(rngs=js.Rngs(params=0))
    model.layers[2].bias.requires_grad = False
    seen = []

    @js.jit
    def flags(model):
        seen.extend(path for path, p in model.named_parameters() if not p.requires_grad)
        return jnp.zeros(())

    flags(model)
    assert seen == ["layers.2.bias"]
