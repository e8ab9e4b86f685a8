"""tools/bench/finetune.py in its smallest run: every section on tiny shapes, one round. The
script runs and its ratios say what the fine-tuning tools promise (frozen: fewer FLOPs and less
optimizer state; LoRA: less optimizer state; remat: less temporary memory); no timing is
asserted (the figures are for a quiet machine)."""

from __future__ import annotations

import json

import pytest

from tools.bench import finetune


@pytest.mark.slow
def test_smoke_run_reports_every_section(tmp_path):
    out = tmp_path / "finetune.json"
    finetune.main(["--smoke", "--json", str(out)])
    report = json.loads(out.read_text())
    for model in ("gpt", "cnn"):
        frozen = report["frozen"][model]
        assert frozen["frozen"]["trainable"] < frozen["full"]["trainable"]
        assert frozen["ratio"]["flops"] < 1 and frozen["ratio"]["optimizer_state_bytes"] < 1
        assert frozen["full"]["step_s"] > 0 and frozen["frozen"]["step_s"] > 0
    assert report["lora"]["ratio"] < 1
    assert report["remat"]["ratio"]["temp_bytes"] < 1
    assert set(report["compile"]) == {"2", "4"}
    assert all(row["unrolled_s"] > 0 and row["scanned_s"] > 0 for row in report["compile"].values())
