"""js.training.launch and init_distributed: real processes on loopback, real collectives."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from js.training import init_distributed
from js.training.launch import main

HERE = Path(__file__).parent
JOBS = HERE / "jobs"  # the child-process scripts


def launch(*args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "js.training.launch", *args]
    return subprocess.Popen(
        command, cwd=JOBS, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(process: subprocess.Popen) -> tuple[int, str]:
    output, _ = process.communicate(timeout=600)
    return process.returncode, output


def losses_of(output: str) -> dict:
    lines = [line.removeprefix("[0] ") for line in output.splitlines()]
    return json.loads(next(line for line in lines if line.startswith('{"devices"')))


@pytest.mark.process
def test_two_processes_of_four_devices_train_like_one_process_of_eight():
    job = launch("--processes", "2", "--devices-per-process", "4", "launch_job.py")
    # compiled as the launched processes are: the launcher keeps this process's other flags
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    alone = subprocess.Popen(
        [sys.executable, "launch_job.py"],
        cwd=JOBS,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    (job_status, job_output), (alone_status, alone_output) = finish(job), finish(alone)
    assert job_status == 0, job_output[-4000:]
    assert alone_status == 0, alone_output[-4000:]
    two, one = losses_of(job_output), losses_of(alone_output)
    assert two["devices"] == one["devices"] == 8
    assert len(two["losses"]) == 20
    assert max(abs(a - b) for a, b in zip(two["losses"], one["losses"], strict=True)) <= 1e-5


@pytest.mark.process
@pytest.mark.slow
def test_a_failing_process_stops_the_job_at_once_with_its_status():
    status, output = finish(launch("--processes", "2", "launch_job.py", "fail"))
    assert status == 1, output[-4000:]
    assert "[1] RuntimeError: process 1 failed on purpose" in output
    assert "[launch] process 1 exited with 1; stopping the others" in output
    pid = int(next(line for line in output.splitlines() if line.startswith("[0] pid ")).split()[2])
    with pytest.raises(ProcessLookupError):  # process 0 was stopped, not left waiting
        os.kill(pid, 0)


def test_launcher_arguments_are_checked(capsys):
    with pytest.raises(SystemExit):
        main(["--processes", "0", "launch_job.py"])
    assert (
        "--processes and --devices-per-process must be >= 1, got 0 and 1" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        main(["missing.py"])
    assert "no script 'missing.py'. Fix: pass the path of a Python file" in capsys.readouterr().err


def test_init_distributed_outside_a_launched_job(monkeypatch):
    monkeypatch.delenv("JS_COORDINATOR_ADDRESS", raising=False)
    assert init_distributed() is False
    monkeypatch.setenv("JS_COORDINATOR_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("JS_NUM_PROCESSES", "two")
    with pytest.raises(ValueError, match="JS_NUM_PROCESSES must be an integer >= 1, got 'two'"):
        init_distributed()
    monkeypatch.setenv("JS_NUM_PROCESSES", "2")
    monkeypatch.setenv("JS_PROCESS_ID", "2")
    with pytest.raises(ValueError, match="JS_PROCESS_ID=2 is not below JS_NUM_PROCESSES=2"):
        init_distributed()


@pytest.mark.process
@pytest.mark.slow
def test_the_data_parallel_digits_example_runs_under_the_launcher():
    example = HERE.parents[2] / "docs" / "examples" / "digits_parallel.py"
    process = launch(
        "--processes", "2", "--devices-per-process", "2", str(example), "--epochs", "1"
    )
    status, output = finish(process)
    assert status == 0, output[-4000:]
    line = next(line for line in output.splitlines() if "test accuracy" in line)
    assert line.startswith("[0] 2 processes, 4 devices: test accuracy"), line
    assert float(line.split("accuracy")[1].split()[0]) > 0.5  # one epoch learns something
    assert not any(line.startswith("[1] epoch") for line in output.splitlines())  # rank 0 reports


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie (exited, not yet reaped by its parent) counts as gone
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] == "Z"


def _pids(output: str, word: str) -> list[int]:
    return [int(line.split()[2]) for line in output.splitlines() if line.split()[1:2] == [word]]


@pytest.mark.process
@pytest.mark.slow
def test_a_failing_rank_stops_the_processes_the_others_started():
    """The launcher used to wait on rank 0's child (and leave it running)."""
    status, output = finish(launch("--processes", "2", "launch_children.py", "orphan"))
    assert status == 3, output
    assert "[launch] process 1 exited with 3; stopping the others" in output
    (child,) = _pids(output, "child")
    assert _dead(child)


@pytest.mark.process
@pytest.mark.slow
def test_sigterm_to_the_launcher_stops_every_rank():
    """Both ranks used to keep running after the launcher ended with -15."""
    job = launch("--processes", "2", "launch_children.py", "wait")
    lines = []
    assert job.stdout is not None
    while len([line for line in lines if " pid " in line]) < 2:
        lines.append(job.stdout.readline())
        assert lines[-1], lines
    time.sleep(0.2)
    job.send_signal(signal.SIGTERM)
    status, output = finish(job)
    output = "".join(lines) + output
    assert status == 128 + signal.SIGTERM, output
    assert "[launch] received SIGTERM; stopping every process" in output
    pids = _pids(output, "pid")
    assert len(pids) == 2 and all(_dead(pid) for pid in pids), output


@pytest.mark.process
@pytest.mark.slow
def test_a_last_line_without_a_newline_stays_on_its_own_line():
    status, output = finish(launch("--processes", "2", "launch_children.py", "last-line"))
    assert status == 0, output
    assert sorted(output.splitlines()) == ["[0] r0 final words", "[1] r1 final words"]


