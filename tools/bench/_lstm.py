"""LSTM, batch 32, T=100, H=128: a one-layer LSTM and a linear head on the last output; Adam.

Also the compile time at T = 10, 100, 1000 (one ``lax.scan`` per layer: it should not grow
with T).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import js
import js.losses as losses
import js.nn as nn
import js.optim

from . import _common as C
from ._harness import Variant, wait

INPUT = 32


class Forecaster(js.Module):
    """``[B, T, I] -> [B, 1]``: an LSTM, then a linear head on the last timestep."""

    def __init__(self, hidden: int, *, unroll: int = 1, rngs):
        super().__init__()
        self.lstm = nn.LSTM(INPUT, hidden, unroll=unroll, rngs=rngs)
        self.head = nn.Linear(hidden, 1, rngs=rngs)

    def forward(self, x):
        seq, _ = self.lstm(x)  # [B, T, H]
        return self.head(seq[:, -1])  # [B, 1]


class ForecasterBefore(Forecaster):
    """js-nn's LSTM before the speed work: the generic scan, differentiated by autodiff."""

    def forward(self, x):
        from js.nn import _recurrent_scan as R

        ((w_ih, w_hh, bias, _),) = self.lstm._layers()
        proj = R._project(jnp.swapaxes(x, 0, 1), w_ih, bias)  # [T, B, 4H]
        zeros = jnp.zeros((x.shape[0], self.lstm.hidden_size), x.dtype)
        ys, _ = R.scan_layer(R._lstm_cell(w_hh.T), (zeros, zeros), proj)
        return self.head(ys[-1])


@js.jit
def js_step(model, optimizer, x, y):
    def loss_fn(model):
        return losses.mse_loss(model(x), y)

    loss, grads = js.value_and_grad(loss_fn)(model)
    optimizer.step(grads)
    return loss


def _jax_loss(p, extra, x, y):
    """The same LSTM by hand: input projection for all steps at once, one fused 4H matmul per
    step inside ``lax.scan``, PyTorch's gate order i, f, g, o."""
    hidden = p["lstm.weight_hh_l0"].shape[1]
    xs = jnp.swapaxes(x, 0, 1)  # [T, B, I]
    proj = xs @ p["lstm.weight_ih_l0"].T + (p["lstm.bias_ih_l0"] + p["lstm.bias_hh_l0"])
    w_hh_t = p["lstm.weight_hh_l0"].T  # [H, 4H]

    def cell(carry, z_x):
        h, c = carry
        z = z_x + h @ w_hh_t  # [B, 4H]
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), None

    zeros = jnp.zeros((x.shape[0], hidden), x.dtype)
    (h, _), _ = jax.lax.scan(cell, (zeros, zeros), proj)
    pred = h @ p["head.weight"].T + p["head.bias"]
    return jnp.mean(jnp.square(pred - y)), extra


class _NNXForecaster(nnx.Module):
    def __init__(self, hidden, rngs):
        self.rnn = nnx.RNN(nnx.LSTMCell(INPUT, hidden, rngs=rngs))
        self.head = nnx.Linear(hidden, 1, rngs=rngs)

    def __call__(self, x):
        return self.head(self.rnn(x)[:, -1])


def _nnx_loss(model, x, y):
    return jnp.mean(jnp.square(model(x) - y))


class _TorchForecaster:
    def __new__(cls, hidden):
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = torch.nn.LSTM(INPUT, hidden, batch_first=True)
                self.head = torch.nn.Linear(hidden, 1)

            def forward(self, x):
                return self.head(self.lstm(x)[0][:, -1])

        return Net()


def _torch_loss(model, x, y):
    import torch

    return torch.nn.functional.mse_loss(model(x), y)


def data(batch: int, steps: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, steps, INPUT)).astype(np.float32)
    return x, rng.standard_normal((batch, 1)).astype(np.float32)


def js_variant(batch: int, steps: int, hidden: int, unroll: int = 1, cls=Forecaster) -> Variant:
    x, y = data(batch, steps)
    model = cls(hidden, unroll=unroll, rngs=js.Rngs(params=0))
    optimizer = js.optim.Adam(model.parameters(), lr=C.LR)
    return C.js_variant(js_step, model, optimizer, jnp.asarray(x), jnp.asarray(y))


def flops(batch: int, steps: int, hidden: int) -> float:
    """The step's matmul FLOPs, counted by hand (XLA's count takes the scan body once).

    Forward: the input projection ``[T*B, I] x [I, 4H]`` and T recurrent ``[B, H] x [H, 4H]``;
    the backward pass twice that (the input and the weight gradient of each); the head is
    negligible.
    """
    forward = 2 * steps * batch * 4 * hidden * (INPUT + hidden)
    return 3.0 * forward


def variants(batch: int, steps: int, hidden: int) -> dict[str, Variant]:
    x, y = data(batch, steps)
    params = C.param_dict(Forecaster(hidden, rngs=js.Rngs(params=0)))
    reference = C.jax_variant(_jax_loss, params, (x, y))
    reference.flops = lambda: flops(batch, steps, hidden)
    out = {
        "js": js_variant(batch, steps, hidden),
        "jax": reference,
        "nnx": C.nnx_variant(_NNXForecaster(hidden, nnx.Rngs(0)), _nnx_loss, (x, y)),
    }
    out["js (LSTM before)"] = js_variant(batch, steps, hidden, cls=ForecasterBefore)
    if C.HAVE_TORCH:
        C.torch_manual_seed()
        out["torch"] = C.torch_variant(_TorchForecaster(hidden), _torch_loss, (x, y))
    return out


def compile_times(batch: int, hidden: int, lengths=(10, 100, 1000)) -> list[dict]:
    """First call minus a steady call, js and hand-written, for each sequence length T."""
    rows = []
    for steps in lengths:
        x, y = data(batch, steps)
        params = C.param_dict(Forecaster(hidden, rngs=js.Rngs(params=0)))
        for name, variant in (
            ("js", js_variant(batch, steps, hidden)),
            ("jax", C.jax_variant(_jax_loss, params, (x, y))),
        ):
            start = time.perf_counter()
            wait(variant.step())
            first = time.perf_counter() - start
            start = time.perf_counter()
            wait(variant.step())
            steady = time.perf_counter() - start
            rows.append(
                {"T": steps, "variant": name, "compile_s": first - steady, "step_s": steady}
            )
    return rows
