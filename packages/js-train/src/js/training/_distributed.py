"""``init_distributed``: join the multi-process job this process belongs to, if any.

Two kinds of job are joined, and the first that applies wins:

* ``"launch"``: a job ``python -m js.training.launch`` started. The launcher sets
  ``JS_COORDINATOR_ADDRESS``, ``JS_NUM_PROCESSES`` and ``JS_PROCESS_ID``; they are passed to
  ``jax.distributed.initialize`` with JAX's own cluster detection switched off
  (``cluster_detection_method="deactivate"``), so a launcher started inside a SLURM allocation
  or a Kubernetes pod still makes its own job.
* a cluster JAX detects: JAX's registry of cluster environments (``jax._src.clusters``: Open
  MPI ``"ompi"``, SLURM ``"slurm"``, Cloud TPU ``"gketpu"``/``"gcetpu"``, Kubernetes ``"k8s"``),
  walked in the order ``jax.distributed.initialize()`` walks it, each asked
  ``is_env_present()``; the first present one is joined by ``jax.distributed.initialize()``
  without coordinates, which reads them from that same environment.

Nothing is joined in a plain process, nor in a cluster job of one process (``SLURM_NTASKS=1``,
``OMPI_COMM_WORLD_SIZE=1``): a single task keeps every local device (JAX's detection would
restrict a GPU task to the device numbered ``SLURM_LOCALID``) and opens no port (JAX picks the
SLURM port from the job id, so two one-task steps of one job on one node would clash). Kubernetes
counts as present only in an indexed Job (``JOB_COMPLETION_INDEX``, as JAX's detection needs):
every pod has ``KUBERNETES_SERVICE_HOST``, and a notebook or a Deployment pod is a plain process.

A SLURM or Open MPI environment is read and checked before anything changes (JAX's own reading
of it, its error wrapped with what to check); Kubernetes and TPU coordinates come from the
cluster's API during ``jax.distributed.initialize``. A process that does not arrive within
``initialization_timeout`` makes JAX end every waiting process (``DEADLINE_EXCEEDED``).

A failed job must end promptly: a process that raises after ``jax.distributed.initialize``
otherwise waits in JAX's shutdown barrier (300 s by default) for peers that will never arrive.
So the shutdown timeout is short, and an uncaught exception prints its traceback and exits at
once; the launcher (or srun, mpirun) then stops the other processes.
"""

from __future__ import annotations

import os
import sys
import traceback
from importlib.util import find_spec

import jax

from js._jax import clusters  # the registry jax.distributed.initialize() detects clusters with

ADDRESS, PROCESSES, PROCESS_ID = "JS_COORDINATOR_ADDRESS", "JS_NUM_PROCESSES", "JS_PROCESS_ID"
LAUNCH = "launch"

# Clusters whose coordinates are environment variables, read (by JAX) and checked up front:
# what to call the job in an error, the variables to show there, and how such a job is started.
_FROM_ENVIRONMENT = {
    "slurm": (
        "a SLURM job",
        ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"),
        "start one process per task with srun (srun python train.py inside the sbatch script), "
        "or unset the SLURM_ variables to run a plain process",
    ),
    "ompi": (
        "an Open MPI job",
        (
            "OMPI_MCA_orte_hnp_uri",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_LOCAL_RANK",
        ),
        "start the processes with mpirun -np N python train.py, or unset the OMPI_ variables",
    ),
}


def _int_variable(name: str, low: int) -> int:
    value = os.environ.get(name)
    if value is None or not value.strip().isdigit() or int(value) < low:
        raise ValueError(
            f"init_distributed: {ADDRESS} is set, so {name} must be an integer >= {low}, got "
            f"{value!r}. Fix: start the job with python -m js.training.launch, or unset {ADDRESS}."
        )
    return int(value)


def _cluster_name(cluster: type) -> str:
    return cluster.name or cluster.__name__.removesuffix("Cluster").lower()  # K8sCluster: "k8s"


def _present(cluster: type, name: str) -> bool:
    if name == "k8s":
        if "KUBERNETES_SERVICE_HOST" not in os.environ or "JOB_COMPLETION_INDEX" not in os.environ:
            return False  # any pod, not an indexed Job: a plain process
        if find_spec("kubernetes") is None:  # JAX would warn and run each pod alone
            raise ValueError(
                "init_distributed: this pod belongs to an indexed Kubernetes Job "
                f"(JOB_COMPLETION_INDEX={os.environ['JOB_COMPLETION_INDEX']}), but the kubernetes "
                "package JAX reads the Job with is not installed. Fix: pip install 'jax[k8s]' "
                "in the image, or unset JOB_COMPLETION_INDEX to run each pod alone."
            )
    return bool(cluster.is_env_present())


def _inconsistency(address: str, processes: int, rank: int, local: int | None) -> str | None:
    """What is wrong with coordinates JAX read from the environment, or None."""
    host, _, port = address.rpartition(":")
    if not host:
        return f"the coordinator address {address!r} has no host"
    if not (port.isdigit() and 0 < int(port) < 65536):
        return f"the coordinator port {port!r} is not in 1..65535 (JAX_COORDINATOR_PORT?)"
    if processes < 1:
        return f"the process count {processes} is below 1"
    if not 0 <= rank < processes:
        return f"process id {rank} is not in 0..{processes - 1}"
    if local is not None and local < 0:
        return f"the local process id {local} is negative"
    return None