# -- --max-restarts: the launcher restarts every process when one fails -------------------------


@pytest.mark.process
def test_a_failed_job_is_restarted_on_a_fresh_port_with_the_restart_count(tmp_path):
    job = launch("--max-restarts", "2", "launch_children.py", "flaky", str(tmp_path))
    status, output = finish(job)
    assert status == 0, output
    lines = output.splitlines()
    assert "[launch] process 1 exited with 3; restart 1 of 2" in lines
    assert lines[-1] == "[launch] job succeeded after 1 restart", output
    first = next(line for line in lines if line.startswith("[0] pid "))  # the first start's
    assert first.split()[3:5] == ["start", "0"] and _dead(int(first.split()[2]))
    again = sorted(line for line in lines if " restart 1 at " in line)
    assert [line[:3] for line in again] == ["[0]", "[1]"], output  # both ranks started again
    ports = {line.split()[-1] for line in again}
    assert len(ports) == 1 and ports != {first.split()[-1]}  # one job, a new coordinator port


@pytest.mark.process
@pytest.mark.slow
def test_restarts_exhausted_end_with_the_last_failure(tmp_path):
    job = launch("--max-restarts", "2", "launch_children.py", "failing", str(tmp_path))
    status, output = finish(job)
    assert status == 3, output
    lines = output.splitlines()
    assert [line for line in lines if line.startswith("[launch]")] == [
        "[launch] process 1 exited with 3; restart 1 of 2",
        "[launch] process 1 exited with 3; restart 2 of 2",
        "[launch] process 1 exited with 3; stopping the others",
        "[launch] job failed after 2 restarts: process 1 exited with 3",
    ]
    assert lines[-1].startswith("[launch] job failed")
    pids = _pids(output, "pid")
    assert len(pids) == 3 and all(_dead(pid) for pid in pids)  # rank 0 of each start


@pytest.mark.process
@pytest.mark.slow
def test_a_process_that_ignores_sigterm_is_killed_after_the_stop_timeout(tmp_path):
    job = launch(
        "--max-restarts", "1", "--stop-timeout", "0.5", "launch_children.py", "hang", str(tmp_path)
    )
    status, output = finish(job)
    assert status == 0, output
    assert "[launch] process 0 still running 0.5 s after SIGTERM; killing it" in output
    assert output.splitlines()[-1] == "[launch] job succeeded after 1 restart"
    (pid,) = _pids(output, "pid")
    assert _dead(pid)


@pytest.mark.process
@pytest.mark.slow
def test_a_signal_to_the_launcher_stops_a_restarted_job_without_restarting(tmp_path):
    job = launch("--max-restarts", "2", "launch_children.py", "flaky-wait", str(tmp_path))
    lines = []
    assert job.stdout is not None
    while len([line for line in lines if " start 1" in line]) < 2:  # both ranks restarted
        lines.append(job.stdout.readline())
        assert lines[-1], lines
    job.send_signal(signal.SIGTERM)
    status, output = finish(job)
    output = "".join(lines) + output
    assert status == 128 + signal.SIGTERM, output
    launcher = [line for line in output.splitlines() if line.startswith("[launch]")]
    assert launcher == [
        "[launch] process 1 exited with 3; restart 1 of 2",
        "[launch] received SIGTERM; stopping every process",
    ]
    pids = _pids(output, "pid")
    assert len(pids) == 3 and all(_dead(pid) for pid in pids), output


def test_restart_arguments_are_checked(capsys):
    with pytest.raises(SystemExit):
        main(["--max-restarts", "-1", "launch_job.py"])
    assert "--max-restarts must be >= 0, got -1. Fix: pass 0" in capsys.readouterr().err
    for bad in ("-0.5", "nan"):
        with pytest.raises(SystemExit):
            main(["--stop-timeout", bad, "launch_job.py"])
        message = f"--stop-timeout must be a number of seconds >= 0, got {bad.lstrip('+')}."
        assert message in capsys.readouterr().err


def restart_report(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith('[0] {"restart"'))
    return json.loads(line.removeprefix("[0] "))


@pytest.mark.process
@pytest.mark.slow
def test_a_job_that_crashes_once_resumes_and_ends_with_the_uncrashed_parameters(tmp_path):
    """Process 1 dies at step 10 of 12 (checkpoints every 3 steps); the restarted job resumes
    from the last complete checkpoint and ends bit for bit where an uncrashed job ends."""
    crashed = launch("--max-restarts", "2", "launch_restart_job.py", str(tmp_path / "a"), "10")
    status, output = finish(crashed)
    assert status == 0, output[-4000:]
    lines = output.splitlines()
    assert "[launch] process 1 exited with 1; restart 1 of 2" in lines
    assert lines[-1] == "[launch] job succeeded after 1 restart"
    assert "restart 2 of 2" not in output
    uncrashed = launch("launch_restart_job.py", str(tmp_path / "b"))
    straight_status, straight_output = finish(uncrashed)
    assert straight_status == 0, straight_output[-4000:]
    restarted, straight = restart_report(output), restart_report(straight_output)
    assert straight["resumed_from"] is None and len(straight["losses"]) == 12
    assert restarted["restart"] == 1 and restarted["resumed_from"] in (3, 6, 9), restarted
    assert restarted["losses"] == straight["losses"][restarted["resumed_from"] :]
    assert restarted["params"] == straight["params"]  # every parameter and buffer, bit for bit
