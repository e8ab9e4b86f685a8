"""Data-parallel training of the digits CNN over every device of every process.

    python docs/examples/digits_parallel.py                   # one process, its devices
    python -m js.training.launch --processes 2 --devices-per-process 2 \\
        docs/examples/digits_parallel.py                      # 2 processes x 2 CPU devices
    python -m js.training.launch --processes 2 --devices-per-process 2 \\
        docs/examples/digits_parallel.py --epochs 1           # a short run (the test suite's)

The model and the dropout stream are replicated on a one-axis mesh (``js.shard``); the Trainer
splits every batch over the mesh's ``data`` axis (``Trainer(mesh=...)``), and XLA's SPMD
partitioner adds the gradient all-reduce. Each process loads only its own rows of each global
batch. Process 0 prints the metrics and the test accuracy.
"""

from __future__ import annotations

import argparse

import jax
from digits import DigitsCNN, split_digits  # the single-device example beside this file
from jax.sharding import AxisType

import js
import js.optim
from js.training import ArrayLoader, Task, Trainer, init_distributed, steps

GLOBAL_BATCH = 64


def local_rows(x, y, batch: int):
    """This process's rows of each global batch: whole batches only, split between processes."""
    n = len(y) // batch * batch
    x, y = x[:n].reshape(-1, batch, *x.shape[1:]), y[:n].reshape(-1, batch)  # [steps, batch, ...]
    share = batch // jax.process_count()
    mine = slice(jax.process_index() * share, (jax.process_index() + 1) * share)
    return x[:, mine].reshape(-1, *x.shape[2:]), y[:, mine].reshape(-1), share


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10, help="epochs to train (10)")
    args = parser.parse_args(argv)
    init_distributed()  # joins the launcher's (or the cluster's) job; nothing in a plain process
    devices = jax.device_count()
    mesh = jax.make_mesh((devices,), ("data",), axis_types=(AxisType.Auto,))
    main_process = jax.process_index() == 0

    train, val, test = split_digits()
    model = js.shard(DigitsCNN(rngs=js.Rngs(params=0)), mesh)  # before the optimizer
    rngs = js.shard(js.Rngs(dropout=1), mesh)
    task = Task(model, js.optim.Adam(model.parameters(), lr=2e-3), rngs=rngs)
    x, y, share = local_rows(*train, GLOBAL_BATCH)
    vx, vy, val_share = local_rows(*val, 2 * GLOBAL_BATCH)
    trainer = Trainer(args.epochs, mesh=mesh, progress=False, verbose=main_process)
    trainer.fit(task, ArrayLoader(x, y, batch_size=share, shuffle=True, seed=0),
                ArrayLoader(vx, vy, batch_size=val_share))

    model.eval()
    tx, ty, test_share = local_rows(*test, 2 * GLOBAL_BATCH)
    totals = [steps.classification_eval_step(model, js.shard_batch(batch, mesh))
              for batch in ArrayLoader(tx, ty, batch_size=test_share)]
    correct, count = jax.device_get((sum(m["correct"] for m in totals),
                                     sum(m["count"] for m in totals)))
    accuracy = float(correct) / float(count)
    if main_process:
        print(f"{jax.process_count()} processes, {devices} devices: test accuracy "
              f"{accuracy:.4f} over {int(count)} images")
    return {"test_accuracy": accuracy, "history": trainer.history}


if __name__ == "__main__":
    main()
