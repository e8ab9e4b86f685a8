"""docs/examples/generate.py runs (shortened) and prints what the Models page says it does: a
trained model's greedy, sampled and streamed continuations, the stream equal to generate."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "generate.py"


@pytest.mark.process
@pytest.mark.slow
def test_generate_example_trains_and_continues_prompts():
    env = {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="js-generate-cache-")}
    process = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "80"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    out = process.stdout
    assert process.returncode == 0, out + process.stderr
    first, last = map(
        float, re.search(r"^trained 80 steps: loss (\S+) -> (\S+)$", out, re.M).groups()
    )
    assert last < first / 2
    for kind in ("greedy", "sampled"):
        continuations = re.findall(rf"^{kind} +'.*?' +-> '(.*)'$", out, re.M)
        assert len(continuations) == 3 and all(len(text) == 36 for text in continuations), out
    assert re.search(r"^first call \d+\.\d\d s \(compiling\); again .* tokens/s$", out, re.M)
    assert re.search(r"^streamed 'the fox' -> (.{1,8}\|){5}$", out, re.M), out
    assert "stream equals generate: True" in out
