"""Task(clip_grad_norm=/clip_grad_value=): the default step clips the gradients before the
update, and equals a hand-written step with js.optim's clipping."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from js_train_testing import MLP, blobs

import js
import js.losses as losses
import js.optim
from js.training import Task, steps


def _hand_step(clip):
    @js.jit
    def step(model, optimizer, x, y):
        def loss_fn(model):
            return losses.cross_entropy(model(x), y)

        loss, grads = js.value_and_grad(loss_fn)(model)
        optimizer.step(clip(grads))
        return loss

    return step


@pytest.mark.parametrize(
    "option, clip",
    [
        ({"clip_grad_norm": 0.05}, lambda g: js.optim.clip_grad_norm(g, 0.05)[0]),
        ({"clip_grad_value": 0.01}, lambda g: js.optim.clip_grad_value(g, 0.01)),
    ],
)
def test_a_task_step_with_clipping_equals_the_hand_written_step(option, clip):
    x, y = blobs(n=16)
    results = []
    for kind in ("task", "hand", "unclipped"):
        model = MLP(p=0.0, rngs=js.Rngs(params=0))
        optimizer = js.optim.SGD(model.parameters(), lr=0.5)
        if kind == "task":
            task = Task(model, optimizer, **option)
            task.training_step(model, optimizer, None, (x, y))
        elif kind == "hand":
            _hand_step(clip)(model, optimizer, x, y)
        else:
            Task(model, optimizer).training_step(model, optimizer, None, (x, y))
        results.append(model.state_dict())
    task, hand, unclipped = results
    for key, value in task.items():
        np.testing.assert_allclose(value, hand[key], rtol=1e-6, atol=1e-8, err_msg=key)
    assert any(not np.allclose(task[k], unclipped[k]) for k in task)  # the clip did act


def test_clip_value_clamps_every_element():
    grads = {"w": jax.numpy.array([-3.0, 0.5, 4.0])}
    assert steps.clip(grads, clip_grad_value=1.0)["w"].tolist() == [-1.0, 0.5, 1.0]
    assert steps.clip(grads) is grads


@pytest.mark.parametrize(
    "options, message",
    [
        ({"clip_grad_norm": 1.0, "clip_grad_value": 0.5}, "were both given"),
        ({"clip_grad_norm": -1.0}, "clip_grad_norm must be a number >= 0 or None, got -1.0"),
        ({"clip_grad_value": "1"}, "clip_grad_value must be a number >= 0 or None, got '1'"),
    ],
)
def test_bad_clipping_options_fail_when_the_task_is_built(options, message):
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    with pytest.raises(ValueError, match=message):
        Task(model, js.optim.SGD(model.parameters(), lr=0.1), **options)
