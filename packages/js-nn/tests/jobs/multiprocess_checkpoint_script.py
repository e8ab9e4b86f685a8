"""Child process of test_checkpoint_sharded.py: one of two processes on loopback (4 CPU devices
each, one 8-device job) that save one sharded checkpoint together:
``python multiprocess_checkpoint_script.py PROCESS_ID PORT DIR``."""

from __future__ import annotations

import sys

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def global_array(value: np.ndarray, spec: P, process: int) -> jax.Array:
    """``value`` as one array over all 8 devices, each process giving only its own rows."""
    from sharded_checkpoint_script import mesh

    sharding = NamedSharding(mesh((8,), ("x",), jax.devices()), spec)
    rows = value.shape[0] // 2 if spec and spec[0] == "x" else None
    local = value if rows is None else value[process * rows : (process + 1) * rows]
    return jax.make_array_from_process_local_data(sharding, local, value.shape)


def main() -> None:
    # Imported by pytest's doctest collection too: start the job only when run as a script.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_num_cpu_devices", 4)
    process, port, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    # Short timeouts: a failed peer must end the job in seconds, not in JAX's default 5 minutes.
    jax.distributed.initialize(
        f"127.0.0.1:{port}",
        num_processes=2,
        process_id=process,
        initialization_timeout=60,
        heartbeat_timeout_seconds=10,
        shutdown_timeout_seconds=10,
    )
    from sharded_checkpoint_script import Net

    from js.nn.checkpoint import save_checkpoint

    assert jax.device_count() == 8 and jax.local_device_count() == 4
    net = Net()
    net.big.value = global_array(np.asarray(net.big.value), P("x", None), process)
    net.small.value = global_array(np.asarray(net.small.value), P("x"), process)
    net.bias.value = global_array(np.asarray(net.bias.value), P(), process)
    assert not net.big.value.is_fully_addressable
    save_checkpoint(path, {"model": net, "epoch": 7})
    print("saved by process", process, flush=True)


if __name__ == "__main__":
    main()
