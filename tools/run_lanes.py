"""Run commands side by side, one per CPU core: how ``hatch run test:all`` uses a 2-core machine.

Usage: python tools/run_lanes.py [--lanes N] [--fixed] COMMAND ... [-- EXTRA ...]

Each COMMAND is one shell command line (``"hatch run nn:test"``). They start in the order given,
at most N at a time (default: the machine's CPU count), and the next one starts as soon as a lane
is free; so list the longest first. Every suite of the test run keeps one core busy (XLA compiles
on one thread; the suites' programs are small) and the suites share nothing but the files each
writes under ``build/``, so two lanes on two cores take about half the time of one.

A command's output is kept apart and printed whole, under a heading, when it ends: two suites'
lines never interleave. The first command that fails stops the run: the others still running are
terminated (their output so far is printed, marked as stopped), none starts after it, and the
exit code is the failed command's. ``EXTRA`` (everything after ``--``) is appended to every
command not marked ``--fixed``; that is how ``hatch run test:full`` passes ``-m ''`` to each
suite and not to the linters (hatch appends a script call's arguments to the command line).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO


@dataclass
class Lane:
    """One command running in its own process group, its output in a temporary file."""

    command: str
    process: subprocess.Popen
    output: IO[bytes]
    started: float = field(default_factory=time.monotonic)

    def text(self) -> str:
        self.output.seek(0)
        return self.output.read().decode(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start(command: str) -> Lane:
    output = tempfile.TemporaryFile()
    process = subprocess.Popen(
        command, shell=True, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
    )
    print(f"run_lanes: started   {command}", flush=True)
    return Lane(command, process, output)


def report(lane: Lane, verdict: str) -> None:
    minutes, seconds = divmod(time.monotonic() - lane.started, 60)
    bar = "=" * 30
    print(f"\n{bar} {lane.command}: {verdict} after {minutes:.0f} min {seconds:.0f} s {bar}")
    print(lane.text(), end="", flush=True)
    lane.output.close()


def run(commands: list[str], lanes: int, poll_s: float = 0.2) -> int:
    waiting, running = list(commands), []
    begun = time.monotonic()
    while waiting or running:
        while waiting and len(running) < lanes:
            running.append(start(waiting.pop(0)))
        time.sleep(poll_s)
        for lane in [lane for lane in running if lane.process.poll() is not None]:
            running.remove(lane)
            code = lane.process.returncode
            report(lane, "passed" if code == 0 else f"FAILED (exit code {code})")
            if code != 0:
                for other in running:
                    other.stop()
                    report(other, "stopped (another command failed)")
                print(
                    f"run_lanes: FAILED: {lane.command} exited with {code}; "
                    f"{len(waiting)} command(s) not started: {waiting}",
                    file=sys.stderr,
                    flush=True,
                )
                return code
    minutes, seconds = divmod(time.monotonic() - begun, 60)
    print(f"\nrun_lanes: {len(commands)} command(s) passed in {minutes:.0f} min {seconds:.0f} s")
    return 0


USAGE = "usage: run_lanes [--lanes N] [--fixed] COMMAND [[--fixed] COMMAND ...] [-- EXTRA ...]"


def parse(argv: list[str]) -> tuple[int, list[str]]:
    """(lanes, command lines with EXTRA appended where not --fixed); SystemExit(2) on bad use."""
    lanes, commands, words = os.cpu_count() or 1, [], list(argv)
    extra = words[words.index("--") + 1 :] if "--" in words else []
    words = words[: words.index("--")] if "--" in words else words
    suffix = " ".join(shlex.quote(word) for word in extra)
    while words:
        word = words.pop(0)
        if word in ("--lanes", "--fixed") and not words:
            raise SystemExit(f"run_lanes: {word} needs a value\n{USAGE}")
        if word == "--lanes":
            value = words.pop(0)
            if not value.isdigit() or int(value) < 1:
                raise SystemExit(f"run_lanes: --lanes takes a whole number >= 1, got {value!r}")
            lanes = int(value)
        elif word == "--fixed":
            commands.append(words.pop(0))
        elif word.startswith("-"):
            raise SystemExit(f"run_lanes: unknown option {word!r}\n{USAGE}")
        else:
            commands.append(f"{word} {suffix}".rstrip())
    if not commands:
        raise SystemExit(f"run_lanes: no command given\n{USAGE}")
    return lanes, commands


def main(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    lanes, commands = parse(argv)
    return run(commands, lanes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
