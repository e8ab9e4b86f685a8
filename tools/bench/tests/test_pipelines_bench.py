"""tools/bench/pipelines_bench.py in its smallest run: a 2-layer width-64 GPT-2 beside a
300-token BPE trained here, 8 requests of 4 to 12 words, 4 new tokens, batch_size 4, one round.
The script runs, js's texts equal transformers', the figures are positive and js's compiled
programs are counted; no timing is asserted (the figures are for a quiet machine)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tools.bench import pipelines_bench

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="the pipelines bench needs transformers (the bench environment)",
)


@pytest.mark.process
@pytest.mark.slow
def test_smoke_run_reports_js_and_transformers(tmp_path, capsys):
    out = tmp_path / "pipelines.json"
    argv = ["--smoke", "--rounds", "1", "--batch-size", "4", "--json", str(out)]
    assert pipelines_bench.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["problems"] == [] and report["requests"] == 8
    (runs,) = report["runs"]["gpt2"]
    assert len(runs["js"]["texts"]) == 8 and runs["js"]["texts"] == runs["transformers"]["texts"]
    assert len(runs["js"]["prompt_tokens"]) == 8
    (row,) = report["summary"]
    assert row["texts_equal"] and row["warm_programs"] == 0
    assert row["programs"] >= 2 and row["compilations"] >= row["programs"]
    assert row["traced"]["prefill"] >= 1 and row["traced"]["decode"] >= 1
    for key in ("js_latency_s", "hf_latency_s", "js_requests_per_s", "hf_requests_per_s",
                "js_tokens_per_s", "hf_tokens_per_s", "latency_ratio", "stream_ratio"):  # fmt: skip
        assert row[key] > 0, key
    assert "| GPT-2-small " in capsys.readouterr().out


def _run(latency: float, stream: float, texts: list[str], warm: int = 0) -> dict:
    counted = {"programs": 4, "compilations": 9, "compile_s": 2.0, "traced_prefill": 2}
    return {"latency_s": latency, "stream_s": stream, "stream_first_s": 3 * stream,
            "prompt_tokens": [4, 9, 5], "counted": counted, "texts": texts,
            "counted_warm": {**counted, "programs": warm}}  # fmt: skip


def test_summary_counts_requests_tokens_and_programs():
    rounds = [  # transformers 2x slower per call, then its stream 4x slower
        {"js": _run(0.1, 2.0, ["a"]), "transformers": _run(0.2, 4.0, ["a"])},
        {"js": _run(0.1, 1.0, ["a"], warm=1), "transformers": _run(0.2, 4.0, ["b"])},
    ]
    report = {"runs": {"gpt2": rounds}, "requests": 32, "new": 16, "batch_size": 8}
    report["built"] = {"gpt2": {"params": 1000}}
    (row,) = report["summary"] = pipelines_bench.summarize(report)
    assert row["latency_ratio"] == 2.0 and row["stream_ratio"] == 3.0
    assert row["js_requests_per_s"] == 24.0 and row["hf_tokens_per_s"] == 8 * 16
    assert row["prompt_tokens"] == [4, 9, 6] and row["traced"] == {"prefill": 2}
    assert (row["programs"], row["compilations"], row["warm_programs"]) == (4, 9, 1)
    assert pipelines_bench.check(report) == [
        "gpt2: js's generated texts differ from transformers'",
        "gpt2: a warm stream pass compiled 1",
    ]
    report.update(rounds=2, cores=2, torch_threads=2)
    assert "| GPT-2-small 0.0M | 4/9/6 | 100 | 200 | 2.00x |" in pipelines_bench.table(
        report["summary"], report
    )
