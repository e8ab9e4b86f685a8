"""from_pretrained onto a mesh of 8 simulated CPU devices (a subprocess: XLA_FLAGS is read when
jax starts): same outputs as the single-device load, each device holding 1/8 of each ruled
array, read slice by slice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SRC = [str(p) for p in Path(__file__).resolve().parents[2].glob("*/src")]


@pytest.mark.process
@pytest.mark.slow
def test_gpt2_loads_onto_8_devices(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), *SRC]),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8",
    }
    done = subprocess.run(
        [sys.executable, str(HERE / "sharded_load_script.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["single", "index"], lines
    assert all(line.endswith("1/8 per device") for line in lines)
