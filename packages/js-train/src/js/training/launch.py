"""Start a local multi-process JAX job on loopback, the way ``torchrun --standalone`` does.

    python -m js.training.launch --processes 2 --devices-per-process 4 script.py args...
    python -m js.training.launch --max-restarts 3 train.py args...

Picks a free port on 127.0.0.1, starts ``script.py args...`` once per process with
``JS_COORDINATOR_ADDRESS``, ``JS_NUM_PROCESSES``, ``JS_PROCESS_ID`` and the CPU device count set
(the script calls :func:`js.training.init_distributed`), forwards each process's output with a
``[rank]`` prefix (without gloo's routine ``[Gloo] Rank N is connected to M peer ranks`` line:
``JS_LIBRARY_LOGS=1`` keeps it), and when one process fails stops the others and exits with its
status. Each process runs in its own process group, and stopping it stops the group (whatever
the script started too). A SIGTERM or SIGINT (Ctrl-C) to the launcher is passed on to every
process, which has ``--stop-timeout`` seconds (30) to save its step and exit before it is
killed, and the launcher exits with ``128 + signal``. No process outlives the launcher.

``--max-restarts N`` (torchrun's elastic restart; 0 by default) restarts the job when a process
fails: every process is stopped (SIGTERM, then killed after ``--stop-timeout`` but at most 2 s,
which also ends a process hung in a collective with the failed one: without it no step can be
agreed on and saved), the launcher reports
``[launch] process R exited with S; restart k of N`` and starts every process again on a fresh
port, with ``JS_RESTART_COUNT=k`` in its environment (0 on the first start; torchrun's
``TORCHELASTIC_RESTART_COUNT``). After N restarts the next failure ends the job:
``[launch] job failed after N restarts: process R exited with S``, with its status; a success
after a restart reports ``[launch] job succeeded after k restarts``. A signal to the launcher
stops every process and never restarts. The script continues where it left off by loading its
last complete checkpoint on start (``docs/training.md``, "Long runs").

For development and tests on one machine; on a cluster use the cluster's launcher (``srun``,
``mpirun``, a Kubernetes indexed Job): :func:`js.training.init_distributed` joins the job JAX
detects there.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from ._distributed import ADDRESS, PROCESS_ID, PROCESSES
from ._quiet import library_logger, routine_output

RESTART_COUNT = "JS_RESTART_COUNT"  # torchrun's TORCHELASTIC_RESTART_COUNT: 0, then 1, 2, ...
# Seconds a process has to exit after SIGTERM before it is killed. Stopped by a signal to the
# launcher, a rank saves its step first (js.training's Trainer: 3.5 s for 50M parameters on a
# CPU); stopped because another rank failed, it cannot agree on a step with the lost peer, so
# it gets at most FAILED_STOP_S.
STOP_TIMEOUT_S = 30.0
FAILED_STOP_S = 2.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def process_env(
    rank: int, processes: int, devices: int, port: int, restart: int = 0
) -> dict[str, str]:
    """The environment of process ``rank``: the job's coordinates, its CPU device count and
    how many times the job was restarted (``JS_RESTART_COUNT``)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", JAX_PLATFORMS="cpu")
    env.update({ADDRESS: f"127.0.0.1:{port}", PROCESSES: str(processes), PROCESS_ID: str(rank)})
    env[RESTART_COUNT] = str(restart)
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


def _stop(
    children: list[subprocess.Popen], signum: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S
) -> None:
    """Send ``signum`` to every rank's process group; kill the groups after ``timeout`` seconds
    (a rank that exited may have left processes it started: they are stopped too)."""
    for child in children:
        _signal_group(child, signum)
    deadline = time.monotonic() + timeout
    for rank, child in enumerate(children):
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            name = signal.Signals(signum).name
            print(
                f"[launch] process {rank} still running {timeout:g} s after {name}; killing it",
                flush=True,
            )
    for child in children:
        _signal_group(child, signal.SIGKILL)
        child.wait()


