"""Train a small CNN on scikit-learn's 8x8 digits with Task, Trainer, ModelCheckpoint and CSVRun.

    python docs/examples/digits.py                        # 15 epochs, test accuracy >= 0.97
    python docs/examples/digits.py --resume --epochs 20   # continue from the last checkpoint
    python docs/examples/digits.py --overwrite            # start again in the same directory
    python docs/examples/digits.py --fast                 # 2 epochs, for the test suite
    python docs/examples/digits.py --no-cache             # without the compilation cache

Writes ``<out>/checkpoints/`` (best by val/loss, and the last), ``<out>/metrics.csv`` and
``<out>/curves.png`` (default ``runs/digits``). A non-empty ``<out>`` holds an earlier run: it is
refused unless ``--resume`` continues it or ``--overwrite`` replaces it. The data ships with
scikit-learn: nothing is downloaded. Compiled programs are cached in ``~/.cache/js/jax``
(``js.enable_compilation_cache``), so a second run loads them instead of compiling.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import numpy as np
from sklearn.datasets import load_digits

import js
import js.nn as nn
import js.optim
from js.training import (
    ArrayLoader,
    CSVRun,
    ModelCheckpoint,
    Task,
    Trainer,
    load_checkpoint,
    plot_run,
    steps,
)


class DigitsCNN(js.Module):
    """conv-BN-ReLU x2, max-pool, dropout, linear: [B, 1, 8, 8] -> logits [B, 10]."""

    def __init__(self, *, rngs):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, rngs=rngs)
        self.bn2 = nn.BatchNorm2d(64)
        self.pool = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(64 * 4 * 4, 10, rngs=rngs)

    def forward(self, x, *, rngs=None):
        x = jax.nn.relu(self.bn1(self.conv1(x)))  # [B, 32, 8, 8]
        x = self.pool(jax.nn.relu(self.bn2(self.conv2(x))))  # [B, 64, 4, 4]
        return self.fc(self.drop(self.flatten(x), rngs=rngs))  # [B, 10]


def split_digits(seed: int = 0):
    """Train/val/test arrays: images [N, 1, 8, 8] in [0, 1], labels [N] int32 (70/10/20 %)."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # [1797, 1, 8, 8]
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(y))
    test, val, train = np.split(order, [len(y) // 5, len(y) // 5 + len(y) // 10])
    return (x[train], y[train]), (x[val], y[val]), (x[test], y[test])


def evaluate(model, loader) -> float:
    """Accuracy of ``model`` over ``loader``, summed on the device and read once."""
    totals = [steps.classification_eval_step(model, batch) for batch in loader]
    correct, count = jax.device_get((sum(m["correct"] for m in totals),
                                     sum(m["count"] for m in totals)))
    return float(correct) / float(count)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/digits", help="run directory")
    parser.add_argument("--epochs", type=int, default=None, help="total epochs (15; --fast: 2)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier run in --out instead of refusing")
    parser.add_argument("--fast", action="store_true", help="a 2-epoch smoke run")
    parser.add_argument("--no-cache", action="store_true",
                        help="compile every program afresh (no persistent compilation cache)")
    args = parser.parse_args(argv)
    if not args.no_cache:
        js.enable_compilation_cache()  # the next run loads its programs from ~/.cache/js/jax
    epochs = args.epochs or (2 if args.fast else 15)
    started = time.perf_counter()
    out = Path(args.out)
    if args.resume and args.overwrite:
        parser.error("--resume continues the run in --out and --overwrite replaces it: pick one")
    if not args.resume and not args.overwrite and out.is_dir() and any(out.iterdir()):
        parser.error(f"{out} already holds a run: pass --resume to continue it, --overwrite to "
                     "replace it, or another --out")

    train, val, test = split_digits()
    model = DigitsCNN(rngs=js.Rngs(params=0))
    task = Task(model, js.optim.Adam(model.parameters(), lr=2e-3), rngs=js.Rngs(dropout=1))
    checkpoint = ModelCheckpoint(out / "checkpoints", monitor="val/loss", mode="min",
                                 overwrite=args.overwrite)
    start_epoch = 0
    if args.resume:
        restored = load_checkpoint(checkpoint.path, {**task.checkpoint_objects(), "epoch": 0},
                                   which="last")
        start_epoch = restored["epoch"] + 1
        if start_epoch >= epochs:
            print(f"nothing left to train: {checkpoint.path} already holds epochs 0-"
                  f"{restored['epoch']} of {epochs}. Pass a larger --epochs to train further.")
            return {"test_accuracy": None, "wall_s": time.perf_counter() - started,
                    "history": []}
        print(f"resuming after epoch {restored['epoch']} from {checkpoint.path}")

    trainer = Trainer(epochs, callbacks=[checkpoint], run=CSVRun(out, resume=args.resume))
    trainer.fit(task, ArrayLoader(*train, batch_size=64, shuffle=True, seed=0),
                ArrayLoader(*val, batch_size=256), start_epoch=start_epoch)

    best = load_checkpoint(checkpoint.path, {**task.checkpoint_objects(), "epoch": 0})
    model.eval()
    accuracy = evaluate(model, ArrayLoader(*test, batch_size=256))
    png = plot_run(out, out / "curves.png")
    wall = time.perf_counter() - started
    print(f"test accuracy {accuracy:.4f} (best checkpoint: epoch {best['epoch']})")
    print(f"best checkpoint: {checkpoint.path / str(best['step'])}")
    print(f"metrics: {out / 'metrics.csv'}")
    print(f"curves: {png}")
    arrays = sum(len(obj.state_dict()) for obj in task.checkpoint_objects().values())
    print(f"device-to-host metric reads (trainer.transfers): {trainer.transfers} in "
          f"{len(trainer.history)} epochs; "
          f"each epoch's checkpoint save also copies {arrays} arrays (parameters, buffers, "
          "optimizer state, Rngs) to the host")
    print(f"wall time {wall:.1f} s")
    return {"test_accuracy": accuracy, "wall_s": wall, "history": trainer.history}


if __name__ == "__main__":
    main()
