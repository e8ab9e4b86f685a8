"""Helpers of the integration suite: run commands, build wheels, drive fresh venvs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # versioning: the one reader of _version.py records

from versioning import read_assignments as read_assignments  # noqa: E402  (re-exported)

PACKAGES = ROOT / "packages"
CONSTRAINTS = Path(__file__).resolve().parent / "constraints.txt"
DISTRIBUTIONS = ["js-core", "js-nn", "js-losses", "js-optim", "js-train", "js-models", "js"]
THIRD_PARTY = [
    "jax",
    "jaxlib",
    "flax",
    "numpy",
    "optax",
    "orbax-checkpoint",
    "safetensors",
    "flatbuffers",
]
CONSTRAINTS_HEADER = """\
# Exact versions the integration suite (tests-integration/) last passed with: ours (a record;
# the suite installs ours from freshly built wheels) and the third-party packages it installs
# from the index (used as constraints). Regenerate after a passing run with
#   hatch run integration:test --write-constraints
"""


def run(command: list, *, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``command``; on failure, fail the test with its full output."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.fail(
            f"command failed ({result.returncode}): {' '.join(map(str, command))}\n"
            f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}",
            pytrace=False,
        )
    return result


def build_wheel(source: Path, outdir: Path) -> Path:
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", outdir, source])
    name = re.sub(r"[-.]", "_", source.name)
    return next(outdir.glob(f"{name}-*.whl"))


class Venv:
    """A fresh virtual environment with the third-party stack and some of our wheels."""

    def __init__(self, path: Path):
        self.path = path
        self.python = path / "bin" / "python"

    def install(self, *requirements: str, find_links: list[Path]) -> None:
        links = [arg for folder in find_links for arg in ("--find-links", folder)]
        uv = [sys.executable, "-m", "uv", "pip", "install", "--python", self.python]
        run([*uv, "--no-index", *links, *requirements])

    def python_code(self, code: str, *, check: bool = True) -> subprocess.CompletedProcess:
        command = [self.python, "-W", "error", "-c", code]
        if check:
            return run(command, cwd=self.path)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return subprocess.run(
            [str(c) for c in command], cwd=self.path, env=env, capture_output=True, text=True
        )

    def freeze(self) -> str:
        return run([sys.executable, "-m", "uv", "pip", "freeze", "--python", self.python]).stdout
