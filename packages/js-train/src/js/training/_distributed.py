"""``init_distributed``: join the multi-process job that ``js.training.launch`` started.

The launcher sets ``JS_COORDINATOR_ADDRESS``, ``JS_NUM_PROCESSES`` and ``JS_PROCESS_ID`` for each
process; this reads them and calls ``jax.distributed.initialize`` (JAX's own multi-controller
runtime), and does nothing in a plain single process. On a cluster, call
``jax.distributed.initialize()`` as JAX documents instead (it detects Slurm, Open MPI, TPU pods).

A failed job must end promptly: a process that raises after ``jax.distributed.initialize``
otherwise waits in JAX's shutdown barrier (300 s by default) for peers that will never arrive.
So the shutdown timeout is short, and an uncaught exception prints its traceback and exits at
once; the launcher then stops the other processes.
"""

from __future__ import annotations

import os
import sys
import traceback

import jax

ADDRESS, PROCESSES, PROCESS_ID = "JS_COORDINATOR_ADDRESS", "JS_NUM_PROCESSES", "JS_PROCESS_ID"


def _int_variable(name: str, low: int) -> int:
    value = os.environ.get(name)
    if value is None or not value.strip().isdigit() or int(value) < low:
        raise ValueError(
            f"init_distributed: {ADDRESS} is set, so {name} must be an integer >= {low}, got "
            f"{value!r}. Fix: start the job with python -m js.training.launch, or unset {ADDRESS}."
        )
    return int(value)


def _exit_at_once(kind, value, tb) -> None:
    """Print an uncaught exception and exit now, skipping the distributed shutdown barrier."""
    traceback.print_exception(kind, value, tb)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def init_distributed(*, initialization_timeout: int = 60, shutdown_timeout: int = 10) -> bool:
    """Join the job ``python -m js.training.launch`` started; True when there is one.

    In a single process (no ``JS_COORDINATOR_ADDRESS``) it does nothing and returns False. In a
    launched process it selects the gloo CPU collectives, calls ``jax.distributed.initialize``
    with the launcher's address, process count and id, and makes an uncaught exception end the
    process at once (not after JAX's 300 s shutdown barrier). Call it first, before any JAX
    computation; then ``jax.devices()`` lists every process's devices.

    Args:
        initialization_timeout: seconds to wait for every process to join.
        shutdown_timeout: seconds to wait for the others at a normal exit.

    Example:
        >>> from js.training import init_distributed
        >>> init_distributed()  # a plain process: nothing to join
        False
    """
    address = os.environ.get(ADDRESS)
    if address is None:
        return False
    processes = _int_variable(PROCESSES, 1)
    process_id = _int_variable(PROCESS_ID, 0)
    if process_id >= processes:
        raise ValueError(
            f"init_distributed: {PROCESS_ID}={process_id} is not below {PROCESSES}={processes}. "
            "Fix: number the processes 0 .. n-1 (js.training.launch does)."
        )
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        address,
        num_processes=processes,
        process_id=process_id,
        initialization_timeout=initialization_timeout,
        shutdown_timeout_seconds=shutdown_timeout,
    )
    sys.excepthook = _exit_at_once
    return True