def _environment_processes(name: str, cluster: type) -> int:
    """The process count of a SLURM or Open MPI job, its variables checked as JAX reads them."""
    job, variables, fix = _FROM_ENVIRONMENT[name]
    shown = ", ".join(f"{v}={os.environ.get(v)!r}" for v in variables)
    port = os.environ.get("JAX_COORDINATOR_PORT")
    try:
        address = cluster.get_coordinator_address(timeout_secs=None, override_coordinator_port=port)
        processes, rank = cluster.get_process_count(), cluster.get_process_id()
        local = cluster.get_local_process_id()
    except (KeyError, ValueError, RuntimeError) as error:
        raise ValueError(
            f"init_distributed: found {job} ({shown}) but JAX cannot read it: "
            f"{type(error).__name__}: {error}. Check those variables. Fix: {fix}."
        ) from error
    problem = _inconsistency(address, processes, rank, local)
    if problem is not None:
        raise ValueError(
            f"init_distributed: found {job} ({shown}) that is inconsistent: {problem}. Fix: {fix}."
        )
    return processes


def detect_cluster() -> str | None:
    """The multi-process job :func:`init_distributed` joins in this process, or None.

    ``"launch"`` when ``JS_COORDINATOR_ADDRESS`` is set (``python -m js.training.launch``), else
    the name of the first cluster JAX detects, in ``jax.distributed.initialize()``'s order:
    ``"ompi"`` (``mpirun``), ``"slurm"`` (``srun``), ``"gketpu"`` or ``"gcetpu"`` (Cloud TPU),
    ``"k8s"`` (an indexed Kubernetes Job or JobSet). None in a plain process and in a cluster job
    of one process (``SLURM_NTASKS=1``). It joins nothing and starts no JAX backend.

    Returns:
        The environment's name, or None when there is no job to join.

    Raises:
        ValueError: SLURM's or Open MPI's variables do not describe a job (a non-integer
            count or job id, a process id out of range, no host), or an indexed Kubernetes Job
            lacks the ``kubernetes`` package; the message names the variables and the fix.

    Example:
        >>> from js.training import detect_cluster
        >>> detect_cluster() is None  # a plain process
        True
    """
    if ADDRESS in os.environ:
        return LAUNCH
    for cluster in clusters.ClusterEnv._cluster_types:
        name = _cluster_name(cluster)
        if cluster.opt_in_only_method or not _present(cluster, name):
            continue  # mpi4py is opt-in: jax.distributed.initialize() skips it too
        if name in _FROM_ENVIRONMENT and _environment_processes(name, cluster) == 1:
            return None
        return name
    return None


def _exit_at_once(kind, value, tb) -> None:
    """Print an uncaught exception and exit now, skipping the distributed shutdown barrier."""
    traceback.print_exception(kind, value, tb)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def init_distributed(*, initialization_timeout: int = 60, shutdown_timeout: int = 10) -> bool:
    """Join this process's multi-process job, if it has one; True when it joined.

    The job is the one :func:`detect_cluster` names: a ``python -m js.training.launch`` job (its
    ``JS_`` variables win over any cluster's), else a cluster JAX detects (SLURM ``srun``, Open
    MPI ``mpirun``, an indexed Kubernetes Job or JobSet, a Cloud TPU slice), joined through
    ``jax.distributed.initialize()`` without coordinates. In a plain process, or a cluster job of
    one process, it does nothing and returns False. When it joins it selects the gloo CPU
    collectives and makes an uncaught exception end the process at once (not after JAX's 300 s
    shutdown barrier). Call it first, before any JAX computation; then ``jax.devices()`` lists
    every process's devices and ``detect_cluster()`` says which job it joined.

    Args:
        initialization_timeout: seconds to wait for every process to join.
        shutdown_timeout: seconds to wait for the others at a normal exit.

    Returns:
        True when it joined a job of several processes, False when there was none.

    Raises:
        ValueError: the environment names a job but does not describe it consistently (the
            launcher's variables, or see :func:`detect_cluster`); raised before anything
            changes.

    Example:
        >>> from js.training import init_distributed
        >>> init_distributed()  # a plain process: nothing to join
        False
    """
    environment = detect_cluster()
    if environment is None:
        return False
    if environment == LAUNCH:
        processes = _int_variable(PROCESSES, 1)
        process_id = _int_variable(PROCESS_ID, 0)
        if process_id >= processes:
            raise ValueError(
                f"init_distributed: {PROCESS_ID}={process_id} is not below "
                f"{PROCESSES}={processes}. Fix: number the processes 0 .. n-1 "
                "(js.training.launch does)."
            )
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if environment == LAUNCH:
        jax.distributed.initialize(
            os.environ[ADDRESS],
            num_processes=processes,
            process_id=process_id,
            cluster_detection_method="deactivate",
            initialization_timeout=initialization_timeout,
            shutdown_timeout_seconds=shutdown_timeout,
        )
    else:
        jax.distributed.initialize(
            initialization_timeout=initialization_timeout,
            shutdown_timeout_seconds=shutdown_timeout,
        )
    sys.excepthook = _exit_at_once
    return True
