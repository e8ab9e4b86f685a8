"""The same cores for XLA and torch: pin the process, then size torch's threads to match.

XLA:CPU sizes its thread pool from the process's CPU affinity when its backend starts, and
torch's intra-op (OpenMP) threads default to the cores it sees at import. Pinning the whole
process with ``os.sched_setaffinity`` before either starts gives both the same cores; torch's
thread count is then set to that number explicitly and recorded with the results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def available() -> list[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def requested(argv: list[str]) -> int | None:
    """The N of ``--cores N`` / ``--cores=N`` in ``argv``, or None."""
    for i, arg in enumerate(argv):
        if arg == "--cores" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--cores="):
            return int(arg.split("=", 1)[1])
    return None


def pin(argv: list[str]) -> list[int]:
    """Restrict the process to the first N available cores when ``--cores N`` is given."""
    n = requested(argv)
    cores = available()
    if n is None:
        return cores
    if not 1 <= n <= len(cores):
        raise SystemExit(f"--cores {n}: this process may use {len(cores)} cores ({cores})")
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("--cores needs os.sched_setaffinity (Linux); run under taskset instead")
    os.sched_setaffinity(0, cores[:n])
    return cores[:n]


def match_torch() -> int | None:
    """Give torch one intra-op thread per available core (its default on an unpinned machine)."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(len(available()))
    return torch.get_num_threads()


def fresh_process(owner: str, script: str, *argv: str) -> dict:
    """Run ``python -c script *argv`` from the repository root, on this process's cores (a child
    inherits the affinity ``pin`` set), and return its last line of output, read as JSON."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=root, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"{owner}: a measurement failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
