"""pytest plugin: each test's time, markers and child processes, into the JSON file that
``tools/check_durations.py`` (the suite's time budget) reads.

tools/run_suite.py and the test steps of hatch.toml load it::

    python -m pytest -p tools.pytest_durations --durations-json build/durations/SUITE.json ...

Without ``--durations-json`` it records nothing. For every test it writes its node id, its
outcome, the seconds of its setup, call and teardown phases (pytest's own timings: a
module-scoped fixture is set up in the setup phase of the first test that uses it, and torn
down in the teardown of the last), the CPU seconds its process used over the three phases (all
its threads, user and system: ``time.process_time``; a child's are not counted), its markers,
the machine's load while it ran (the 1-minute load average over the number of CPUs, read after
the test) and the child processes it started:
the program name of each ``subprocess`` child and ``multiprocessing`` spawn, and ``fork`` for
each ``os.fork``. A test's children are those started between its setup and its teardown, from
any thread.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

_current: list[str | None] = [None]  # the node id of the running test
_children: dict[str, list[str]] = {}
_installed: list[bool] = [False]


def _program(argv0) -> str:
    return Path(os.fsdecode(argv0)).name


def _record(name: str) -> None:
    nodeid = _current[0]
    if nodeid is not None:
        _children.setdefault(nodeid, []).append(name)


def _install() -> None:
    """Wrap the doors to a child process: ``fork_exec`` (subprocess's copy, and
    ``_posixsubprocess``'s for multiprocessing's spawn and forkserver), ``os.posix_spawn`` and
    ``posix_spawnp`` (subprocess takes them in a few cases) and ``os.fork`` (an at-fork hook)."""
    if _installed[0]:
        return
    _installed[0] = True
    import _posixsubprocess
    import subprocess

    def recorded(fork_exec):
        def recorded_fork_exec(args, *rest, **kwargs):
            _record(_program(args[0]) if args else "?")
            return fork_exec(args, *rest, **kwargs)

        return recorded_fork_exec

    # subprocess keeps its own reference (imported by name); multiprocessing looks it up
    if getattr(subprocess, "_fork_exec", None) is not None:
        subprocess._fork_exec = recorded(subprocess._fork_exec)
    _posixsubprocess.fork_exec = recorded(_posixsubprocess.fork_exec)
    for name in ("posix_spawn", "posix_spawnp"):
        spawn = getattr(os, name, None)
        if spawn is not None:

            def recorded_spawn(path, argv, *rest, _spawn=spawn, **kwargs):
                _record(_program(argv[0] if argv else path))
                return _spawn(path, argv, *rest, **kwargs)

            setattr(os, name, recorded_spawn)
    os.register_at_fork(before=lambda: _record("fork"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-json",
        metavar="PATH",
        default=None,
        help="write each test's phase times, markers and child processes to PATH (JSON) "
        "for tools/check_durations.py",
    )


class _Recorder:
    def __init__(self, path: Path):
        self.path = path
        self.tests: dict[str, dict] = {}
        self.started = time.time()
        self.cpu_started = 0.0

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem) -> None:
        _current[0] = item.nodeid
        self.tests[item.nodeid] = {
            "nodeid": item.nodeid,
            "markers": sorted({mark.name for mark in item.iter_markers()}),
            "outcome": "passed",
            "setup": 0.0,
            "call": 0.0,
            "teardown": 0.0,
        }
        self.cpu_started = time.process_time()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = self.tests.get(report.nodeid)
        if test is None:
            return
        test[report.when] = round(report.duration, 3)
        if report.outcome != "passed" and test["outcome"] == "passed":
            test["outcome"] = report.outcome
        if report.when == "teardown":
            test["cpu"] = round(time.process_time() - self.cpu_started, 3)
            test["load"] = round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)
            test["children"] = _children.pop(report.nodeid, [])
            _current[0] = None

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "args": [str(arg) for arg in session.config.invocation_params.args],
            "wall": round(time.time() - self.started, 1),
            "tests": list(self.tests.values()),
        }
        self.path.write_text(json.dumps(record, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--durations-json")
    if path:
        _install()
        config.pluginmanager.register(_Recorder(Path(path)), "js-durations-recorder")
