"""A job for ``js.training.launch``: the MLP trained by ``Trainer(mesh=...)`` from grain, each
process reading only its rows of every global batch (``js.training.data.process_batches``);
process 0 prints the per-step losses as one JSON line.

Run alone (one process, 4 devices) it trains on the same global batches, so the losses of
2 processes x 2 devices must agree with it.
"""

import json

import jax
from jax.sharding import AxisType
from js_train_testing import MLP, blobs, make_optimizer

import js
from js.training import Task, Trainer, init_distributed
from js.training.data import process_batches


def main() -> None:
    init_distributed()  # before any JAX computation
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
    model = js.shard(MLP(p=0.0, rngs=js.Rngs(params=0)), mesh)
    task = Task(model, make_optimizer(model))
    x, y = blobs(96)
    rows = process_batches(list(zip(x, y, strict=True)), 16, seed=5)  # this process's rows
    assert len(rows) == 6 and rows[0][0].shape == (16 // jax.process_count(), 4)
    trainer = Trainer(1, mesh=mesh, log_every_n_steps=1, progress=False, verbose=False)
    history = trainer.fit(task, rows.repeat(2))  # 2 epochs, each a new global order: Trainer(1)
    losses = [row["train/loss"] for row in history if "train/loss" in row]
    if jax.process_index() == 0:
        print(json.dumps({"devices": jax.device_count(), "losses": losses}), flush=True)


if __name__ == "__main__":
    main()
