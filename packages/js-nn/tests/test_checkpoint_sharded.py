"""Sharded checkpoints (issue 9, item 6): saved from 8 simulated devices, or by two real
processes on loopback, restored onto 1 device, 4 devices and another mesh shape bit for bit;
a single-device checkpoint restored onto 8 devices. Each device count runs in a subprocess
(XLA_FLAGS is read when jax starts), bounded in time."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

JOBS = Path(__file__).parent / "jobs"  # the child-process scripts
PACKAGES = Path(__file__).resolve().parents[2]
# js-nn's suite installs js-core, js-losses (its dependency) and js-nn only: so do the children
SRC = [str(PACKAGES / name / "src") for name in ("js-core", "js-losses", "js-nn")]


def run(devices: int, *args, timeout=240) -> list[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(JOBS), *SRC]),
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} "
        f"--xla_force_host_platform_device_count={devices}".strip(),
    }
    done = subprocess.run(
        [sys.executable, str(JOBS / "sharded_checkpoint_script.py"), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


@pytest.mark.process
def test_an_8_device_checkpoint_restores_onto_1_and_4_devices_and_another_mesh(tmp_path):
    assert run(8, "save", tmp_path, "8") == ["digests agree", "saved from 8"]
    assert run(8, "load", tmp_path, "4", "2x4", "8", "mismatch") == [
        "restored onto 4",
        "restored onto 2x4",
        "restored onto 8",
        "mismatch refused",
    ]
    assert run(1, "load", tmp_path, "1") == ["restored onto 1"]


@pytest.mark.process
@pytest.mark.slow
def test_a_single_device_checkpoint_restores_onto_8_devices(tmp_path):
    assert run(1, "save", tmp_path, "1") == ["digests agree", "saved from 1"]
    assert run(8, "load", tmp_path, "8", "2x4") == ["restored onto 8", "restored onto 2x4"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.process
@pytest.mark.slow
def test_two_processes_save_one_checkpoint_that_restores_onto_1_and_4_devices(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(JOBS), *SRC])}
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags)  # one device each, compiled as the suite compiles
    port = free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(JOBS / "multiprocess_checkpoint_script.py"),
                str(i),
                str(port),
                str(tmp_path),
            ],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for i in (0, 1)
    ]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    assert [o.strip().splitlines()[-1] for o in outputs] == [
        "saved by process 0",
        "saved by process 1",
    ]
    assert run(1, "load", tmp_path, "1") == ["restored onto 1"]
    assert run(8, "load", tmp_path, "4", "2x4") == ["restored onto 4", "restored onto 2x4"]
