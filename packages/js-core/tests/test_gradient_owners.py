"""js.value_and_grad's gradient state records whose gradient each entry is (js._autodiff's seam
for js-optim): a tied Parameter's one gradient, found by the Parameter itself."""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp

import js
from js._autodiff import _OWNERS, gradient_owners


class Tied(js.Module):
    def __init__(self):
        self.embed = js.Parameter(jnp.ones(3))
        self.frozen = js.Parameter(jnp.ones(3), requires_grad=False)
        self.head = self.embed  # one Parameter, two paths

    def forward(self, x):
        return jnp.sum(self.embed.value * x + self.head.value * self.frozen.value)


def test_each_gradient_names_its_parameter_by_identity():
    model = Tied()
    grads = js.grad(lambda m: m(jnp.arange(3.0)))(model)
    owners = gradient_owners(grads)
    # the trainable Parameter once, under the path the state files it by; the frozen one not
    assert owners == {id(model.embed): "embed"}
    assert list(jax.tree.leaves(grads)[0].tolist()) == [1.0, 2.0, 3.0]  # both uses summed
    assert gradient_owners(jax.tree.map(lambda g: g, grads)) is None  # a rebuilt state: paths
    assert gradient_owners({"embed": jnp.ones(3)}) is None


def test_inside_js_jit_the_ids_are_the_traced_parameters():
    model = Tied()

    @js.jit
    def owned(model, x):
        grads = js.grad(lambda m: m(x))(model)
        assert gradient_owners(grads) == {id(model.embed): "embed"}
        return jax.tree.leaves(grads)[0]

    assert owned(model, jnp.ones(3)).tolist() == [2.0, 2.0, 2.0]


def test_the_record_goes_with_the_state():
    before = len(_OWNERS)
    grads = js.grad(lambda m: m(jnp.ones(3)))(Tied())
    assert len(_OWNERS) == before + 1
    del grads
    gc.collect()
    assert len(_OWNERS) == before
