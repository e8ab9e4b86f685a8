"""js.remat: jax.checkpoint over js's calling convention, as a function and as a module."""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from core_models import MLP, Counter, Linear

import js


class Block(js.Module):
    """A residual block with noise drawn from an Rngs stream (dropout-like) in training."""

    def __init__(self, width, *, rngs):
        super().__init__()
        self.fc = Linear(width, width, rngs=rngs)
        self.out = Linear(width, width, rngs=rngs)

    def forward(self, x, *, rngs=None, scale=1.0):
        h = jnp.tanh(self.fc(x)) * scale
        if self.training and rngs is not None:
            keep = jax.random.bernoulli(rngs.next("dropout"), 0.8, h.shape)
            h = jnp.where(keep, h / 0.8, 0.0)
        return x + self.out(h)


class Net(js.Module):
    def __init__(self, depth=2, width=8, *, rngs):
        super().__init__()
        self.blocks = [Block(width, rngs=rngs) for _ in range(depth)]

    def forward(self, x, *, rngs=None):
        for block in self.blocks:
            x = block(x, rngs=rngs, scale=0.5)
        return x


def _loss(model, x, rngs):
    return jnp.mean(model(x, rngs=rngs) ** 2)


def _data():
    return jnp.asarray(np.random.default_rng(0).normal(size=(4, 8)), jnp.float32)


def _close(a, b):
    for (pa, ga), (pb, gb) in zip(
        jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves_with_path(b), strict=True
    ):
        assert pa == pb
        np.testing.assert_allclose(ga, gb, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_function_form_gradients_and_rng_state_equal_the_plain_step():
    model, x = Net(rngs=js.Rngs(params=0)), _data()
    rngs_a, rngs_b = js.Rngs(dropout=3), js.Rngs(dropout=3)
    loss_a, grads_a = js.jit(js.value_and_grad(_loss))(model, x, rngs_a)
    step = js.jit(js.value_and_grad(js.remat(_loss)))
    loss_b, grads_b = step(model, x, rngs_b)
    np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
    _close(grads_a, grads_b)
    # the dropout stream moved on as in the plain step: the next draws agree
    assert jnp.array_equal(
        jax.random.key_data(rngs_a.next("dropout")), jax.random.key_data(rngs_b.next("dropout"))
    )


def test_module_form_keeps_parameters_and_names():
    model, x = Net(rngs=js.Rngs(params=0)), _data()
    names = list(model.state_dict())
    plain = js.jit(js.value_and_grad(_loss))(model, x, js.Rngs(dropout=1))
    original = model.blocks[1]
    model.blocks[1] = js.remat(original, "dots_saveable")
    assert type(model.blocks[1]).__name__ == "Block" and isinstance(model.blocks[1], Block)
    assert model.blocks[1].fc.weight is original.fc.weight  # the same Parameters
    assert list(model.state_dict()) == names
    for i in (0,):
        model.blocks[i] = js.remat(model.blocks[i])
    loss, grads = js.jit(js.value_and_grad(_loss))(model, x, js.Rngs(dropout=1))
    np.testing.assert_allclose(loss, plain[0], rtol=1e-6)
    _close(plain[1], grads)
    model.eval()  # modes reach the converted blocks
    assert not model.blocks[1].training


def test_checkpointed_program_recomputes():
    model, x = Net(rngs=js.Rngs(params=0)), _data()
    text = js.jit(js.value_and_grad(js.remat(_loss))).lower(model, x, js.Rngs(dropout=1))
    assert "optimization_barrier" in text.as_text()  # prevent_cse's barrier: a recomputation
    lazy = js.remat(_loss, prevent_cse=False)
    plain = js.jit(js.value_and_grad(lazy)).lower(model, x, js.Rngs(dropout=1)).as_text()
    assert "optimization_barrier" not in plain


def test_read_only_forward_stays_read_only_and_buffers_are_written():
    model, x = MLP(rngs=js.Rngs(params=0)), jnp.ones((2, 10))
    forward = js.jit(js.remat(lambda m, x: m(x)))
    weight = model.layers[0].weight.value
    forward(model, x)
    np.testing.assert_array_equal(np.asarray(weight), np.asarray(model.layers[0].weight.value))
    counter = js.remat(Counter())
    js.jit(lambda c, x: c(x))(counter, x)
    counter(x)  # eagerly too
    assert int(counter.calls.value) == 2


def test_copies_and_pickles_stay_converted():
    block = js.remat(Block(8, rngs=js.Rngs(params=0)), "nothing_saveable")
    back = pickle.loads(pickle.dumps(block))
    assert type(back) is type(block) and back._remat_config == block._remat_config
    np.testing.assert_allclose(back(_data()), block(_data()), rtol=1e-6)
    again = js.remat(block)  # converting twice keeps one level, the new policy
    assert type(again) is type(block) and again._remat_config == (None, True)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="policy must be"):
        js.remat(_loss, "save_only_these_names")
    with pytest.raises(TypeError, match="module or a function"):
        js.remat(3)
    model = Net(rngs=js.Rngs(params=0))
    with pytest.raises(TypeError, match="container argument"):
        js.remat(lambda ms, x: ms[0](x))([model], _data())
