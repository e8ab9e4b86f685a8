"""from_pretrained onto a mesh of simulated CPU devices (a subprocess: XLA_FLAGS is read when jax
starts): same outputs as the single-device load, each device holding its share of each ruled
array, read slice by slice (GPT-2 on 8 devices, CLIP on 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SRC = [str(p) for p in Path(__file__).resolve().parents[2].glob("*/src")]


def _run(script: str, devices: int, folder: Path) -> list[str]:
    """``script`` in a subprocess with ``devices`` simulated CPU devices; its stdout lines."""
    flags = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *SRC]), "XLA_FLAGS": flags}
    done = subprocess.run(
        [sys.executable, str(HERE / script), str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


@pytest.mark.process
@pytest.mark.slow
def test_gpt2_loads_onto_8_devices(tmp_path):
    lines = _run("sharded_load_script.py", 8, tmp_path)
    assert [line.split(":")[0] for line in lines] == ["single", "index"], lines
    assert all(line.endswith("1/8 per device") for line in lines)


@pytest.mark.process
@pytest.mark.slow
def test_clip_loads_onto_4_devices(tmp_path):
    """Both towers' attention and MLP weights split over 4 devices: the same
    logits_per_image as the one-device load."""
    lines = _run("clip_sharded_script.py", 4, tmp_path)
    assert len(lines) == 1 and lines[0].endswith("24 arrays 1/4 per device"), lines
