"""tools/bench/whisper_features.py in its smallest run: 2 s of audio, batch 1, one round, one
timed call. The script runs, js's features equal transformers' and the figures are positive; no
timing is asserted (the figures are for a quiet machine)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tools.bench import whisper_features

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="the Whisper features bench runs in the models environment (transformers)",
)


@pytest.mark.slow
def test_smoke_run_reports_js_and_transformers(tmp_path, capsys):
    out = tmp_path / "whisper_features.json"
    assert whisper_features.main(["--smoke", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["problems"] == [] and report["seconds"] == 2.0
    (row,) = report["summary"]
    assert row["batch"] == 1 and row["error"] < 1e-4
    assert row["js_audio_s_per_s"] > 0 and row["transformers_audio_s_per_s"] > 0
    assert "| 1 |" in capsys.readouterr().out
