"""A job for test_cluster.py: join the job ``init_distributed`` finds, run one collective.

Every process prints one JSON line: whether it joined, the environment ``detect_cluster``
names, its process index, the device count, and every process's index gathered across the job
(a gloo all-gather on CPU).
"""

import json

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

from js.training import detect_cluster, init_distributed


def main() -> None:
    joined = init_distributed()  # before any JAX computation
    gathered = multihost_utils.process_allgather(jnp.array([jax.process_index()]))
    report = {
        "joined": joined,
        "environment": detect_cluster(),
        "process": jax.process_index(),
        "devices": jax.device_count(),
        "gathered": [int(i) for i in gathered.ravel()],
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
