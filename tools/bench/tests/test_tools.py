"""The bench's measuring tools beside the table: the compile-time split and the start-up
phases. They run for real on tiny inputs; no timing is asserted, only that every phase was
measured and the programs were compiled."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench import _compile, _cores, _startup


def test_compile_split_measures_every_phase_of_both_steps():
    rows = _compile.measure(repeats=1, only="tiny MLP")["tiny MLP"]
    for variant in _compile.VARIANTS:
        assert all(rows[variant][phase] > 0 for phase in ("trace", "lower", "compile"))
        assert rows[variant]["hlo_lines"] > 100
    assert rows["js.jit"]["flatten"] > 0
    assert sum(rows["js.jit"]["trace_by_package"].values()) > 0


def test_cores_argument_is_read_in_both_spellings():
    assert _cores.requested(["--smoke", "--cores", "1"]) == 1
    assert _cores.requested(["--cores=2"]) == 2
    assert _cores.requested(["--smoke"]) is None
    assert _cores.pin(["--smoke"]) == _cores.available()  # no --cores: nothing pinned


def test_cores_beyond_the_machine_are_refused():
    with pytest.raises(SystemExit, match=r"--cores 9999: this process may use \d+ cores"):
        _cores.pin(["--cores", "9999"])


def test_startup_table_has_a_row_per_run():
    text = _startup.table({"js, warm cache": [0.5, 0.1, 0.2, 0.05], "torch": [1.0, 0.0, 0.1, 0.0]})
    assert "| run | imports | build | first step | first validation | total |" in text
    assert "| js, warm cache | 0.50 | 0.10 | 0.20 | 0.05 | 0.85 |" in text


@pytest.mark.slow
@pytest.mark.process
def test_startup_runs_every_configuration():
    rows = _startup.measure()
    assert {"js, no cache", "js, cold cache", "js, warm cache"} <= set(rows)
    assert all(len(times) == 4 and min(times) >= 0 for times in rows.values())


REPOSITORY = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(not (REPOSITORY / ".git").exists(), reason="needs the git repository")
@pytest.mark.process
@pytest.mark.slow
def test_checkpoint_compare_runs_a_worktree_and_this_tree_side_by_side(capsys):
    from tools.bench import checkpoint_compare

    assert checkpoint_compare.main(["--smoke", "--rounds", "1", "--ref", "HEAD"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for workload in ("100 small arrays", "wide model (0.0M parameters)"):
        trees = [line.split(" | ")[1] for line in lines if line.startswith(f"| {workload} |")]
        assert len(trees) == 2 and trees[0].startswith("HEAD (") and trees[1] == "this tree"


@pytest.mark.process
@pytest.mark.slow
def test_checkpoint_compare_names_a_tree_the_workload_fails_on(tmp_path):
    from tools.bench import checkpoint_compare

    with pytest.raises(RuntimeError, match=r"holds no js sources \(packages/js-core/src/js\)"):
        checkpoint_compare.measure(tmp_path, smoke=True, timeout=120)
    sources = tmp_path / "packages" / "js-core" / "src" / "js"
    sources.mkdir(parents=True)  # js sources the workload cannot import: its error is named
    (sources / "__init__.py").write_text("raise ImportError('a broken tree')\n")
    with pytest.raises(RuntimeError, match=r"(?s)the workload failed against .*a broken tree"):
        checkpoint_compare.measure(tmp_path, smoke=True, timeout=120)
