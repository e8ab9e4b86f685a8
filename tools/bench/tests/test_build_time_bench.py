"""tools/bench/build_time.py in its smallest run: a 2-layer width-64 nanoGPT-style GPT, one
round in each library. No timing is asserted (the figures are for a quiet machine); the two
fresh processes import jax and torch (slow here)."""

from __future__ import annotations

import json

import pytest

from tools.bench import build_time


@pytest.mark.process
@pytest.mark.slow
def test_smoke_run_builds_the_same_model_in_both_libraries(tmp_path, capsys):
    out = tmp_path / "build.json"
    assert build_time.main(["--smoke", "--rounds", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    (js,), (torch,) = report["runs"]["js"], report["runs"]["torch"]
    # the tie is one Parameter on both sides: 2 blocks of width 64, a 256-row shared table
    assert (
        js["parameters"]
        == torch["parameters"]
        == 256 * 64
        + 32 * 64
        + 2 * 12 * 64 * 64
        + (2 * (4 * 64 + 3 * 64 + 64 + 4 * 64 + 64) + 2 * 64)
    )
    for row in (js, torch):
        assert row["build"] > 0 and row["imports"] > 0
    assert report["ratios"] == [js["build"] / torch["build"]]
    assert "| js | " in capsys.readouterr().out
