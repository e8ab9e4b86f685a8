"""Compress scikit-learn's 8x8 digits to 8 numbers and back with an MLP autoencoder.

    python docs/examples/autoencoder.py [--fast]

A Task subclass uses ``steps.autoencoder_step`` / ``steps.autoencoder_eval_step``: the batch
is the input and the target at once.
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits

import js
import js.nn as nn
import js.optim
from js.training import ArrayLoader, Task, Trainer, steps


class AutoEncoder(js.Module):
    """[B, 64] -> code [B, 8] -> [B, 64]."""

    def __init__(self, code: int = 8, *, rngs):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 32, rngs=rngs), nn.ReLU(),
                                     nn.Linear(32, code, rngs=rngs))
        self.decoder = nn.Sequential(nn.Linear(code, 32, rngs=rngs), nn.ReLU(),
                                     nn.Linear(32, 64, rngs=rngs))

    def forward(self, x):
        return self.decoder(self.encoder(x))


class ReconstructionTask(Task):
    def training_step(self, model, optimizer, rngs, batch):
        return steps.autoencoder_step(model, optimizer, batch)

    def validation_step(self, model, batch):
        return steps.autoencoder_eval_step(model, batch)


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="a short smoke run")
    parser.add_argument("--no-cache", action="store_true",
                        help="compile every program afresh (no persistent compilation cache)")
    args = parser.parse_args(argv)
    if not args.no_cache:
        js.enable_compilation_cache()  # the next run loads its programs from ~/.cache/js/jax
    x = (load_digits().data / 16.0).astype(np.float32)  # [1797, 64] in [0, 1]
    order = np.random.default_rng(0).permutation(len(x))
    train, val = x[order[:1500]], x[order[1500:]]
    model = AutoEncoder(rngs=js.Rngs(params=0))
    task = ReconstructionTask(model, js.optim.Adam(model.parameters(), lr=3e-3))
    history = Trainer(3 if args.fast else 30).fit(
        task, ArrayLoader(train, batch_size=64, shuffle=True), ArrayLoader(val, batch_size=512))
    baseline = float(np.mean((val - train.mean(0)) ** 2))  # predict the mean image
    mse = history[-1]["val/loss"]
    print(f"reconstruction MSE {mse:.4f} vs mean-image baseline {baseline:.4f}")
    return mse


if __name__ == "__main__":
    main()
