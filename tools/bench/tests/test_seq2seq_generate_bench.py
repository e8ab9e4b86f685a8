"""tools/bench/seq2seq_generate.py in its smallest run: a 2-layer width-32 Flan-T5 and Whisper
(64 feature frames), a 16-token T5 source, 8 new tokens, batch sizes 1 and 2, one round. The
script runs, reports positive numbers and js's tokens equal transformers'; no timing is asserted
(the figures are for a quiet machine)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tools.bench import seq2seq_generate

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="the seq2seq generation bench needs transformers (the bench environment)",
)


@pytest.mark.process
@pytest.mark.slow
def test_smoke_run_reports_js_and_transformers(tmp_path, capsys):
    out = tmp_path / "seq2seq.json"
    argv = ["--smoke", "--rounds", "1", "--batch", "1", "2", "--json", str(out)]
    assert seq2seq_generate.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["problems"] == []
    assert set(report["runs"]) == {"flan-t5-small", "whisper-tiny"}
    for kind, (runs,) in report["runs"].items():
        assert runs["js"]["params"] == runs["transformers"]["params"]
        assert runs["js"]["params"] == report["built"][kind]["params"] > 10_000
        for js_row, hf_row in zip(runs["js"]["rows"], runs["transformers"]["rows"], strict=True):
            assert js_row["batch"] == hf_row["batch"]
            assert js_row["tokens"] == hf_row["tokens"]
            assert len(js_row["tokens"]) == js_row["batch"]
            assert all(len(tokens) == 8 for tokens in js_row["tokens"])
            assert js_row["traced"]["encode"] == 1 and js_row["traced"]["decode"] == 1
            for row in (js_row, hf_row):
                assert row["generate_s"] > 0 and row["ttft_s"] > 0
    assert len(report["summary"]) == 4
    for row in report["summary"]:
        assert row["tokens_equal"]
        for key in ("js_tokens_per_s", "hf_tokens_per_s", "ratio", "js_ttft_s", "hf_ttft_s"):
            assert row[key] > 0, key
    text = capsys.readouterr().out
    assert "| Flan-T5-small " in text and "| Whisper-tiny " in text


def _run(seconds: float, tokens: list[list[int]]) -> dict:
    row = {"batch": 1, "generate_s": seconds, "ttft_s": seconds / 4, "compile_s": 1.0,
           "new_tokens": len(tokens[0]), "tokens": tokens}  # fmt: skip
    return {"load_s": 0.5, "rows": [row]}


def test_summary_pairs_each_round_and_reports_differing_tokens():
    rounds = [  # transformers 2x then 4x slower; js's tokens differ in round 2
        {"js": _run(1.0, [[5, 6]]), "transformers": _run(2.0, [[5, 6]])},
        {"js": _run(0.5, [[5, 7]]), "transformers": _run(2.0, [[5, 6]])},
    ]
    report = {"runs": {"whisper-tiny": rounds}, "batch": [1], "new": 2}
    report["built"] = {"whisper-tiny": {"params": 1000}}
    (row,) = report["summary"] = seq2seq_generate.summarize(report)
    assert row["ratio"] == 3.0 and row["js_tokens_per_s"] == 3.0 and row["hf_tokens_per_s"] == 1
    assert not row["tokens_equal"] and row["token_agreement"] == 0.5
    report["runs"]["whisper-tiny"][0]["js"]["rows"][0]["new_tokens"] = 1
    assert seq2seq_generate.check(report) == [
        "whisper-tiny round 1 js batch 1: 1 new tokens, expected 2",
        "whisper-tiny batch 1: js's tokens differ from transformers' in 50% of the rows",
    ]