class _Stopped(Exception):
    """The launcher received ``signum`` (SIGTERM, SIGINT)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _Stopper:
    """The launcher's SIGTERM and SIGINT handler: raises :class:`_Stopped`, or, while the ranks
    are being started, keeps the signal until every started rank is known. (Blocking the
    signals instead would block them in the ranks too: a signal mask is inherited.)"""

    def __init__(self):
        self.starting = False
        self.pending: int | None = None

    def __call__(self, signum, frame) -> None:
        if self.starting:
            self.pending = self.pending or signum
            return
        raise _Stopped(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self.starting = True
        try:
            yield
        finally:
            self.starting = False
        if self.pending is not None:
            raise _Stopped(self.pending)


_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _start(
    job: tuple[str, list[str], int, int],
    restart: int,
    children: list[subprocess.Popen],
    readers: list[threading.Thread],
    lock: threading.Lock,
) -> None:
    """Start every rank of ``job`` (script, args, processes, devices) on a fresh port, adding
    them to ``children`` and their output forwarders to ``readers``."""
    script, args, processes, devices = job
    port = free_port()
    for rank in range(processes):
        child = subprocess.Popen(
            [sys.executable, script, *args],
            env=process_env(rank, processes, devices, port, restart),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: stopped whole
        )
        children.append(child)
        readers.append(threading.Thread(target=_forward, args=(rank, child.stdout, lock)))
        readers[-1].start()


def _end(
    children: list[subprocess.Popen],
    readers: list[threading.Thread],
    timeout: float,
    signum: int = signal.SIGTERM,
) -> None:
    """Stop every rank (:func:`_stop`), forward the rest of their output, forget them."""
    _stop(children, signum, timeout)
    for reader in readers:
        reader.join()
    children.clear()
    readers.clear()


def _restarts(count: int) -> str:
    return f"{count} restart{'' if count == 1 else 's'}"


def run(
    script: str,
    args: list[str],
    processes: int,
    devices: int,
    max_restarts: int = 0,
    stop_timeout: float = STOP_TIMEOUT_S,
) -> int:
    """Run the job; the exit status: 0 when every process succeeded, else the last failure's
    (``128 + signal`` when the launcher itself was stopped by SIGTERM or SIGINT).

    When a process fails, every process is stopped (SIGTERM, SIGKILL after ``stop_timeout``
    seconds, at most ``FAILED_STOP_S``: the others cannot save a step without the lost one)
    and, up to ``max_restarts`` times, all are started again on a fresh port with
    ``JS_RESTART_COUNT`` set to the restart's number. A signal to the launcher stops every
    process with the whole ``stop_timeout`` to save and exit, and never restarts.
    """
    failed_stop = min(stop_timeout, FAILED_STOP_S)
    job, lock = (script, args, processes, devices), threading.Lock()
    children: list[subprocess.Popen] = []
    readers: list[threading.Thread] = []
    handlers, stopper = {}, _Stopper()
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, stopper) for s in _SIGNALS}
    stop_with = signal.SIGTERM
    restart = 0
    try:
        while True:
            with stopper.deferred():  # a signal now is handled once every rank is known
                _start(job, restart, children, readers, lock)
            failure = _watch(children)
            if failure is None:
                if restart:
                    print(f"[launch] job succeeded after {_restarts(restart)}", flush=True)
                return 0
            rank, status = failure
            if restart == max_restarts:
                print(
                    f"[launch] process {rank} exited with {status}; stopping the others", flush=True
                )
                _end(children, readers, failed_stop)
                if max_restarts:
                    print(
                        f"[launch] job failed after {_restarts(max_restarts)}: process {rank} "
                        f"exited with {status}",
                        flush=True,
                    )
                return status
            print(
                f"[launch] process {rank} exited with {status}; restart {restart + 1} of "
                f"{max_restarts}",
                flush=True,
            )
            _end(children, readers, failed_stop)
            restart += 1
    except _Stopped as stopped:
        stop_with = stopped.signum
        name = signal.Signals(stopped.signum).name
        print(f"[launch] received {name}; stopping every process", flush=True)
        return 128 + stopped.signum
    finally:  # also on Ctrl-C: no process outlives the launcher
        for signum in handlers:
            signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut the stop short
        _end(children, readers, stop_timeout, stop_with)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _watch(children: list[subprocess.Popen]) -> tuple[int, int] | None:
    """Wait until every process succeeded (None) or one failed (its rank and status)."""
    while True:
        codes = [child.poll() for child in children]  # every child, so each is reaped
        failed = [(rank, code) for rank, code in enumerate(codes) if code]
        if failed:
            return failed[0]
        if all(code == 0 for code in codes):
            return None
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m js.training.launch", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("--processes", type=int, default=2, help="processes to start (2)")
    parser.add_argument(
        "--devices-per-process", type=int, default=1, help="CPU devices in each process (1)"
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="when a process fails, stop every process and start them all again, up to this "
        "many times (0: no restart)",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=STOP_TIMEOUT_S,
        help=f"seconds a process stopped by a signal to the launcher has to save and exit "
        f"after SIGTERM before it is killed ({STOP_TIMEOUT_S:g}); after another process "
        f"failed, at most {FAILED_STOP_S:g}",
    )
    parser.add_argument("script", help="the Python script every process runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    options = parser.parse_args(argv)
    if options.processes < 1 or options.devices_per_process < 1:
        parser.error(
            f"--processes and --devices-per-process must be >= 1, got {options.processes} and "
            f"{options.devices_per_process}"
        )
    if options.max_restarts < 0:
        parser.error(
            f"--max-restarts must be >= 0, got {options.max_restarts}. Fix: pass 0 to stop at "
            "the first failure, or how many times to restart the job"
        )
    if not (math.isfinite(options.stop_timeout) and options.stop_timeout >= 0):
        parser.error(
            f"--stop-timeout must be a number of seconds >= 0, got {options.stop_timeout:g}. "
            f"Fix: pass how long a process may take to exit after SIGTERM ({STOP_TIMEOUT_S:g})"
        )
    if not os.path.isfile(options.script):
        parser.error(f"no script {options.script!r}. Fix: pass the path of a Python file")
    return run(
        options.script,
        options.args,
        options.processes,
        options.devices_per_process,
        options.max_restarts,
        options.stop_timeout,
    )


if __name__ == "__main__":
    sys.exit(main())
