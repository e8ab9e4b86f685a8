"""tools/bench/generate.py in its smallest run: a 2-layer width-64 GPT-2 and Llama, a 16-token
prompt, 8 new tokens, batch sizes 1 and 8, one round. The script runs, reports positive numbers
and js's tokens equal transformers'; no timing is asserted (the figures are for a quiet
machine)."""

from __future__ import annotations

import json

import pytest

from tools.bench import generate


@pytest.mark.process
@pytest.mark.slow
def test_smoke_run_reports_js_and_transformers(tmp_path, capsys):
    out = tmp_path / "generate.json"
    assert generate.main(["--smoke", "--rounds", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["problems"] == []
    assert set(report["runs"]) == {"gpt2", "llama"}
    for kind, (runs,) in report["runs"].items():
        assert set(runs) == {"js", "transformers", "js_fill", "js_warm"}
        assert runs["js"]["params"] == runs["transformers"]["params"]
        assert runs["js"]["params"] == report["built"][kind]["params"] > 100_000
        assert runs["js"]["load_s"] > 0 and runs["transformers"]["load_s"] > 0
        assert runs["js_warm"]["cache_files_added"] == 0  # every program came from the cache
        for who, result in runs.items():
            assert [row["batch"] for row in result["rows"]] == [1, 8]
            for row in result["rows"]:
                assert row["new_tokens"] == 8 and row["generate_s"] > 0, (who, row["batch"])
                assert len(row["tokens"]) == row["batch"]
                assert all(len(tokens) == 8 for tokens in row["tokens"])
        for js_row, hf_row in zip(runs["js"]["rows"], runs["transformers"]["rows"], strict=True):
            assert js_row["tokens"] == hf_row["tokens"]
            assert js_row["ttft_s"] > 0 and hf_row["ttft_s"] > 0
            assert js_row["first_call_s"] > js_row["generate_s"]  # it compiled
            assert js_row["traced"] == {"prefill": 1, "decode": 1, "beam": 0}
            assert js_row["step_flops"] > 0 and js_row["step_bytes"] > 0
            assert js_row["cache_bytes"] > 0 and js_row["step_s"] > 0
    assert "roofline" in report["runs"]["gpt2"][0]["js"]
    assert len(report["summary"]) == 4
    for row in report["summary"]:
        assert row["tokens_equal"]
        for key in ("js_tokens_per_s", "hf_tokens_per_s", "ratio", "js_ttft_s", "hf_ttft_s"):
            assert row[key] > 0, key
        for key in ("decode_steps_per_s", "flops_per_s", "bytes_per_s", "bytes_per_token"):
            assert row[key] > 0, key
        assert row["matmul_flops_per_s"] > 0 and row["copy_bytes_per_s"] > 0
        assert row["bytes_per_step"] == row["weights_bytes"] + row["cache_bytes"]
    text = capsys.readouterr().out
    assert "| GPT-2 0.2M | 1 |" in text and "| Llama 0.2M | 8 |" in text
    assert "| model | batch | GFLOP/step |" in text and "| bound |" in text
