"""tools/bench/encoders.py in its smallest run: 2-layer width-32 models (a BERT in a
sentence-transformers folder, a ViT, a DINOv2 with its position table resized), one round, one
timed call. The script runs, reports positive numbers and js's outputs equal the references';
no timing is asserted (the figures are for a quiet machine)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tools.bench import encoders

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None,
    reason="the encoders bench runs in the models environment (sentence-transformers)",
)


@pytest.mark.process
@pytest.mark.slow
def test_smoke_run_reports_js_and_the_references(tmp_path, capsys):
    out = tmp_path / "encoders.json"
    argv = ["--smoke", "--rounds", "1", "--repeats", "1", "--folder", str(tmp_path / "models")]
    assert encoders.main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["problems"] == [] and set(report["built"]["params"]) == set(encoders.WORKLOADS)
    (run,) = report["rounds"]
    assert run["js"]["rows"]["minilm"]["shape"] == [8, 16]  # every sentence exactly 16 tokens
    for row in report["summary"]:
        assert row["difference"] < 1e-5, row["workload"]
        for key in ("js_per_s", "reference_per_s", "ratio", "js_first_s", "reference_first_s"):
            assert row[key] > 0, (row["workload"], key)
    text = capsys.readouterr().out
    assert "| minilm | 8x16 | sentence-transformers |" in text and "| dinov2 | 2x3x32x32 |" in text
