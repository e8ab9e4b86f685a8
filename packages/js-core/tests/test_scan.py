import jax
import jax.numpy as jnp
import numpy as np
import pytest
from core_models import MLP, SGD, Noise, mse

import js


def train_step(model, noise, opt, x, y, *, rngs):
    def loss_fn(model, noise, x, y, rngs):
        return mse(model, noise(x, rngs=rngs), y)

    loss, grads = js.value_and_grad(loss_fn)(model, noise, x, y, rngs)
    opt.step(grads)
    return {"loss": loss}


def build():
    model = MLP(rngs=js.Rngs(params=0))
    return model, Noise(), SGD(model.parameters(), 0.05), js.Rngs(dropout=1)


def test_k_steps_per_dispatch_equal_k_separate_steps():
    k = 8
    rng = np.random.default_rng(0)
    xs = jnp.asarray(rng.normal(size=(k, 4, 10)), jnp.float32)
    ys = jnp.asarray(rng.normal(size=(k, 4, 4)), jnp.float32)

    model, noise, opt, rngs = build()
    one = js.jit(train_step)
    separate = [float(one(model, noise, opt, xs[i], ys[i], rngs=rngs)["loss"]) for i in range(k)]

    model2, noise2, opt2, rngs2 = build()
    many = js.jit(js.scan_steps(train_step))
    stacked = many(model2, noise2, opt2, xs, ys, rngs=rngs2)

    assert stacked["loss"].shape == (k,)
    np.testing.assert_allclose(np.asarray(stacked["loss"]), separate, rtol=1e-5)
    for (_, a), (_, b) in zip(model.named_parameters(), model2.named_parameters(), strict=True):
        np.testing.assert_allclose(a.value, b.value, rtol=1e-5, atol=1e-6)
    assert int(rngs2.dropout.count[...]) == int(rngs.dropout.count[...]) == k


@pytest.mark.slow
def test_unrolled_steps_give_the_same_result():
    xs, ys = jnp.ones((4, 2, 10)), jnp.zeros((4, 2, 4))
    results = []
    for unroll in (1, True):
        model, noise, opt, rngs = build()
        run = js.jit(js.scan_steps(train_step, unroll=unroll))
        results.append(np.asarray(run(model, noise, opt, xs, ys, rngs=rngs)["loss"]))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_scan_steps_works_eagerly_too():
    model, noise, opt, rngs = build()
    xs, ys = jnp.zeros((2, 3, 10)), jnp.zeros((2, 3, 4))
    noise.eval()
    metrics = js.scan_steps(train_step)(model, noise, opt, xs, ys, rngs=rngs)
    assert jax.tree.map(jnp.shape, metrics) == {"loss": (2,)}
