"""Run one distribution's test suite: its tests/ folder and the doctests of its src/.

Usage: python tools/run_suite.py DISTRIBUTION [PYTEST_ARGS...]

Unless PYTEST_ARGS has its own ``-m``, the run deselects ``-m slow`` (``-m ""`` runs everything:
``hatch run test:full``). Every run records each test's time, markers and child processes in
``build/durations/DISTRIBUTION.json`` (tools/pytest_durations.py), which tools/check_durations.py
holds to the suite's time budget. pytest's exit code 5
("no tests collected") is turned into a failure with a message: every distribution ships tests, so a
suite that collects nothing is broken (a wrong path, a filter that matches nothing), never a
pass. Any other exit code is passed through unchanged.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = ROOT / "build" / "durations"
NO_TESTS_COLLECTED = 5


def pytest_command(distribution: str, extra: list[str]) -> list[str]:
    package = ROOT / "packages" / distribution
    if not (package / "pyproject.toml").is_file():
        known = sorted(p.name for p in (ROOT / "packages").iterdir() if p.is_dir())
        raise SystemExit(f"run_suite: unknown distribution {distribution!r}; known: {known}")
    command = [sys.executable, "-m", "pytest", "--rootdir", str(ROOT)]
    command += ["-c", str(ROOT / "pytest.ini")]
    # The namespace-aware import lets the doctest collector import src modules under their
    # real names (js.nn._linear, not nn._linear) and so share the installed package.
    command += ["-o", "consider_namespace_packages=true", "--doctest-modules"]
    command += [str(package / "tests"), str(package / "src")]
    command += [
        "-p",
        "tools.pytest_durations",
        "--durations-json",
        str(DURATIONS / f"{distribution}.json"),
    ]
    # The default run leaves out slow tests; passing your own -m overrides that.
    command += extra if "-m" in extra else ["-m", "not slow", *extra]
    return command


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    distribution, extra = argv[0], argv[1:]
    code = subprocess.call(pytest_command(distribution, extra), cwd=ROOT)
    if code == NO_TESTS_COLLECTED:
        print(
            f"run_suite: FAILED: pytest collected no tests for {distribution} "
            f"(packages/{distribution}/tests and its src doctests). Every distribution ships "
            f"tests; check the path and the -m/-k filters.",
            file=sys.stderr,
        )
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
