"""One epoch of ``Trainer.fit`` on the digits CNN against a hand-written JAX loop.

The model is ``docs/examples/digits.py``'s: conv-BN-ReLU twice (32, 64 channels, 8x8 input),
a max-pool, dropout 0.3 and a linear layer; Adam, batch 64, shuffled every epoch. Time per step
is the epoch's wall time over its batches (host batches included, as a user sees it).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

import js
import js.nn as nn
import js.optim
from js.training import ArrayLoader, Task, Trainer, steps

from . import _common as C
from ._harness import Variant

DROP = 0.3


class DigitsCNN(js.Module):
    def __init__(self, c1: int, c2: int, *, rngs):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, rngs=rngs)
        self.bn2 = nn.BatchNorm2d(c2)
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(DROP)
        self.fc = nn.Linear(c2 * 16, 10, rngs=rngs)

    def forward(self, x, *, rngs=None):
        x = jax.nn.relu(self.bn1(self.conv1(x)))  # [B, c1, 8, 8]
        x = self.pool(jax.nn.relu(self.bn2(self.conv2(x))))  # [B, c2, 4, 4]
        return self.fc(self.drop(x.reshape(x.shape[0], -1), rngs=rngs))  # [B, 10]


def data(limit: int | None = None):
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # [1797, 1, 8, 8]
    y = digits.target.astype(np.int32)
    train = np.random.default_rng(0).permutation(len(y))[: int(len(y) * 0.7)]
    train = train if limit is None else train[:limit]
    return x[train], y[train]


def _forward(p, extra, x):
    from ._cnn import _bn, _conv, _pool

    s1, s2, key = extra
    h, s1 = _bn(_conv(x, p["conv1.weight"], p["conv1.bias"]), p["bn1.weight"], p["bn1.bias"], *s1)
    h, s2 = _bn(
        _conv(jax.nn.relu(h), p["conv2.weight"], p["conv2.bias"]),
        p["bn2.weight"],
        p["bn2.bias"],
        *s2,
    )
    h = _pool(jax.nn.relu(h)).reshape(x.shape[0], -1)
    key, sub = jax.random.split(key)
    h = jnp.where(jax.random.bernoulli(sub, 1.0 - DROP, h.shape), h / (1.0 - DROP), 0.0)
    return h @ p["fc.weight"].T + p["fc.bias"], (s1, s2, key)


def _hand_loop(params, c1: int, c2: int, loader) -> Variant:
    """The hand-written epoch: donated jax.jit step, loss summed on the device, one read."""
    from ._cnn import init_extra

    tx = optax.adam(2e-3)

    def loss_fn(p, extra, x, y):
        logits, extra = _forward(p, extra, x)
        return C.cross_entropy(logits, y), extra

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2, 3))
    def step(p, opt_state, extra, total, x, y):
        (loss, extra), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, extra, x, y)
        updates, opt_state = tx.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, extra, total + loss * x.shape[0]

    state = [params, tx.init(params), init_extra(c1, c2)]

    def epoch():
        loader.set_epoch(0)
        total = jnp.zeros(())
        for x, y in loader:
            *new, total = step(*state, total, x, y)
            state[:] = new
        return jax.device_get(total)

    return Variant(step=epoch, steps_per_call=len(loader))


def variants(
    batch: int = 64, c1: int = 32, c2: int = 64, limit=None, ks=(8, 32)
) -> dict[str, Variant]:
    x, y = data(limit)
    model = DigitsCNN(c1, c2, rngs=js.Rngs(params=0))
    params = C.param_dict(model)
    task = Task(model, js.optim.Adam(model.parameters(), lr=2e-3), rngs=js.Rngs(dropout=1))
    trainer = Trainer(1, progress=False, verbose=False)
    loader = ArrayLoader(x, y, batch_size=batch, shuffle=True, seed=0)
    out = {
        "js Trainer.fit": Variant(
            step=functools.partial(_fit, trainer, task, loader), steps_per_call=len(loader)
        ),
        "jax": _hand_loop(
            params, c1, c2, ArrayLoader(x, y, batch_size=batch, shuffle=True, seed=0)
        ),
    }
    loop_model = DigitsCNN(c1, c2, rngs=js.Rngs(params=0))
    loop_opt = js.optim.Adam(loop_model.parameters(), lr=2e-3)
    loop_rngs, loop_loader = (
        js.Rngs(dropout=1),
        ArrayLoader(x, y, batch_size=batch, shuffle=True, seed=0),
    )

    def js_loop():
        loop_loader.set_epoch(0)
        total = jnp.zeros(())
        for b in loop_loader:
            m = steps.dropout_classification_step(loop_model, loop_opt, b, loop_rngs)
            total = total + m["loss"] * m["count"]
        return jax.device_get(total)

    out["js step loop"] = Variant(step=js_loop, steps_per_call=len(loader))
    for k in ks:
        m = DigitsCNN(c1, c2, rngs=js.Rngs(params=0))
        t = Task(m, js.optim.Adam(m.parameters(), lr=2e-3), rngs=js.Rngs(dropout=1))
        tr = Trainer(1, progress=False, verbose=False, steps_per_execution=k)
        ld = ArrayLoader(x, y, batch_size=batch, shuffle=True, seed=0)
        out[f"js Trainer K={k}"] = Variant(
            step=functools.partial(_fit, tr, t, ld), steps_per_call=len(ld)
        )
    return out


def _fit(trainer, task, loader):
    trainer.fit(task, loader)
