"""tools/bench/models_load.py in its smallest run: a 2-layer width-64 GPT-2 folder, one round.
The script runs and reports numbers; no timing is asserted (the figures are for a quiet machine).
The two-process sharded part starts four processes (slow here)."""

from __future__ import annotations

import json

import pytest

from tools.bench import models_load


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("models-load") / "gpt2"
    models_load.build(path, smoke=True, timeout=300)
    return path


@pytest.mark.process
@pytest.mark.slow
def test_load_part_reports_js_and_transformers(folder, tmp_path, capsys):
    out = tmp_path / "load.json"
    argv = ["--smoke", "--rounds", "1", "--part", "load", "--folder", str(folder)]
    assert models_load.main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    (js,), (hf,) = report["load"]["js"], report["load"]["transformers"]
    assert js["params"] == hf["params"] > 3_000_000  # GPT-2's 50257-row embedding is there
    for row in (js, hf):
        assert row["load_s"] > 0 and row["imports_s"] > 0
        assert row["touched_peak_mib"] >= row["peak_mib"] >= row["rss_before_mib"] > 0
        assert row["touch_s"] > 0
    text = capsys.readouterr().out
    assert "| js | " in text and "| transformers | " in text and "| js / transformers | " in text


@pytest.mark.slow
@pytest.mark.process
def test_sharded_part_two_processes_hold_only_their_shards(folder, tmp_path):
    out = tmp_path / "sharded.json"
    argv = ["--smoke", "--rounds", "1", "--part", "sharded", "--folder", str(folder)]
    assert models_load.main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["shard_problems"] == []
    (two,), (one,), (plain,) = report["sharded"].values()
    assert [row["process"] for row in two] == [0, 1]
    for row in two:
        assert row["local_devices"] == 2 and row["split_arrays"] > 0
        assert row["held_fraction"] < 0.75 and row["touched_peak_mib"] > 0
    assert one[0]["held_fraction"] == plain[0]["held_fraction"] == 1.0


def _row(process: int, before: float, peak: float, held: float, devices: int) -> dict:
    return {
        "process": process,
        "processes": 2 if held < 1 else 1,
        "local_devices": devices,
        "init_s": 0.5,
        "load_s": 1.0,
        "rss_before_mib": before,
        "peak_mib": peak - 50,
        "touched_peak_mib": peak,
        "rss_anon_after_mib": peak - 100,
        "rss_file_after_mib": 20,
        "split_arrays": 3 if devices != 1 else 0,
        "held_fraction": held,
        "wrong_shards": [],
    }


def test_sharded_table_compares_the_larger_process_with_one_process():
    runs = {
        "2 processes, mesh 4, rules": [[_row(0, 200, 300, 0.5, 2), _row(1, 200, 310, 0.5, 2)]],
        "1 process, mesh 4, rules": [[_row(0, 200, 420, 1.0, 4)]],
        "1 process, no mesh": [[_row(0, 200, 400, 1.0, 1)]],
    }
    text = models_load.sharded_table(runs)
    row = "| 2 processes, mesh 4, rules | 1 | 2 | 0.50 | 1.00 | 200 | 260 | 310 | 110 | 210 | 20 |"
    assert row + " 3 | 50% |" in text
    assert "110 MiB = 0.50x of 1 process, mesh 4, rules (220 MiB)" in text
    assert models_load.check_shards(runs) == []
    runs["2 processes, mesh 4, rules"][0][1]["held_fraction"] = 1.0
    assert "process 1: holds 100% of the model" in models_load.check_shards(runs)[0]


def _load_row(load_s: float, before: float, touched: float, **extra) -> dict:
    return {
        "imports_s": 2.0,
        "load_s": load_s,
        "touch_s": 0.5,
        "rss_before_mib": before,
        "peak_mib": before + 10,
        "touched_peak_mib": touched,
        "rss_anon_after_mib": 100.0,
        "rss_file_after_mib": 50.0,
        "params": 124_439_808,
        "dtype": "float32",
        "cores": 2,
        **extra,
    }


def test_load_table_gives_medians_and_per_round_ratios():
    runs = {
        "js": [_load_row(1.0, 200, 700), _load_row(3.0, 200, 700), _load_row(2.0, 200, 700)],
        "transformers": [_load_row(1.0, 400, 900, torch_threads=2)] * 3,
    }
    text = models_load.load_table(runs)
    assert text.startswith("GPT-2 124.4M parameters (float32; transformers 124.4M, float32)")
    assert "| js | 2.00 | 2.00 | 0.50 | 2.50 | 200 | 210 | 700 | 500 | 100 | 50 |" in text
    assert "| js / transformers | 1.00x | 2.00x | 1.00x | 1.67x | 0.50x |" in text
