"""Forecast a generated noisy seasonal series one step ahead with an LSTM (regression steps).

    python docs/examples/lstm_forecast.py [--fast]

A Task subclass swaps the default classification steps for ``steps.regression_step`` and
``steps.regression_eval_step``; the Trainer aggregates the count-weighted MSE.
"""

from __future__ import annotations

import argparse

import numpy as np

import js
import js.nn as nn
import js.optim
from js.training import ArrayLoader, Task, Trainer, steps


class Forecaster(js.Module):
    """LSTM over a window, linear head on the last hidden state: [B, T, 1] -> [B, 1]."""

    def __init__(self, hidden: int = 32, *, rngs):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, rngs=rngs)
        self.head = nn.Linear(hidden, 1, rngs=rngs)

    def forward(self, x):
        sequence, _ = self.lstm(x)  # [B, T, H]
        return self.head(sequence[:, -1])  # [B, 1]


class ForecastTask(Task):
    def training_step(self, model, optimizer, rngs, batch):
        return steps.regression_step(model, optimizer, batch)

    def validation_step(self, model, batch):
        return steps.regression_eval_step(model, batch)


def windows(series: np.ndarray, width: int):
    """Inputs [N, width, 1] and next values [N, 1] from a 1-D series."""
    x = np.stack([series[i:i + width] for i in range(len(series) - width)])[..., None]
    return x.astype(np.float32), series[width:, None].astype(np.float32)


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="a short smoke run")
    parser.add_argument("--no-cache", action="store_true",
                        help="compile every program afresh (no persistent compilation cache)")
    args = parser.parse_args(argv)
    if not args.no_cache:
        js.enable_compilation_cache()  # the next run loads its programs from ~/.cache/js/jax
    t = np.arange(1200 if not args.fast else 400)
    rng = np.random.default_rng(0)
    series = np.sin(2 * np.pi * t / 50) + 0.5 * np.sin(2 * np.pi * t / 17) + 0.1 * rng.normal(
        size=len(t))
    x, y = windows(series, 24)
    cut = int(0.8 * len(x))  # earlier part trains, the later part validates
    model = Forecaster(rngs=js.Rngs(params=0))
    task = ForecastTask(model, js.optim.Adam(model.parameters(), lr=1e-2))
    history = Trainer(3 if args.fast else 20).fit(
        task, ArrayLoader(x[:cut], y[:cut], batch_size=64, shuffle=True),
        ArrayLoader(x[cut:], y[cut:], batch_size=256))
    naive = float(np.mean((x[cut:, -1] - y[cut:]) ** 2))  # "tomorrow equals today"
    mse = history[-1]["val/loss"]
    print(f"validation MSE {mse:.4f} vs repeat-last-value baseline {naive:.4f}")
    return mse


if __name__ == "__main__":
    main()
