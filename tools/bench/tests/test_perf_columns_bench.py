"""tools/bench/perf_columns.py in its smallest run: both sections on tiny shapes, one round.
The perf columns are there and cost no device read; no timing is asserted (the figures are
for a quiet machine)."""

from __future__ import annotations

import json

import pytest

from tools.bench import perf_columns


@pytest.mark.slow
def test_smoke_run_reports_both_sections(tmp_path):
    out = tmp_path / "perf_columns.json"
    perf_columns.main(["--smoke", "--json", str(out)])
    report = json.loads(out.read_text())
    on, off = report["overhead"]["on"], report["overhead"]["off"]
    assert on["transfers"] == off["transfers"]  # the columns read nothing from the device
    assert "perf/flops_per_step" in on["columns"] and off["columns"] == []
    assert on["steps_per_s"] > 0 and off["steps_per_s"] > 0 and report["overhead"]["ratio"] > 0
    assert on["analysis_s"] > 0 and off["analysis_s"] == 0
    mfu = report["mfu"]
    assert mfu["peak_flops"] > 0 and mfu["flops_per_step"] > 0
    assert abs(mfu["mfu"] - mfu["flops_per_step"] * mfu["steps_per_s"] / mfu["peak_flops"]) <= (
        1e-9 * mfu["mfu"]
    )
