"""The child processes of tools/bench/stop_time.py (a script: the launcher starts it by path).

    python tools/bench/_stop_child.py single MODEL DIR   # trains until a signal stops it
    python tools/bench/_stop_child.py job DIR CRASH      # under js.training.launch: process 1
                                                          # of the first start dies at CRASH

MODEL is ``digits`` (the digits CNN of docs/examples/digits.py, Adam, batch 64) or ``mlp50m``
(an MLP of 50.4M parameters, Adam, batch 64 of random rows). A ModelCheckpoint in ``DIR``
(``every_n_steps`` too large to save on its own) saves the step a signal stops at. Lines on
stdout, each with ``time.time()`` for the parent: ``ready T`` once the step is compiled and
running, ``saved T`` when the fit's end has waited for the checkpoint's write; ``job``: ``crash
T`` just before process 1 dies, ``start R T`` as each start's process 0 begins (R: the restart
count), ``resumed R S`` (the step loaded), ``first R T`` at its first finished step and ``done
T`` at the end.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tools.bench

import jax  # noqa: E402
import numpy as np  # noqa: E402

import js  # noqa: E402
import js.nn as nn  # noqa: E402
import js.optim  # noqa: E402
from js.training import (  # noqa: E402
    ArrayLoader,
    Callback,
    ModelCheckpoint,
    Task,
    Trainer,
    init_distributed,
    load_checkpoint,
)

NEVER = 10**9  # every_n_steps: no periodic save, only the stop's
WIDTHS = (1024, 4096, 4096, 4096, 3072, 10)  # 50.4M parameters


class MLP(js.Module):
    def __init__(self, *, rngs):
        super().__init__()
        pairs = zip(WIDTHS[:-1], WIDTHS[1:], strict=True)
        self.layers = nn.ModuleList([nn.Linear(a, b, rngs=rngs) for a, b in pairs])

    def forward(self, x, *, rngs=None):  # the Task passes its Rngs (for the CNN's dropout)
        for layer in self.layers[:-1]:
            x = nn.functional.relu(layer(x))
        return self.layers[-1](x)


def digits_data():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # [N, 1, 8, 8]
    return x, digits.target.astype(np.int32)


def build(name: str):
    """The model and its training rows."""
    if name == "digits":
        from tools.bench._digits import DigitsCNN

        return DigitsCNN(32, 64, rngs=js.Rngs(params=0)), *digits_data()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1024, WIDTHS[0])).astype(np.float32)
    return MLP(rngs=js.Rngs(params=0)), x, rng.integers(0, 10, len(x)).astype(np.int32)


class Report(Callback):
    """``ready`` after ``warm`` steps (past the compilation), ``saved`` at the fit's end (after
    the ModelCheckpoint's ``on_fit_end``, which waits for its write)."""

    def __init__(self, warm: int):
        self.warm = warm

    def on_step_end(self, trainer, task, step):
        if step == self.warm:
            print(f"ready {time.time()}", flush=True)

    def on_fit_end(self, trainer, task):
        print(f"saved {time.time()}", flush=True)


def single(name: str, path: str) -> None:
    model, x, y = build(name)
    task = Task(model, js.optim.Adam(model.parameters(), lr=1e-3), js.Rngs(dropout=0))
    checkpoint = ModelCheckpoint(path, "train/loss", every_n_steps=NEVER)
    trainer = Trainer(
        max_steps=NEVER, callbacks=[checkpoint, Report(20)], progress=False, verbose=False
    )
    trainer.fit(task, ArrayLoader(x, y, batch_size=64, shuffle=True, seed=0))


class Job(Callback):
    """The job's reports from process 0; process 1 of the first start dies at ``crash``."""

    def __init__(self, crash: int, restart: int):
        self.crash, self.restart, self.first = crash, restart, True

    def on_step_end(self, trainer, task, step):
        if self.first and jax.process_index() == 0:
            self.first = False
            print(f"first {self.restart} {time.time()}", flush=True)
        if step == self.crash and self.restart == 0 and jax.process_index() == 1:
            print(f"crash {time.time()}", flush=True)
            os._exit(1)


def job(path: str, crash: int) -> None:
    from jax.sharding import AxisType

    from js.training.data import process_batches

    init_distributed()
    restart = int(os.environ.get("JS_RESTART_COUNT", "0"))
    if jax.process_index() == 0:
        print(f"start {restart} {time.time()}", flush=True)
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
    model, x, y = build("digits")
    model, rngs = js.shard(model, mesh), js.shard(js.Rngs(dropout=0), mesh)
    task = Task(model, js.optim.Adam(model.parameters(), lr=1e-3), rngs)
    data = process_batches(list(zip(x, y, strict=True)), 64, seed=0).repeat(None)
    checkpoint = ModelCheckpoint(path, "train/loss", save_top_k=0, every_n_steps=10)
    trainer = Trainer(
        max_steps=crash + 20,
        mesh=mesh,
        callbacks=[checkpoint, Job(crash, restart)],
        progress=False,
        verbose=False,
    )
    objects = {**task.checkpoint_objects(), "trainer": trainer}
    try:  # the last complete checkpoint, if any (docs/training.md, "Long runs")
        load_checkpoint(path, {**objects, "loader": trainer.loader_position(data)}, "last")
        resumed = True
    except FileNotFoundError:
        resumed = False
    if jax.process_index() == 0 and resumed:
        print(f"resumed {restart} {trainer.global_step}", flush=True)
    trainer.fit(task, data, resume=resumed)
    if jax.process_index() == 0:
        print(f"done {time.time()}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "single":
        single(sys.argv[2], sys.argv[3])
    else:
        job(sys.argv[2], int(sys.argv[3]))
