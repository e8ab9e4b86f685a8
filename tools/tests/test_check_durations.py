"""tools/check_durations.py (the suite's time budget) on made-up records, and
tools/pytest_durations.py (the plugin that writes them) on a small suite run in this process."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import check_durations  # noqa: E402
from check_durations import PROCESS_BUDGET_S, TEST_LIMIT_S, check, main  # noqa: E402


def test(nodeid, call=0.1, markers=(), children=(), load=0.5, setup=0.0, teardown=0.0, cpu=None):
    record = {
        "nodeid": nodeid,
        "markers": list(markers),
        "outcome": "passed",
        "setup": setup,
        "call": call,
        "teardown": teardown,
        "load": load,
        "children": list(children),
    }
    return record if cpu is None else record | {"cpu": cpu}


test.__test__ = False  # a record builder, not a test

FIX = (
    "Fix: make it faster (a smaller configuration, a module-scoped fixture), or mark it "
    "@pytest.mark.slow (it then runs in `hatch run test:full` only); or, if it starts child "
    f"processes, mark it @pytest.mark.process (counted against the {PROCESS_BUDGET_S:g} s budget)"
)


def write(folder: Path, suite: str, *tests: dict) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / f"{suite}.json"
    path.write_text(json.dumps({"args": [], "wall": 1.0, "tests": list(tests)}))
    return path


@pytest.fixture
def run(capsys):
    """The check's command line, in this process: (exit code, stdout, stderr)."""

    def check_command(*args) -> tuple[int, str, str]:
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as error:  # a record that cannot be read
            code, message = 1, str(error)
        else:
            message = ""
        out, err = capsys.readouterr()
        return code, out, err + message

    return check_command


def test_a_suite_within_its_budget_passes_and_lists_its_slowest_tests(tmp_path):
    write(
        tmp_path,
        "js-core",
        test("a.py::fast", 0.2),
        test("a.py::four", 4.9),
        test("a.py::long", 60.0, markers=["slow", "process"], children=["python3"]),  # full tier
        test("a.py::job", 20.0, markers=["process"], children=["python3", "python3"]),
    )
    problems, overruns, report = check({"js-core": check_durations.read(tmp_path / "js-core.json")})
    assert problems == overruns == []
    assert "  js-core: 3 default-run tests, 25 s of test time, load factor 1.00" in report
    assert f"  process tests: 1, 20 s of the {PROCESS_BUDGET_S:g} s budget (load-scaled)" in report
    assert report[-3:] == [
        "      20.0 s  a.py::job",
        "       4.9 s  a.py::four",
        "       0.2 s  a.py::fast",
    ]


def test_a_slow_unmarked_test_is_named_with_its_time_and_the_fix(tmp_path, run):
    write(tmp_path, "js-nn", test("t.py::slowpoke", call=6.5, setup=1.0))
    code, out, err = run(tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "check_durations: FAILED: t.py::slowpoke took 7.5 s (setup 1.0 + call 6.5 + teardown "
        f"0.0), over the {TEST_LIMIT_S:g} s a default-run test may take. Fix: make it faster (a "
        "smaller configuration, a module-scoped fixture), or mark it @pytest.mark.slow (it "
        "then runs in `hatch run test:full` only); or, if it starts child processes, mark it "
        f"@pytest.mark.process (counted against the {PROCESS_BUDGET_S:g} s budget)"
    ]
    assert out.startswith("check_durations: FAILED with 1 problem(s)")


