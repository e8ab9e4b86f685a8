"""The benchmark harness in its smoke mode: the workloads and variants run (tiny shapes, one
round), the table, chart and JSON are written, and js and hand-written JAX agree on the first
loss where they do the same computation. No timing is asserted.

The default run smokes a representative subset (``--only``, repeated): the tiny MLP, its K
steps/dispatch variant, the digits epoch (``Trainer.fit``), one inference workload and the
checkpoint table; the full tier (``-m ''``) smokes every workload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
INFERENCE = {
    f"inference {model} B={batch}" for model in ("digits CNN", "transformer") for batch in (1, 256)
}


def _smoke(out: Path, *options: str) -> tuple[str, dict]:
    """``python -m tools.bench --smoke --out OUT OPTIONS...``: its table and JSON report."""
    # The smoke run measures nothing: compile at XLA's lowest backend optimization to be fast.
    env = {
        **os.environ,
        "PYTHONWARNINGS": "error::DeprecationWarning",
        "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--smoke", "--out", str(out), *options],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = (out / "benchmarks-table.md").read_text()
    report = json.loads((out / "benchmarks.json").read_text())
    assert (out / "benchmarks.png").stat().st_size > 1000
    return table, report


def _check_tiny_mlp_machine_and_checkpoints(table: str, report: dict) -> None:
    """What every smoke run shows: the tiny MLP's memory and FLOPs, the machine, the peak and the
    checkpoint table."""
    for row in report["results"]:
        assert row["step_s"] > 0
        if row["variant"] != "jax" and not row["variant"].startswith("torch"):
            assert row["ratio"] > 0
    memory = {
        r["variant"]: r["memory_bytes"] for r in report["results"] if r["workload"] == "tiny MLP"
    }
    assert memory["js"] and memory["jax"]
    flops = {r["variant"]: r["flops"] for r in report["results"] if r["workload"] == "tiny MLP"}
    assert flops["js"] == flops["jax"] > 0  # the hand-written step's count, for every variant
    machine = report["machine"]
    assert machine["cores"] >= 1 and machine["peak_jnp_gflops"] > 0
    if "torch" in machine:  # torch gets one thread per core that XLA may use
        assert machine["torch_threads"] == machine["cores"]
    assert "| tiny MLP | js |" in table
    checkpoints = {r["workload"]: r for r in report["checkpoints"]}
    assert set(checkpoints) == {"100 small arrays", "wide model (0.0M parameters)"}
    for row in checkpoints.values():
        assert row["save_s"] > 0 and row["load_s"] > 0 and row["save_peak_extra_x"] >= 0
    assert "| 100 small arrays | 100 |" in table
    assert "Peak, one large float32 matmul: jnp" in table


@pytest.mark.process
def test_smoke_run_of_a_subset_writes_table_chart_and_agrees_with_hand_written(tmp_path):
    # One workload of each kind: a training step (and its K steps/dispatch), an epoch of
    # Trainer.fit, an inference (checked against hand-written JAX by the harness), checkpoints.
    subset = ["tiny MLP", "digits epoch", "inference digits CNN B=1", "checkpoint"]
    table, report = _smoke(tmp_path, *(f"--only={name}" for name in subset))
    workloads = {r["workload"] for r in report["results"]}
    assert workloads == {
        "tiny MLP",
        "tiny MLP, K steps/dispatch",
        "digits epoch",
        "inference digits CNN B=1",
    }
    variants = {(r["workload"], r["variant"]) for r in report["results"]}
    assert {("tiny MLP", v) for v in ("js", "jax", "nnx")} <= variants
    assert {("inference digits CNN B=1", v) for v in ("js", "jax", "exported")} <= variants
    assert {("digits epoch", "js Trainer.fit"), ("digits epoch", "js Trainer K=2")} <= variants
    assert ("tiny MLP, K steps/dispatch", "js K=4") in variants
    # A run with --only leaves the first-loss check of every workload to the full run; the tiny
    # MLP's here, with the harness's tolerance (tools/bench/run.py, check_losses)
    first = report["first_losses"]
    js_loss, jax_loss = first["tiny MLP|js"], first["tiny MLP|jax"]
    assert abs(js_loss - jax_loss) <= 1e-4 * max(1.0, abs(jax_loss)), (js_loss, jax_loss)
    _check_tiny_mlp_machine_and_checkpoints(table, report)


@pytest.mark.process
@pytest.mark.slow
def test_smoke_run_writes_table_chart_and_agrees_with_hand_written(tmp_path):
    table, report = _smoke(tmp_path)
    workloads = {r["workload"] for r in report["results"]}
    assert workloads == {
        "tiny MLP",
        "tiny MLP, K steps/dispatch",
        "MLP 784-512-512-10",
        "CNN 28x28",
        "LSTM",
        "transformer block",
        "transformer block, bf16-mixed",
        "digits epoch",
        *INFERENCE,
        "ResNet-18 32x32",
        "GPT 4x128",
    }
    variants = {(r["workload"], r["variant"]) for r in report["results"]}
    for workload in INFERENCE:  # each variant's output was checked against hand-written JAX
        assert {(workload, "js"), (workload, "jax"), (workload, "exported")} <= variants
    assert {
        ("transformer block, bf16-mixed", v) for v in ("jax", "js float32", "js bf16-mixed")
    } <= variants
    for workload in workloads - {
        "digits epoch",
        "tiny MLP, K steps/dispatch",
        "transformer block, bf16-mixed",
        *INFERENCE,
    }:
        assert {(workload, "js"), (workload, "jax")} <= variants
    for workload in ("tiny MLP", "MLP 784-512-512-10", "CNN 28x28", "LSTM", "transformer block"):
        assert (workload, "nnx") in variants
    assert {("digits epoch", "js Trainer.fit"), ("digits epoch", "js Trainer K=2")} <= variants
    assert ("tiny MLP, K steps/dispatch", "js K=4") in variants
    for row in report["results"]:
        assert row["step_s"] > 0
        if row["variant"] != "jax" and not row["variant"].startswith("torch"):
            assert row["ratio"] > 0
    memory = {
        r["variant"]: r["memory_bytes"] for r in report["results"] if r["workload"] == "tiny MLP"
    }
    assert memory["js"] and memory["jax"]
    flops = {r["variant"]: r["flops"] for r in report["results"] if r["workload"] == "tiny MLP"}
    assert flops["js"] == flops["jax"] > 0  # the hand-written step's count, for every variant
    machine = report["machine"]
    assert machine["cores"] >= 1 and machine["peak_jnp_gflops"] > 0
    if "torch" in machine:  # torch gets one thread per core that XLA may use
        assert machine["torch_threads"] == machine["cores"]
    assert "| tiny MLP | js |" in table and "LSTM compile time" in table
    checkpoints = {r["workload"]: r for r in report["checkpoints"]}
    assert set(checkpoints) == {"100 small arrays", "wide model (0.0M parameters)"}
    for row in checkpoints.values():
        assert row["save_s"] > 0 and row["load_s"] > 0 and row["save_peak_extra_x"] >= 0
    assert "| 100 small arrays | 100 |" in table
    assert "Peak, one large float32 matmul: jnp" in table


@pytest.mark.process
@pytest.mark.slow
def test_cores_option_pins_xla_and_torch_to_one_core(tmp_path):
    env = {
        **os.environ,
        "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.bench",
            "--smoke",
            "--cores",
            "1",
            "--only",
            "tiny MLP",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    machine = json.loads((tmp_path / "benchmarks.json").read_text())["machine"]
    assert machine["cores"] == 1 and len(machine["core_ids"].split(",")) == 1
    if "torch" in machine:
        assert machine["torch_threads"] == 1
