"""tools/bench/jit_overhead.py in its smallest run: one tree, one round, a few calls each.
No timing is asserted: the script is for side-by-side measurements on a quiet machine."""

from __future__ import annotations

import pytest

from tools.bench import jit_overhead


@pytest.mark.process
@pytest.mark.slow
def test_one_round_reports_both_clocks_for_a_tree(tmp_path):
    results = jit_overhead.compare({"this tree": jit_overhead.ROOT}, rounds=1, calls=5)
    (result,) = results.values()
    assert result["rounds"] == 1
    for clock in ("wall", "cpu"):
        r = result[clock]
        assert r["js_us"] > 0 and r["jax_us"] > 0
        assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
