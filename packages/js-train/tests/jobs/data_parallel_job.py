"""A job for ``js.training.launch``: the MLP trained by ``Trainer(mesh=...)`` from grain, each
process reading only its rows of every global batch (``js.training.data.process_batches``);
process 0 prints the per-step losses as one JSON line.

Run alone (one process, 4 devices) it trains on the same global batches, so the losses of
2 processes x 2 devices must agree with it. ``data_parallel_job.py resume DIR`` also stops a
second run after 7 steps (a ModelCheckpoint every 5 steps in DIR, with grain's iterator
state) and resumes it from step 5 in a fresh Trainer: its losses must be the straight run's.
"""

import json
import sys

import jax
from jax.sharding import AxisType
from js_train_testing import MLP, blobs, make_optimizer

import js
from js.training import ModelCheckpoint, Task, Trainer, init_distributed, load_checkpoint
from js.training.data import process_batches


def fit(mesh, rows, seed=0, resume_from=None, **options) -> list[float]:
    """The per-step losses of the MLP (params seeded ``seed``) trained on 2 epochs of rows."""
    model = js.shard(MLP(p=0.0, rngs=js.Rngs(params=seed)), mesh)
    task = Task(model, make_optimizer(model))
    data = rows.repeat(2)  # 2 epochs, each a new global order: one Trainer epoch
    trainer = Trainer(1, mesh=mesh, log_every_n_steps=1, progress=False, verbose=False, **options)
    if resume_from is not None:
        objects = {**task.checkpoint_objects(), "trainer": trainer}
        load_checkpoint(resume_from, {**objects, "loader": trainer.loader_position(data)}, "last")
    history = trainer.fit(task, data, resume=resume_from is not None)
    return [row["train/loss"] for row in history if "train/loss" in row]


def main() -> None:
    init_distributed()  # before any JAX computation
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
    x, y = blobs(96)
    rows = process_batches(list(zip(x, y, strict=True)), 16, seed=5)  # this process's rows
    assert len(rows) == 6 and rows[0][0].shape == (16 // jax.process_count(), 4)
    report = {"devices": jax.device_count(), "losses": fit(mesh, rows)}
    if sys.argv[1:2] == ["resume"]:
        checkpoint = ModelCheckpoint(sys.argv[2], "train/loss", every_n_steps=5)
        fit(mesh, rows, callbacks=[checkpoint], max_steps=7)
        report["resumed"] = fit(mesh, rows, seed=7, resume_from=sys.argv[2])
    if jax.process_index() == 0:
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
