"""CNN on 1x28x28, batch 64: conv-BN-ReLU-pool twice, dropout, linear; Adam."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import js
import js.losses as losses
import js.nn as nn
import js.optim

from . import _common as C
from ._harness import Variant

DROP = 0.25


class CNN(js.Module):
    """``[B, 1, S, S] -> [B, 10]``: two 3x3 convs (c1, c2 channels) with BatchNorm and 2x2 pools."""

    def __init__(self, c1: int, c2: int, size: int, *, rngs):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, rngs=rngs)
        self.bn2 = nn.BatchNorm2d(c2)
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(DROP)
        self.fc = nn.Linear(c2 * (size // 4) ** 2, 10, rngs=rngs)

    def forward(self, x, *, rngs=None):
        x = self.pool(jax.nn.relu(self.bn1(self.conv1(x))))  # [B, c1, S/2, S/2]
        x = self.pool(jax.nn.relu(self.bn2(self.conv2(x))))  # [B, c2, S/4, S/4]
        return self.fc(self.drop(x.reshape(x.shape[0], -1), rngs=rngs))  # [B, 10]


class _ReduceWindowPool(js.Module):
    """js-nn's max pool before the speed work: ``reduce_window`` (slow backward on XLA CPU)."""

    def forward(self, x):
        return _pool_reduce_window(x)


def js_step_fn(model, optimizer, rngs, x, y):
    def loss_fn(model, rngs):
        return losses.cross_entropy(model(x, rngs=rngs), y)

    loss, grads = js.value_and_grad(loss_fn)(model, rngs)
    optimizer.step(grads)
    return loss


js_step = js.jit(js_step_fn)


def batch_norm_before(variant: Variant) -> Variant:
    """``variant`` compiled with js-nn's BatchNorm before its hand-written backward (autodiff)."""
    import js.nn.functional as F

    return C.traced_with(variant, F, "_fused_batch_norm", lambda *arrays: False)


# -- hand-written: NCHW like the js layers, BatchNorm's running statistics and the dropout key
# -- threaded as non-differentiated state.


def _conv(x, w, b):
    y = jax.lax.conv_general_dilated(
        x, w, (1, 1), [(1, 1), (1, 1)], dimension_numbers=("NCHW", "OIHW", "NCHW")
    )
    return y + b[None, :, None, None]


def _bn(x, w, b, mean_run, var_run):
    mean = jnp.mean(x, axis=(0, 2, 3))
    var = jnp.mean(jnp.square(x - mean[None, :, None, None]), axis=(0, 2, 3))
    y = (x - mean[None, :, None, None]) * jax.lax.rsqrt(var[None, :, None, None] + 1e-5)
    stats = jax.lax.stop_gradient((mean, var))
    new = (0.9 * mean_run + 0.1 * stats[0], 0.9 * var_run + 0.1 * stats[1])
    return y * w[None, :, None, None] + b[None, :, None, None], new


