"""accumulate(optimizer, every=k): k steps average the gradients and update once; equal to one
step on the concatenated batch; step_count counts real updates; the accumulator checkpoints."""

import jax.numpy as jnp
import numpy as np
import pytest
from optim_models import MLP, batch, mse

import js
from js.optim import SGD, Adam, AdamW, accumulate, cosine_schedule


@js.jit
def _step(model, optimizer, x, y):
    loss, grads = js.value_and_grad(mse)(model, x, y)
    optimizer.step(grads)
    return loss


def _params(model):
    return {k: np.asarray(v) for k, v in model.state_dict().items()}


@pytest.mark.parametrize(
    "cls, options", [(SGD, {"momentum": 0.9}), (Adam, {}), (AdamW, {"weight_decay": 0.1})]
)
def test_k_accumulated_steps_equal_one_step_on_the_concatenated_batch(cls, options):
    x, y = batch(n=32)
    big, small = MLP(), MLP()
    big_opt = cls(big.parameters(), lr=0.05, **options)
    small_opt = accumulate(cls(small.parameters(), lr=0.05, **options), every=4)
    for _ in range(3):  # three real updates
        _step(big, big_opt, x, y)
        for i in range(4):
            _step(small, small_opt, x[8 * i : 8 * i + 8], y[8 * i : 8 * i + 8])
    assert int(small_opt.step_count) == int(big_opt.step_count) == 3
    for key, value in _params(big).items():
        np.testing.assert_allclose(_params(small)[key], value, rtol=1e-6, atol=1e-6)


def test_parameters_stay_bitwise_until_the_kth_step_and_eager_equals_jit():
    x, y = batch()
    model, eager = MLP(), MLP()
    opt = accumulate(Adam(model.parameters(), lr=0.1), every=3)
    eager_opt = accumulate(Adam(eager.parameters(), lr=0.1), every=3)
    before = _params(model)
    for _ in range(2):
        _step(model, opt, x, y)
        _, grads = js.value_and_grad(mse)(eager, x, y)
        eager_opt.step(grads)
    assert all(np.array_equal(before[k], v) for k, v in _params(model).items())
    assert int(opt.step_count) == 0 and int(opt.state_dict()["mini_step"]) == 2
    _step(model, opt, x, y)
    _, grads = js.value_and_grad(mse)(eager, x, y)
    eager_opt.step(grads)
    assert int(opt.step_count) == 1 and int(opt.state_dict()["mini_step"]) == 0
    assert not np.array_equal(before["out.weight"], _params(model)["out.weight"])
    for key, value in _params(eager).items():
        np.testing.assert_allclose(_params(model)[key], value, rtol=1e-6, atol=1e-7)


def test_the_accumulator_is_in_the_state_dict_and_resumes_mid_cycle():
    x, y = batch()
    model = MLP()
    opt = accumulate(Adam(model.parameters(), lr=0.1), every=4)
    keys = set(opt.state_dict())
    assert {
        "step_count",
        "mini_step",
        "gradient_step",
        "acc_grads.out.weight",
        "inner_opt_state.adam.mu.out.weight",
    } <= keys
    _step(model, opt, x, y)
    saved_model, saved_opt = model.state_dict(), opt.state_dict()  # one step into the cycle
    assert np.abs(saved_opt["acc_grads.out.weight"]).sum() > 0
    for _ in range(3):
        _step(model, opt, x, y)
    again = MLP(seed=5)
    again.load_state_dict(saved_model)
    again_opt = accumulate(Adam(again.parameters(), lr=0.1), every=4)
    again_opt.load_state_dict(saved_opt)
    for _ in range(3):
        _step(again, again_opt, x, y)
    for key, value in _params(model).items():
        np.testing.assert_array_equal(_params(again)[key], value)


def test_a_schedule_advances_once_per_real_update():
    x, y = batch()
    model = MLP()
    schedule = cosine_schedule(0.1, 10)
    opt = accumulate(SGD(model.parameters(), lr=schedule), every=2)
    assert opt.lr is schedule and "every=2" in repr(opt) and "Accumulate(SGD" in repr(opt)
    for _ in range(6):
        _step(model, opt, x, y)
    assert int(opt.step_count) == 3 == int(opt.state_dict()["gradient_step"])
    reference = MLP()  # the same batch every call: the mean is its gradient, rate schedule(t)
    reference_opt = SGD(reference.parameters(), lr=schedule)
    for _ in range(3):
        _step(reference, reference_opt, x, y)
    for key, value in _params(reference).items():
        np.testing.assert_allclose(_params(model)[key], value, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "every, error, message",
    [
        (0, ValueError, "accumulate: every must be an int >= 1, got 0"),
        (2.0, TypeError, "got 2.0 \\(a float\\). Fix: pass an integer"),
        (True, TypeError, "got True \\(a bool\\)"),
    ],
)
def test_every_is_checked(every, error, message):
    with pytest.raises(error, match=message):
        accumulate(SGD(MLP().parameters(), lr=0.1), every=every)


def test_only_fresh_plain_optimizers_are_wrapped():
    model = MLP()
    with pytest.raises(TypeError, match="optimizer must be a js.optim optimizer, got object"):
        accumulate(object(), every=2)
    opt = accumulate(SGD(model.parameters(), lr=0.1), every=2)
    with pytest.raises(ValueError, match="already accumulates every 2 steps"):
        accumulate(opt, every=2)
    stepped = SGD(model.parameters(), lr=0.1)
    stepped.step({k: jnp.zeros_like(v) for k, v in model.state_dict().items()})
    with pytest.raises(ValueError, match="has already stepped 1 times"):
        accumulate(stepped, every=2)
