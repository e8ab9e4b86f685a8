"""Start a local multi-process JAX job on loopback, the way ``torchrun --standalone`` does.

    python -m js.training.launch --processes 2 --devices-per-process 4 script.py args...

Picks a free port on 127.0.0.1, starts ``script.py args...`` once per process with
``JS_COORDINATOR_ADDRESS``, ``JS_NUM_PROCESSES``, ``JS_PROCESS_ID`` and the CPU device count set
(the script calls :func:`js.training.init_distributed`), forwards each process's output with a
``[rank]`` prefix (without gloo's routine ``[Gloo] Rank N is connected to M peer ranks`` line:
``JS_LIBRARY_LOGS=1`` keeps it), and when one process fails stops the others and exits with its
status. Each process runs in its own process group, and stopping it stops the group (whatever
the script started too). A SIGTERM or SIGINT (Ctrl-C) to the launcher is passed on to every
process; those still running after a grace period are killed, and the launcher exits with
``128 + signal``. No process outlives the launcher. For development and tests on one machine;
on a cluster use the cluster's launcher (``srun``, ``mpirun``, a Kubernetes indexed Job):
:func:`js.training.init_distributed` joins the job JAX detects there.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from ._distributed import ADDRESS, PROCESS_ID, PROCESSES
from ._quiet import library_logger, routine_output

_STOP_GRACE_S = 2.0  # JAX catches SIGTERM (its preemption notifier): kill soon after


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def process_env(rank: int, processes: int, devices: int, port: int) -> dict[str, str]:
    """The environment of process ``rank``: the job's coordinates and its CPU device count."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", JAX_PLATFORMS="cpu")
    env.update({ADDRESS: f"127.0.0.1:{port}", PROCESSES: str(processes), PROCESS_ID: str(rank)})
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={devices}"])
    return env


def _forward(rank: int, stream, lock: threading.Lock) -> None:
    for line in iter(stream.readline, ""):
        if routine_output(line):  # gloo's connection report: logged at DEBUG, not printed
            library_logger.debug("[%d] %s", rank, line.rstrip())
            continue
        if not line.endswith("\n"):  # a last line without one: never glued to another rank's
            line += "\n"
        with lock:
            sys.stdout.write(f"[{rank}] {line}")
            sys.stdout.flush()
    stream.close()


def _signal_group(child: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to the process group of ``child`` (the rank and what it started)."""
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):  # the whole group has already exited
        pass


def _stop(children: list[subprocess.Popen], signum: int = signal.SIGTERM) -> None:
    """Send ``signum`` to every rank's process group; kill the groups after the grace period
    (a rank that exited may have left processes it started: they are stopped too)."""
    for child in children:
        _signal_group(child, signum)
    deadline = time.monotonic() + _STOP_GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            pass
    for child in children:
        _signal_group(child, signal.SIGKILL)
        child.wait()


class _Stopped(Exception):
    """The launcher received ``signum`` (SIGTERM, SIGINT)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame) -> None:
    raise _Stopped(signum)


def run(script: str, args: list[str], processes: int, devices: int) -> int:
    """Run the job; the exit status: 0 when every process succeeded, else the first failure's
    (``128 + signal`` when the launcher itself was stopped by SIGTERM or SIGINT)."""
    port, lock = free_port(), threading.Lock()
    children, readers = [], []
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGINT)}
    stop_with = signal.SIGTERM
    try:
        for rank in range(processes):
            child = subprocess.Popen(
                [sys.executable, script, *args],
                env=process_env(rank, processes, devices, port),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its own process group: stopped whole
            )
            children.append(child)
            readers.append(threading.Thread(target=_forward, args=(rank, child.stdout, lock)))
            readers[-1].start()
        return _watch(children)
    except _Stopped as stopped:
        stop_with = stopped.signum
        name = signal.Signals(stopped.signum).name
        print(f"[launch] received {name}; stopping every process", flush=True)
        return 128 + stopped.signum
    finally:  # also on Ctrl-C: no process outlives the launcher
        for signum in handlers:
            signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut the stop short
        _stop(children, stop_with)
        for reader in readers:
            reader.join()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _watch(children: list[subprocess.Popen]) -> int:
    """Wait until every process succeeded (0) or one failed (its status)."""
    while True:
        codes = [child.poll() for child in children]  # every child, so each is reaped
        failed = [(rank, code) for rank, code in enumerate(codes) if code]
        if failed:
            rank, status = failed[0]
            print(f"[launch] process {rank} exited with {status}; stopping the others", flush=True)
            return status
        if all(code == 0 for code in codes):
            return 0
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m js.training.launch", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("--processes", type=int, default=2, help="processes to start (2)")
    parser.add_argument(
        "--devices-per-process", type=int, default=1, help="CPU devices in each process (1)"
    )
    parser.add_argument("script", help="the Python script every process runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    options = parser.parse_args(argv)
    if options.processes < 1 or options.devices_per_process < 1:
        parser.error(
            f"--processes and --devices-per-process must be >= 1, got {options.processes} and "
            f"{options.devices_per_process}"
        )
    if not os.path.isfile(options.script):
        parser.error(f"no script {options.script!r}. Fix: pass the path of a Python file")
    return run(options.script, options.args, options.processes, options.devices_per_process)


if __name__ == "__main__":
    sys.exit(main())
