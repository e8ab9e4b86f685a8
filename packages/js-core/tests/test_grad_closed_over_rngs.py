"""js.value_and_grad/js.grad and an Rngs the differentiated function closes over.

A draw advances the stream's counter, and state the function does not take cannot change
inside the transform: flax's TraceContextError becomes a js TypeError naming the fix (pass the
Rngs as an argument), with flax's error as its cause. Other TraceContextErrors pass unchanged.
"""

import flax.errors
import jax.numpy as jnp
import pytest
from core_models import Linear, Noise

import js


class Net(js.Module):
    def __init__(self, *, rngs):
        super().__init__()
        self.linear = Linear(2, 2, rngs=rngs)
        self.noise = Noise()  # draws from rngs.next("dropout") in training mode

    def forward(self, x, rngs=None):
        return self.noise(self.linear(x), rngs=rngs)


MESSAGE = (
    r"js\.value_and_grad: \S*step\.<locals>\.loss draws from a js\.Rngs that is not one of its "
    r"arguments .*\(flax: Cannot mutate RngCount from a different trace level\)\. Fix: pass the "
    r"Rngs as an argument, js\.value_and_grad\(loss\)\(model, rngs, x\) with "
    r"def loss\(model, rngs, x\): \.\.\. model\(x, rngs=rngs\)"
)


def test_rngs_closed_over_under_jit_is_explained():
    model, rngs = Net(rngs=js.Rngs(params=0)), js.Rngs(dropout=1)

    @js.jit
    def step(model, rngs, x):
        def loss(model):
            return jnp.sum(model(x, rngs=rngs))  # rngs: the step's, closed over by loss

        return js.value_and_grad(loss)(model)[0]

    with pytest.raises(TypeError, match=MESSAGE) as caught:
        step(model, rngs, jnp.ones(2))
    assert isinstance(caught.value.__cause__, flax.errors.TraceContextError)

    @js.jit
    def fixed(model, rngs, x):
        def loss(model, rngs, x):
            return jnp.sum(model(x, rngs=rngs))

        return js.value_and_grad(loss)(model, rngs, x)[0]

    fixed(model, rngs, jnp.ones(2))
    assert int(rngs.dropout.count[...]) == 1


def test_rngs_closed_over_by_grad_outside_jit_is_explained():
    model, rngs = Net(rngs=js.Rngs(params=0)), js.Rngs(dropout=1)

    def loss(model, x):
        return jnp.sum(model(x, rngs=rngs))

    with pytest.raises(TypeError, match=r"js\.grad: .*loss draws from a js\.Rngs .*js\.grad\("):
        js.grad(loss)(model, jnp.ones(2))
    assert int(rngs.dropout.count[...]) == 0


def test_other_trace_context_errors_pass_unchanged():
    model, counter = Net(rngs=js.Rngs(params=0)), Linear(2, 2, rngs=js.Rngs(params=1))

    def loss(model, x):
        counter.bias.value = counter.bias.value + 1  # a closed-over Parameter, not an Rngs
        return jnp.sum(model.linear(x))

    with pytest.raises(flax.errors.TraceContextError, match="Cannot mutate Parameter"):
        js.value_and_grad(loss)(model, jnp.ones(2))
