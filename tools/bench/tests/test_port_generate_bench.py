"""tools/bench/port_generate.py in its smallest run: the nanoGPT port at 2 layers and width 32,
4 new tokens, each path in its own process. No timing is asserted."""

from __future__ import annotations

import json

import pytest

from tools.bench import port_generate


@pytest.mark.process
@pytest.mark.slow
def test_smoke_run_times_every_path(tmp_path, capsys):
    out = tmp_path / "generate.json"
    assert port_generate.main(["--smoke", "--repeats", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert list(report["runs"]) == list(port_generate.PATHS) and report["new"] == 4
    for run in report["runs"].values():
        assert run["first_s"] > 0 and run["warm_s"] > 0
    text = capsys.readouterr().out
    assert "| fixed_buffer | " in text and "| gpt2 | " in text and "1.0x" in text  # torch/torch
