"""The test suite's time budget: the last step of ``hatch run test:all`` (and ``test:full``).

Usage: python tools/check_durations.py [PATH ...] [--no-scale] [--full] [--report-only]
       python tools/check_durations.py --clear [DIR]

Reads the JSON files that tools/pytest_durations.py wrote for each suite (default: every
``build/durations/*.json``) and fails, naming each test, its time and the fix, when

* a test of the default run (not marked ``slow``) takes more than ``TEST_LIMIT_S`` seconds of
  its own, unless it is marked ``process``: more than that of CPU time (its process, every
  thread) and of load-scaled wall time both, or more than the load-scaled limit waiting (wall
  minus CPU time); a record without CPU times is judged by its wall time;
* the default run's ``process`` tests take more than ``PROCESS_BUDGET_S`` seconds together;
* a test starts a child Python process (``subprocess``, ``multiprocessing``, ``os.fork``)
  and is not marked ``process``.

A test's own time is its setup + call + teardown, as pytest times them: a module-scoped
fixture counts to the first test that uses it (set up there) and to the last (torn down there).
Slow tests are never counted: they run in ``hatch run test:full`` only. The limits are stated
for an idle machine. Wall-time limits are multiplied by the suite's load factor, but two
suites side by side stretched a test's wall time up to 2.7x (2.9 s alone, 7.8 s in CI) while
the load average said 1.6x; CPU time does not stretch so, but counts every thread (XLA's
spinning ones too: a documentation page used 6.5 s of CPU in 6.8 s of wall time, at a load
factor of 1.54). So a test is over only when both say so. The load factor is the median,
over its tests, of the 1-minute load average per CPU read after each test, and never below 1
(an idle machine, or one busy with the suite alone, gets the limits as written).
``--no-scale`` checks against the limits as written. ``--full`` is for a run that included
the slow tier (``test:full``): there the default-run tests ran beside the slow tier's
multi-process jobs, which load the machine in bursts the 1-minute load average does not
follow (a 1.4 s test took 9 s), so their times say little about the default run. The two
time budgets are then reported, not enforced; an unmarked child process still fails.
``--report-only`` prints the same report and problems but exits 0 (to read the report of a
partial run). ``--clear`` deletes the JSON files (test:all's first step: no stale
suite is counted).

The numbers live here and in docs/contributing.md (a test checks that the two agree).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "build" / "durations"

TEST_LIMIT_S = 5.0  # one default-run test, not marked process
PROCESS_BUDGET_S = 300.0  # every process test of the default run, all suites together

_PYTHON = re.compile(r"python[0-9.]*(\.exe)?$|fork$")
_FIX_SLOW = (
    "Fix: make it faster (a smaller configuration, a module-scoped fixture), or mark it "
    "@pytest.mark.slow (it then runs in `hatch run test:full` only)"
)


def starts_python(test: dict) -> list[str]:
    """The Python children a test started: ``python*`` programs and forks."""
    return [name for name in test.get("children", []) if _PYTHON.match(name)]


def own_time(test: dict) -> float:
    return test.get("setup", 0.0) + test.get("call", 0.0) + test.get("teardown", 0.0)


def load_factor(tests: list[dict], scaled: bool = True) -> float:
    loads = [test["load"] for test in tests if "load" in test]
    if not scaled or not loads:
        return 1.0
    return max(1.0, statistics.median(loads))


def read(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
        tests = record["tests"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SystemExit(
            f"check_durations: {path} is not a durations record ({error}). Fix: run the suite "
            f"again (tools/run_suite.py, or pytest -p tools.pytest_durations --durations-json)"
        ) from None
    if not isinstance(tests, list):
        raise SystemExit(f"check_durations: {path}: 'tests' is not a list. Fix: run it again")
    return record


def _split(test: dict) -> str:
    return " + ".join(
        f"{phase} {test.get(phase, 0.0):.1f}" for phase in ("setup", "call", "teardown")
    )


def over_limit(test: dict, factor: float) -> str | None:
    """Why a default-run test is over the per-test limit, or None when it is not.

    Where its CPU seconds are recorded, a test is over when it computed for more than
    ``TEST_LIMIT_S`` of CPU time *and* took more than the load-scaled limit of wall time, or
    when it waited (wall minus CPU time: a sleep, a lock, a busy machine) for more than the
    load-scaled limit. Each time errs its own way: wall time stretches with whatever runs
    beside the test, by more than the load average says, and CPU time counts every thread of
    the process, XLA's spinning ones included. A test over both is over the budget. Without
    CPU times, its wall time against the load-scaled limit."""
    seconds, cpu, limit = own_time(test), test.get("cpu"), TEST_LIMIT_S * factor
    scale = f" (x{factor:.2f} for the machine's load)" if factor > 1 else ""
    if seconds <= limit and (cpu is None or seconds - cpu <= limit):
        return None
    if cpu is None or cpu > TEST_LIMIT_S:
        used = "" if cpu is None else f", {cpu:.1f} s of CPU"
        return (
            f"took {seconds:.1f} s ({_split(test)}{used}), over the {TEST_LIMIT_S:g} s a "
            f"default-run test may take{scale}"
        )
    if seconds - cpu > limit:
        return (
            f"waited {seconds - cpu:.1f} s (wall {seconds:.1f} s, CPU {cpu:.1f} s), over the "
            f"{TEST_LIMIT_S:g} s a default-run test may take{scale}"
        )
    return None  # over in wall time only: a busy machine stretched it


def check(records: dict[str, dict], scaled: bool = True) -> tuple[list[str], list[str], list[str]]:
    """(problems, overruns, report lines) for the suites' records, keyed by suite name:
    overruns are the time budgets' problems, problems the rest (unmarked child processes)."""
    problems: list[str] = []
    overruns: list[str] = []
    report: list[str] = []
    default: list[tuple[float, str, float]] = []  # (own time, node id, factor)
    process: list[tuple[float, str, float]] = []
    for suite, record in records.items():
        factor = load_factor(record["tests"], scaled)
        count, total = 0, 0.0
        for test in record["tests"]:
            markers, nodeid, seconds = set(test.get("markers", [])), test["nodeid"], own_time(test)
            children = starts_python(test)
            if children and "process" not in markers:
                problems.append(
                    f"{nodeid} started {len(children)} child Python process(es) "
                    f"({', '.join(sorted(set(children)))}) and is not marked process. Fix: mark "
                    f"it @pytest.mark.process, and slow as well unless it is the default run's "
                    f"one test of its mechanism (docs/contributing.md)"
                )
            if "slow" in markers:
                continue
            count, total = count + 1, total + seconds
            default.append((seconds, nodeid, factor))
            if "process" in markers:
                process.append((seconds, nodeid, factor))
            elif (why := over_limit(test, factor)) is not None:
                overruns.append(
                    f"{nodeid} {why}. {_FIX_SLOW}; or, if it starts child processes, mark it "
                    f"@pytest.mark.process (counted against the {PROCESS_BUDGET_S:g} s budget)"
                )
        report.append(
            f"  {suite}: {count} default-run tests, {total:.0f} s of test time, "
            f"load factor {factor:.2f}"
        )
    spent = sum(seconds / factor for seconds, _, factor in process)
    report.append(
        f"  process tests: {len(process)}, {spent:.0f} s of the {PROCESS_BUDGET_S:g} s budget"
        + (" (load-scaled)" if scaled else "")
    )
    if spent > PROCESS_BUDGET_S:
        listed = "; ".join(f"{nodeid} {seconds:.1f} s" for seconds, nodeid, _ in sorted(process))
        overruns.append(
            f"the default run's process tests took {spent:.0f} s together, over their "
            f"{PROCESS_BUDGET_S:g} s budget ({listed}). Fix: keep one test per mechanism in the "
            f"default run and mark the others @pytest.mark.slow, or make them faster"
        )
    report.append("  the ten slowest default-run tests:")
    report += [
        f"    {seconds:6.1f} s  {nodeid}" for seconds, nodeid, _ in sorted(default)[::-1][:10]
    ]
    return problems, overruns, report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="check_durations", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="JSON files or folders of them")
    parser.add_argument("--no-scale", action="store_true", help="ignore the machine's load")
    parser.add_argument("--clear", action="store_true", help="delete the recorded files")
    parser.add_argument(
        "--full",
        action="store_true",
        help="the run included the slow tier: report the time budgets, do not enforce them",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="print the problems and the report but exit 0",
    )
    args = parser.parse_args(argv)
    paths = args.paths or [DEFAULT_DIR]
    if args.clear:
        for folder in paths:
            for path in folder.glob("*.json"):
                path.unlink()
        return 0
    files = sorted(f for p in paths for f in (p.glob("*.json") if p.is_dir() else [p]))
    if not files:
        print(
            f"check_durations: FAILED: no durations recorded in {', '.join(map(str, paths))}. "
            f"Fix: run the suites first (hatch run test:all records them)",
            file=sys.stderr,
        )
        return 1
    problems, overruns, report = check({f.stem: read(f) for f in files}, not args.no_scale)
    if args.report_only:  # everything reported, nothing fails
        problems, overruns, reported = [], problems + overruns, "OVER BUDGET (reported only)"
    elif args.full:  # the time budgets reported, the rest fails
        reported = "OVER BUDGET (reported: test:full runs the default tests beside the slow tier)"
    else:
        problems, overruns, reported = problems + overruns, [], ""
    for problem in problems:
        print(f"check_durations: FAILED: {problem}", file=sys.stderr)
    for overrun in overruns:
        print(f"check_durations: {reported}: {overrun}", file=sys.stderr)
    status = [f"FAILED with {len(problems)} problem(s)"] if problems else []
    if overruns:
        status.append(f"{reported.split(' (')[0]} ({len(overruns)} reported)")
    summary = "; ".join(status) or "OK"
    print(f"check_durations: {summary} (docs/contributing.md)\n" + "\n".join(report))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
