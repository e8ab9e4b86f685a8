"""init_distributed on a cluster: JAX's cluster detection, simulated SLURM on loopback.

The real case starts two processes with the variables ``srun`` gives its tasks (one "node",
``localhost``); JAX's SlurmCluster reads them and picks the coordinator port from the job id,
so each run draws a job id whose port is free.
"""

import json
import os
import random
import socket
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from js._jax import distributed
from js.training import detect_cluster, init_distributed

JOBS = Path(__file__).parent / "jobs"  # the child-process scripts
JOB_VARIABLES = ("JS_", "SLURM_", "OMPI_", "KUBERNETES_SERVICE_HOST", "JOB_COMPLETION_INDEX")


def slurm(job_id: int | str, tasks: int | str, rank: int | str, **more: str) -> dict[str, str]:
    """The variables srun sets for task ``rank`` of a one-node step."""
    env = {"SLURM_JOB_ID": str(job_id), "SLURM_STEP_NODELIST": "localhost"}
    env.update(SLURM_NTASKS=str(tasks), SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank))
    return env | more


@pytest.fixture
def plain(monkeypatch):
    """No job variables at all; ``set(**env)`` adds some. Yields that setter."""
    for name in list(os.environ):
        if name.startswith(JOB_VARIABLES):
            monkeypatch.delenv(name)

    def set_env(env: dict[str, str]) -> None:
        for name, value in env.items():
            monkeypatch.setenv(name, value)

    return set_env


def untouched() -> bool:
    """No distributed client or service in this process: nothing was joined."""
    state = distributed.global_state
    return state.client is None and state.service is None


def test_a_plain_process_joins_nothing(plain):
    assert untouched()
    assert detect_cluster() is None
    assert init_distributed() is False
    assert untouched()
    plain({"KUBERNETES_SERVICE_HOST": "10.0.0.1"})  # every pod has it: a notebook is plain too
    assert detect_cluster() is None
    assert init_distributed() is False
    assert untouched()


def test_a_slurm_job_of_one_task_joins_nothing(plain):
    """One task keeps every local device and opens no port: it runs as a plain process."""
    plain(slurm(123, 1, 0))
    assert detect_cluster() is None
    assert init_distributed() is False
    assert untouched()


def test_which_job_is_detected(plain):
    plain(slurm(123, 2, 1))
    assert detect_cluster() == "slurm"
    plain({"JS_COORDINATOR_ADDRESS": "127.0.0.1:1"})  # the launcher's variables win
    assert detect_cluster() == "launch"


INCONSISTENT = [
    (
        slurm("abc", 2, 0),
        r"found a SLURM job \(SLURM_JOB_ID='abc', .*JAX cannot read it: "
        r"ValueError: invalid literal for int\(\) with base 10: 'abc'",
    ),
    (slurm(1, "two", 0), r"SLURM_NTASKS='two'.* JAX cannot read it"),
    (
        slurm(1, 2, 2),
        r"inconsistent: process id 2 is not in 0..1. Fix: start one process per "
        r"task with srun",
    ),
    (slurm(1, 0, 0), r"inconsistent: the process count 0 is below 1"),
    (slurm(1, 2, 0, SLURM_STEP_NODELIST=""), r"the coordinator address ':61441' has no host"),
    (slurm(1, 2, 0, JAX_COORDINATOR_PORT="99999"), r"the coordinator port '99999' is not in"),
    (
        {
            "OMPI_MCA_orte_hnp_uri": "12.0;tcp://x",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        },
        r"found an Open MPI job .* RuntimeError: Could not parse coordinator IP address.*"
        r"Fix: start the processes with mpirun",
    ),
]


@pytest.mark.parametrize(("env", "message"), INCONSISTENT)
def test_an_inconsistent_cluster_fails_before_anything_changes(plain, env, message):
    plain(env)
    with pytest.raises(ValueError, match=message):
        init_distributed()
    assert untouched()


@pytest.mark.skipif(find_spec("kubernetes") is not None, reason="kubernetes is installed")
def test_an_indexed_kubernetes_job_needs_the_kubernetes_package(plain):
    plain({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "JOB_COMPLETION_INDEX": "1"})
    with pytest.raises(
        ValueError,
        match=r"indexed Kubernetes Job \(JOB_COMPLETION_INDEX=1\).*"
        r"Fix: pip install 'jax\[k8s\]'",
    ):
        init_distributed()
    assert untouched()


def free_job_id() -> int:
    """A SLURM job id whose port (JAX: 61440 + id % 4096) nothing listens on now."""
    while True:
        job_id = random.randrange(10**6)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("", 61440 + job_id % 4096))
            except OSError:
                continue
        return job_id


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(JOB_VARIABLES)}
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=JOBS,
        env=clean | {"PYTHONUNBUFFERED": "1", "JAX_PLATFORMS": "cpu"} | env,
        stdout=subprocess.PIPE,
        # apart from stdout: a log line on stderr could otherwise land inside a JSON line (one
        # CI run found no report line at all from a process that exited 0)
        stderr=subprocess.PIPE,
        text=True,
    )


def reports(process: subprocess.Popen) -> list[dict]:
    """The JSON lines a process printed (the launcher's ``[rank]`` prefix removed)."""
    output, errors = process.communicate(timeout=300)
    assert process.returncode == 0, (output + errors)[-4000:]
    lines = [line.split("] ", 1)[-1] for line in output.splitlines()]
    return [json.loads(line) for line in lines if line.startswith("{")]


# two devices each, compiled as the suite compiles (tools/pytest_xla.py)
TWO_DEVICES = {
    "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
}


@pytest.mark.process
def test_two_simulated_slurm_tasks_form_one_job():
    """Two processes given srun's variables join one 4-device job and gather across it."""
    job_id = free_job_id()
    tasks = [start(["cluster_job.py"], slurm(job_id, 2, rank) | TWO_DEVICES) for rank in (0, 1)]
    for rank, task in enumerate(tasks):
        (report,) = reports(task)
        assert report == {
            "joined": True,
            "environment": "slurm",
            "process": rank,
            "devices": 4,
            "gathered": [0, 1],
        }


@pytest.mark.process
@pytest.mark.slow
def test_a_simulated_slurm_job_trains_like_the_launchers_job():
    """2 SLURM tasks x 2 CPU devices = the launcher's 2 x 2 job, loss for loss (launch_job.py).

    The launcher's processes also carry SLURM variables JAX could not read (SLURM_LOCALID='x'):
    the launcher's own variables win, and JAX's detection stays off.
    """
    job_id = free_job_id()
    tasks = [start(["launch_job.py"], slurm(job_id, 2, rank) | TWO_DEVICES) for rank in (0, 1)]
    launched = start(
        [
            "-m",
            "js.training.launch",
            "--processes",
            "2",
            "--devices-per-process",
            "2",
            "launch_job.py",
        ],
        slurm(job_id + 1, 2, 0, SLURM_LOCALID="x"),
    )
    (on_slurm,), silent, (launcher,) = (reports(p) for p in (*tasks, launched))
    assert silent == []  # only process 0 reports
    assert on_slurm["devices"] == launcher["devices"] == 4
    assert len(on_slurm["losses"]) == 20
    assert (
        max(abs(a - b) for a, b in zip(on_slurm["losses"], launcher["losses"], strict=True)) <= 1e-5
    )