def _pool(x):
    """2x2 max pool as reshape + argmax + select (the fast form on XLA CPU; first-max gradient)."""
    B, C_, H, W = x.shape
    windows = x.reshape(B, C_, H // 2, 2, W // 2, 2).transpose(0, 1, 2, 4, 3, 5)
    windows = windows.reshape(B, C_, H // 2, W // 2, 4)
    first = jnp.argmax(windows, axis=-1)[..., None] == jnp.arange(4)
    return jnp.sum(jnp.where(first, windows, 0.0), axis=-1)


def _pool_reduce_window(x):
    """The straightforward max pool: reduce_window (its backward is slow on XLA CPU)."""
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def forward(p, extra, x, pool=_pool):
    """The CNN by hand; ``extra`` = (bn1 stats, bn2 stats, key). Returns (logits, new extra)."""
    (s1, s2, key) = extra
    h, s1 = _bn(_conv(x, p["conv1.weight"], p["conv1.bias"]), p["bn1.weight"], p["bn1.bias"], *s1)
    h = pool(jax.nn.relu(h))
    h, s2 = _bn(_conv(h, p["conv2.weight"], p["conv2.bias"]), p["bn2.weight"], p["bn2.bias"], *s2)
    h = pool(jax.nn.relu(h)).reshape(x.shape[0], -1)
    key, sub = jax.random.split(key)
    keep = jax.random.bernoulli(sub, 1.0 - DROP, h.shape)
    h = jnp.where(keep, h / (1.0 - DROP), 0.0)
    return h @ p["fc.weight"].T + p["fc.bias"], (s1, s2, key)


def _jax_loss(p, extra, x, y, pool=_pool):
    logits, extra = forward(p, extra, x, pool)
    return C.cross_entropy(logits, y), extra


def _jax_loss_reduce_window(p, extra, x, y):
    return _jax_loss(p, extra, x, y, _pool_reduce_window)


def init_extra(c1: int, c2: int, seed: int = 1):
    stats = lambda c: (jnp.zeros(c), jnp.ones(c))  # noqa: E731
    return (stats(c1), stats(c2), jax.random.key(seed))


class _NNXCNN(nnx.Module):
    """The same network in NNX's own layout (NHWC, HWIO kernels)."""

    def __init__(self, c1, c2, size, rngs):
        self.conv1 = nnx.Conv(1, c1, (3, 3), padding="SAME", rngs=rngs)
        self.bn1 = nnx.BatchNorm(c1, momentum=0.9, rngs=rngs)
        self.conv2 = nnx.Conv(c1, c2, (3, 3), padding="SAME", rngs=rngs)
        self.bn2 = nnx.BatchNorm(c2, momentum=0.9, rngs=rngs)
        self.drop = nnx.Dropout(DROP, rngs=nnx.Rngs(dropout=1))
        self.fc = nnx.Linear(c2 * (size // 4) ** 2, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.max_pool(jax.nn.relu(self.bn1(self.conv1(x))), (2, 2), (2, 2))
        x = nnx.max_pool(jax.nn.relu(self.bn2(self.conv2(x))), (2, 2), (2, 2))
        return self.fc(self.drop(x.reshape(x.shape[0], -1)))


def _nnx_loss(model, x, y):
    return C.cross_entropy(model(x), y)


def _torch_model(c1, c2, size):
    import torch.nn as tnn

    return tnn.Sequential(
        tnn.Conv2d(1, c1, 3, padding=1),
        tnn.BatchNorm2d(c1),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Conv2d(c1, c2, 3, padding=1),
        tnn.BatchNorm2d(c2),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Flatten(),
        tnn.Dropout(DROP),
        tnn.Linear(c2 * (size // 4) ** 2, 10),
    )


def _torch_loss(model, x, y):
    import torch

    return torch.nn.functional.cross_entropy(model(x), y.long())


def variants(batch: int, size: int = 28, c1: int = 32, c2: int = 64) -> dict[str, Variant]:
    x, y = C.classes(0, batch, (1, size, size), 10)
    model = CNN(c1, c2, size, rngs=js.Rngs(params=0))
    params = C.param_dict(model)
    optimizer = js.optim.Adam(model.parameters(), lr=C.LR)
    out = {
        "js": C.js_variant(
            js_step, model, optimizer, js.Rngs(dropout=1), jnp.asarray(x), jnp.asarray(y)
        ),
        "jax": C.jax_variant(_jax_loss, params, (x, y), extra=init_extra(c1, c2)),
        "nnx": C.nnx_variant(
            _NNXCNN(c1, c2, size, nnx.Rngs(0)),
            _nnx_loss,
            (np.ascontiguousarray(x.transpose(0, 2, 3, 1)), y),
        ),
    }
    out["jax (reduce_window pool)"] = C.jax_variant(
        _jax_loss_reduce_window, C.param_dict(model), (x, y), extra=init_extra(c1, c2)
    )
    before = CNN(c1, c2, size, rngs=js.Rngs(params=0))
    before.pool = _ReduceWindowPool()
    out["js (pool before)"] = C.js_variant(
        js_step,
        before,
        js.optim.Adam(before.parameters(), lr=C.LR),
        js.Rngs(dropout=1),
        jnp.asarray(x),
        jnp.asarray(y),
    )
    old_bn = CNN(c1, c2, size, rngs=js.Rngs(params=0))
    out["js (BatchNorm before)"] = batch_norm_before(
        C.js_variant(
            js.jit(js_step_fn),
            old_bn,
            js.optim.Adam(old_bn.parameters(), lr=C.LR),
            js.Rngs(dropout=1),
            jnp.asarray(x),
            jnp.asarray(y),
        )
    )
    if C.HAVE_TORCH:
        C.torch_manual_seed()
        out["torch"] = C.torch_variant(_torch_model(c1, c2, size), _torch_loss, (x, y))
    return out
