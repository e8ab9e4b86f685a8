"""Fixtures of the integration suite: every wheel built once, fresh virtual environments.

Third-party packages come from the index, pinned by constraints.txt; our distributions only
from local wheel folders with ``--no-index --find-links`` (PyPI's unrelated ``js`` must never
be picked). ``--write-constraints`` rewrites constraints.txt from the full install's freeze.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `import support`

from support import (  # noqa: E402
    CONSTRAINTS,
    CONSTRAINTS_HEADER,
    DISTRIBUTIONS,
    PACKAGES,
    THIRD_PARTY,
    Venv,
    build_wheel,
    run,
)


def pytest_addoption(parser):
    parser.addoption(
        "--write-constraints",
        action="store_true",
        help="rewrite tests-integration/constraints.txt from the full install's freeze",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: builds wheels and installs fresh venvs")


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Path:
    """Every distribution's wheel, built once from the working tree."""
    outdir = tmp_path_factory.mktemp("wheels")
    for distribution in DISTRIBUTIONS:
        build_wheel(PACKAGES / distribution, outdir)
    return outdir


@pytest.fixture(scope="session")
def third_party_constraints(tmp_path_factory) -> Path:
    """constraints.txt without our own pins (ours come from the wheel folders)."""
    path = tmp_path_factory.mktemp("constraints") / "third-party.txt"
    lines = CONSTRAINTS.read_text().splitlines() if CONSTRAINTS.exists() else []
    ours = tuple(f"{name}==" for name in DISTRIBUTIONS)
    path.write_text("\n".join(line for line in lines if not line.startswith(ours)) + "\n")
    return path


@pytest.fixture
def new_venv(tmp_path, third_party_constraints):
    """Factory: a fresh venv holding the pinned third-party stack (uv's cache makes it quick)."""

    def make(name: str = "venv") -> Venv:
        venv = Venv(tmp_path / name)
        run([sys.executable, "-m", "uv", "venv", "--quiet", "--python", sys.executable, venv.path])
        run(
            [
                sys.executable,
                "-m",
                "uv",
                "pip",
                "install",
                "--python",
                venv.python,
                "-c",
                third_party_constraints,
                *THIRD_PARTY,
            ]
        )
        return venv

    return make


@pytest.fixture
def copy_package(tmp_path):
    """Factory: a temporary copy of one distribution's source, to build a variant from."""

    def copy(distribution: str) -> Path:
        target = tmp_path / "variants" / distribution
        shutil.copytree(
            PACKAGES / distribution,
            target,
            ignore=shutil.ignore_patterns("__pycache__", "tests", "*.egg-info", "dist", "build"),
        )
        return target

    return copy


@pytest.fixture
def write_constraints(request):
    """Callable writing a venv's freeze to constraints.txt when --write-constraints is given."""

    def write(venv: Venv) -> None:
        if request.config.getoption("--write-constraints"):
            CONSTRAINTS.write_text(CONSTRAINTS_HEADER + venv.freeze())

    return write
