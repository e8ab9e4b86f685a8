"""tools/bench/tokenizers_bench.py in its smallest run: a 300-token byte-level BPE trained here,
20 texts, one round, one timed call. The script runs, js's outputs equal transformers' and the
figures are positive; no timing is asserted (the figures are for a quiet machine)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tools.bench import tokenizers_bench

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="the tokenizers bench runs in the models environment (transformers)",
)


@pytest.mark.slow
def test_smoke_run_reports_js_and_transformers(tmp_path, capsys):
    out = tmp_path / "tokenizers.json"
    argv = ["--smoke", "--rounds", "1", "--repeats", "1", "--json", str(out)]
    assert tokenizers_bench.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["problems"] == [] and report["texts"] == 20
    assert [row["workload"] for row in report["summary"]] == list(tokenizers_bench.WORKLOADS)
    for row in report["summary"]:
        for key in ("js_per_s", "transformers_per_s", "ratio"):
            assert row[key] > 0, (row["workload"], key)
    assert "| encode |" in capsys.readouterr().out
