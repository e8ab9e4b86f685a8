"""tools/bench/stop_time.py in its smallest run: one SIGTERM to the digits CNN's training
process, then one restart of the 2-process job. The table prints, the stop's checkpoint loads,
and the times are in order; no timing is asserted (the figures are for a quiet machine)."""

from __future__ import annotations

import json

import pytest

from tools.bench import stop_time


@pytest.mark.process
@pytest.mark.slow
def test_smoke_run_stops_the_digits_cnn_and_its_checkpoint_loads(tmp_path, capsys):
    out = tmp_path / "stop_time.json"
    results = stop_time.main(["--smoke", "--json", str(out)])
    assert json.loads(out.read_text()) == results
    (run,) = results["stop"]["digits"]["runs"]
    assert run["step"] >= 20  # the step it was at when the signal came (ready after 20)
    assert 0 < run["saved_s"] <= run["exit_s"]
    assert run["parameters"] == 29_258 and run["checkpoint_bytes"] > 4 * run["parameters"]
    assert "SIGTERM to a training process" in capsys.readouterr().out


@pytest.mark.process
@pytest.mark.slow
def test_a_restart_resumes_from_the_last_checkpoint_before_the_crash():
    run = stop_time.restart()
    # checkpoints every 10 steps, process 1 died at 25: step 20 unless its background write
    # was still going then (a step is numbered only once complete), then step 10
    assert run["resumed_from"] in (10, 20)
    assert 0 < run["reported_s"] < run["first_step_s"] and run["started_s"] < run["first_step_s"]
    assert run["cold_s"] > 0
