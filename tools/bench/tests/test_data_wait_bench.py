"""tools/bench/data_wait.py in its smallest run: no worker processes, a few steps. The table
prints and every variant reports its wait; no timing is asserted (the figures are for a quiet
machine)."""

from __future__ import annotations

import json

import pytest

from tools.bench import data_wait

pytest.importorskip("grain")


def test_smoke_run_reports_each_variant(tmp_path, capsys):
    out = tmp_path / "data_wait.json"
    results = data_wait.main(["--smoke", "--json", str(out)])
    assert json.loads(out.read_text()) == results
    assert set(results["variants"]) == {"inline", "prefetch"}
    for run in results["variants"].values():
        assert run["steps"] == 6 and run["interval_s"] > 0 and 0 <= run["fraction"] <= 1
    assert "wait fraction" in capsys.readouterr().out
