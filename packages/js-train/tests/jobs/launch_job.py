"""A job for ``js.training.launch``: 20 Adam steps of the transformer block, data-parallel over
every device of every process; process 0 prints the losses as one JSON line.

Each process passes its own rows of every global batch to ``js.shard_batch``. Run alone (one
process, 8 devices) it trains on the same global batches, so the losses must agree.
"""

import json
import os
import sys
import time

import jax
from jax.sharding import AxisType
from scaling_models import Block, adam, block_batches, block_step

import js
from js.training import init_distributed


def main() -> None:
    init_distributed()  # before any JAX computation
    if sys.argv[1:] == ["fail"]:  # the failure path: process 1 raises, process 0 waits
        if jax.process_index() == 1:
            raise RuntimeError("process 1 failed on purpose")
        print(f"pid {os.getpid()}", flush=True)
        time.sleep(600)

    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
    model = js.shard(Block(rngs=js.Rngs(params=0)), mesh)
    optimizer = adam(model)
    rows = 16 // jax.process_count()
    mine = slice(jax.process_index() * rows, (jax.process_index() + 1) * rows)
    losses = []
    for x, y in block_batches(20, 16):
        batch = js.shard_batch((x[mine], y[mine]), mesh)
        losses.append(float(block_step(model, optimizer, *batch)))
    if jax.process_index() == 0:
        print(json.dumps({"devices": jax.device_count(), "losses": losses}), flush=True)


if __name__ == "__main__":
    main()
