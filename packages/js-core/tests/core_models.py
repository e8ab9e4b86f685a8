"""Small models for js-core's tests, built from js.Module and js.Parameter only."""

import jax
import jax.numpy as jnp
import numpy as np

import js


class Linear(js.Module):
    def __init__(self, n_in, n_out, *, rngs):
        super().__init__()
        bound = 1 / np.sqrt(n_in)
        key = rngs.next("params")
        weight = jax.random.uniform(key, (n_out, n_in), minval=-bound, maxval=bound)
        self.weight = js.Parameter(weight)
        self.bias = js.Parameter(jnp.zeros(n_out))

    def forward(self, x):
        return x @ self.weight.value.T + self.bias.value


class Noise(js.Module):
    """Adds noise in training mode only: the smallest mode-dependent layer."""

    def forward(self, x, rngs=None):
        if self.training:
            return x + jax.random.normal(rngs.next("dropout"), x.shape)
        return x


class Counter(js.Module):
    def __init__(self):
        super().__init__()
        self.calls = js.Buffer(jnp.zeros((), jnp.int32))

    def forward(self, x):
        self.calls.value = self.calls.value + 1
        return x


class MLP(js.Module):
    def __init__(self, sizes=(10, 16, 16, 4), *, rngs):
        super().__init__()
        self.layers = [Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:], strict=False)]

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = jax.nn.relu(x)
        return x


def mse(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


class SGD(js.Object):
    """The smallest optimizer over a live selection, for these tests only."""

    def __init__(self, params, lr):
        self.params = params
        self.lr = lr

    def step(self, grads):
        for param, grad in zip(self.params, self.params.match(grads), strict=True):
            param.value = param.value - self.lr * grad