def test_a_test_is_over_when_its_cpu_and_wall_times_both_are_or_when_it_waited(tmp_path, run):
    # 7.8 s wall beside another suite, 3 s of its own computing: stretched, within the limit
    write(tmp_path, "js-models", test("m.py::busy", call=7.8, cpu=3.0, load=1.6))
    # 6.5 s of CPU (threads) in 6.8 s of wall at a load of 1.54: within the scaled wall limit
    write(tmp_path, "docs", test("d.py::threads", call=6.8, cpu=6.5, load=1.54))
    write(tmp_path, "js-nn", test("n.py::heavy", call=11.0, cpu=10.5, load=2.0))
    write(tmp_path, "js-train", test("t.py::sleepy", call=6.0, cpu=0.2))
    code, out, err = run(tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "check_durations: FAILED: n.py::heavy took 11.0 s (setup 0.0 + call 11.0 + teardown "
        "0.0, 10.5 s of CPU), over the 5 s a default-run test may take (x2.00 for the "
        "machine's load). " + FIX,
        "check_durations: FAILED: t.py::sleepy waited 5.8 s (wall 6.0 s, CPU 0.2 s), over the "
        "5 s a default-run test may take. " + FIX,
    ]
    assert "  js-models: 1 default-run tests, 8 s of test time, load factor 1.60" in out


def test_report_only_lists_the_same_problems_and_exits_0(tmp_path, run):
    write(tmp_path, "js-nn", test("t.py::slowpoke", call=6.5, setup=1.0))
    code, out, err = run(tmp_path, "--report-only")
    assert code == 0
    assert err.startswith("check_durations: OVER BUDGET (reported only): t.py::slowpoke took 7.5 s")
    assert out.startswith("check_durations: OVER BUDGET (1 reported)")


def test_full_reports_the_time_budgets_and_fails_on_an_unmarked_child(tmp_path, run):
    # test:full: default tests ran beside the slow tier's jobs, so their times are reported
    write(tmp_path, "js-nn", test("t.py::slowpoke", call=6.5, setup=1.0))
    code, out, err = run(tmp_path, "--full")
    assert code == 0
    assert err.startswith(
        "check_durations: OVER BUDGET (reported: test:full runs the default tests beside the "
        "slow tier): t.py::slowpoke took 7.5 s"
    )
    assert out.startswith("check_durations: OVER BUDGET (1 reported) (docs/contributing.md)")
    write(tmp_path, "tools", test("x.py::child", 0.5, markers=["slow"], children=["python3"]))
    code, out, err = run(tmp_path, "--full")
    assert code == 1
    assert "check_durations: FAILED: x.py::child started 1 child Python process(es)" in err
    assert out.startswith("check_durations: FAILED with 1 problem(s); OVER BUDGET (1 reported)")


def test_a_module_fixture_counts_to_the_test_whose_setup_ran_it(tmp_path):
    slow_setup = test("m.py::first", call=0.1, setup=5.5)
    _, overruns, _ = check({"s": {"tests": [slow_setup, test("m.py::second", 0.1)]}})
    assert [p.split(" took ")[0] for p in overruns] == ["m.py::first"]


def test_a_test_starting_python_unmarked_is_refused_even_when_fast(tmp_path, run):
    write(tmp_path, "tools", test("x.py::child", 0.5, children=["python3.12", "git"]))
    write(tmp_path, "docs", test("d.py::forks", 0.5, children=["fork"]))
    write(tmp_path, "bench", test("b.py::git", 0.5, children=["git", "chromium"]))
    write(tmp_path, "full", test("f.py::slow", 0.5, markers=["slow"], children=["python"]))
    code, _, err = run(tmp_path)
    assert code == 1
    assert re.findall(r"FAILED: (\S+) started (\d) child Python process\(es\) \((\S+)\)", err) == [
        ("d.py::forks", "1", "fork"),
        ("f.py::slow", "1", "python"),  # slow tests too: test:full checks them
        ("x.py::child", "1", "python3.12"),
    ]
    assert "Fix: mark it @pytest.mark.process, and slow as well unless" in err


def test_process_tests_over_their_budget_are_listed(tmp_path, run):
    half = PROCESS_BUDGET_S / 2 + 1
    write(tmp_path, "a", test("a.py::one", half, markers=["process"]))
    write(tmp_path, "b", test("b.py::two", half, markers=["process"]))
    code, _, err = run(tmp_path)
    assert code == 1
    assert (
        f"the default run's process tests took {2 * half:.0f} s together, over their "
        f"{PROCESS_BUDGET_S:g} s budget (a.py::one {half:.1f} s; b.py::two {half:.1f} s). "
        "Fix: keep one test per mechanism" in err
    )


