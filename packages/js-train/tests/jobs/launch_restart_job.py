"""A job for ``js.training.launch --max-restarts``: the MLP trained by ``Trainer(mesh=...)`` over
every process's devices for 12 steps, a ModelCheckpoint every 3 steps in ``DIR``; on start it
continues from the last complete checkpoint there, if any (the resume recipe of
docs/training.md, "Long runs"):

    python launch_restart_job.py DIR [CRASH_STEP]

With ``CRASH_STEP``, process 1 of the first start (``JS_RESTART_COUNT=0``) dies at the end of
that step (``os._exit(1)``, as a lost machine would). Process 0 prints ``step N`` after each
step and, at the end, one JSON line: the restart count, the step it resumed from, the losses
of its steps and the SHA-256 of every final parameter and buffer (bit for bit).
"""

import hashlib
import json
import os
import sys

import jax
import numpy as np
from jax.sharding import AxisType
from js_train_testing import MLP, blobs, make_optimizer

import js
from js.training import Callback, ModelCheckpoint, Task, Trainer, init_distributed, load_checkpoint
from js.training.data import process_batches


class Crash(Callback):
    """Process 1 of the first start dies at the end of step ``step``; process 0 reports steps."""

    def __init__(self, step: int | None):
        self.step = step

    def on_step_end(self, trainer, task, step):
        if jax.process_index() == 0:
            print(f"step {step}", flush=True)
        first = os.environ.get("JS_RESTART_COUNT", "0") == "0"
        if step == self.step and first and jax.process_index() == 1:
            os._exit(1)


def digest(model: js.Module) -> str:
    """SHA-256 over every parameter and buffer's bytes (replicated: this process's copy)."""
    sha = hashlib.sha256()
    for name, value in sorted(model.state_dict(as_numpy=False).items()):
        sha.update(name.encode() + np.asarray(value.addressable_data(0)).tobytes())
    return sha.hexdigest()


def main() -> None:
    init_distributed()  # before any JAX computation
    path, crash = sys.argv[1], int(sys.argv[2]) if sys.argv[2:] else None
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
    x, y = blobs(96)
    data = process_batches(list(zip(x, y, strict=True)), 16, seed=5).repeat(2)  # 12 steps
    model = js.shard(MLP(p=0.0, rngs=js.Rngs(params=0)), mesh)
    task = Task(model, make_optimizer(model))
    checkpoint = ModelCheckpoint(path, "train/loss", save_top_k=0, every_n_steps=3)
    trainer = Trainer(
        1,
        mesh=mesh,
        callbacks=[checkpoint, Crash(crash)],
        log_every_n_steps=1,
        progress=False,
        verbose=False,
    )
    objects = {**task.checkpoint_objects(), "trainer": trainer}
    try:  # the last complete checkpoint, if the directory has one
        load_checkpoint(path, {**objects, "loader": trainer.loader_position(data)}, "last")
        resumed = True
    except FileNotFoundError:  # no directory, or no complete step in it yet
        resumed = False
    start = trainer.global_step
    history = trainer.fit(task, data, resume=resumed)
    if jax.process_index() == 0:
        report = {
            "restart": int(os.environ.get("JS_RESTART_COUNT", "0")),
            "resumed_from": start if resumed else None,
            "losses": [row["train/loss"] for row in history if "train/loss" in row],
            "params": digest(model),
        }
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
