"""Tiny models built from js.Module and js.Parameter only (js-optim does not depend on js-nn)."""

import jax
import jax.numpy as jnp
import numpy as np

import js


class Linear(js.Module):
    def __init__(self, n_in: int, n_out: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.weight = js.Parameter(jnp.asarray(rng.normal(size=(n_in, n_out)), jnp.float32))
        self.bias = js.Parameter(jnp.asarray(rng.normal(size=(n_out,)), jnp.float32))

    def forward(self, x):
        return x @ self.weight.value + self.bias.value


class MLP(js.Module):
    def __init__(self, sizes=(4, 8, 2), seed: int = 0):
        self.hidden = Linear(sizes[0], sizes[1], seed)
        self.out = Linear(sizes[1], sizes[2], seed + 1)

    def forward(self, x):
        return self.out(jax.nn.tanh(self.hidden(x)))


def mse(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


def batch(seed: int = 0, n: int = 16):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(n, 4)), jnp.float32)
    return x, jnp.asarray(rng.normal(size=(n, 2)), jnp.float32)