def test_a_loaded_machine_stretches_the_limits_and_no_scale_does_not(tmp_path, run):
    tests = [test(f"l.py::t{i}", 0.1, load=3.0) for i in range(4)]
    write(tmp_path, "loaded", *tests, test("l.py::eight", 8.0, load=3.0))
    code, out, _ = run(tmp_path)
    assert code == 0 and "load factor 3.00" in out
    code, _, err = run(tmp_path, "--no-scale")
    assert code == 1 and "l.py::eight took 8.0 s" in err


def test_no_records_or_a_broken_record_is_a_failure_with_the_fix(tmp_path, run):
    code, _, err = run(tmp_path)
    assert code == 1
    assert f"no durations recorded in {tmp_path}. Fix: run the suites first" in err
    (tmp_path / "bad.json").write_text("{not json")
    code, _, err = run(tmp_path)
    assert code == 1 and f"{tmp_path / 'bad.json'} is not a durations record" in err
    (tmp_path / "bad.json").write_text('{"tests": 3}')
    code, _, err = run(tmp_path / "bad.json")
    assert code == 1 and "'tests' is not a list" in err


def test_clear_deletes_the_records(tmp_path):
    write(tmp_path, "js-core", test("a.py::t"))
    assert main(["--clear", str(tmp_path)]) == 0
    assert list(tmp_path.iterdir()) == []


def test_the_budget_is_stated_in_the_contributing_guide():
    guide = (ROOT / "docs" / "contributing.md").read_text()
    assert f"their budget, **{PROCESS_BUDGET_S:g} s** together" in guide
    assert f"more than **{TEST_LIMIT_S:g} s**" in guide


SMALL_SUITE = """
import os, subprocess, time
import pytest

@pytest.fixture(scope="module")
def slow_fixture():
    time.sleep(0.3)

def test_first(slow_fixture):
    pass

def test_second(slow_fixture):
    pass

def test_busy():
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass

@pytest.mark.slow
def test_child():
    subprocess.run(["true"], check=True)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_the_plugin_records_phases_markers_and_children(tmp_path):
    (tmp_path / "test_small.py").write_text(SMALL_SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    out = tmp_path / "out" / "small.json"
    args = ["-q", "-p", "tools.pytest_durations", "--durations-json", str(out), str(tmp_path)]
    args += ["-c", str(tmp_path / "pytest.ini"), "-p", "no:cacheprovider"]
    assert pytest.main(args) == 0
    tests = {t["nodeid"].split("::")[-1]: t for t in json.loads(out.read_text())["tests"]}
    assert list(tests) == ["test_first", "test_second", "test_busy", "test_child"]
    assert tests["test_first"]["setup"] >= 0.3 > tests["test_second"]["setup"]
    assert tests["test_first"]["cpu"] < 0.2 <= tests["test_busy"]["cpu"]  # a sleep is no CPU
    assert tests["test_child"]["markers"] == ["slow"]
    assert tests["test_child"]["children"] == ["true", "fork"]
    assert tests["test_first"]["children"] == [] and tests["test_first"]["load"] >= 0


def test_run_suite_records_every_run_and_keeps_slow_tests_out_unless_told():
    import run_suite

    command = run_suite.pytest_command("js-core", [])
    plugin = command.index("tools.pytest_durations")
    assert command[plugin - 1] == "-p"
    assert command[plugin + 1 : plugin + 3] == [
        "--durations-json",
        str(ROOT / "build" / "durations" / "js-core.json"),
    ]
    assert command[-2:] == ["-m", "not slow"]
    assert run_suite.pytest_command("js-core", ["-m", ""])[-2:] == ["-m", ""]  # test:full
