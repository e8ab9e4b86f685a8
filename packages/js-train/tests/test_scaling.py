"""Training on 8 simulated devices equals training on one (data-parallel and fully sharded).

The checks live in ``jobs/scaling_checks.py`` and run in one child process with 8 CPU devices (the
count must be set before jax starts); each prints one JSON line of what it measured.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from jax.sharding import AxisType

from js.training import Trainer

JOBS = Path(__file__).parent / "jobs"  # the child-process scripts


def run_checks(*names: str, devices: int = 8) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flags = env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    env["XLA_FLAGS"] = flags.strip()
    child = subprocess.run(
        [sys.executable, "-W", "error", str(JOBS / "scaling_checks.py"), *names],
        cwd=JOBS,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    results = {}
    for line in child.stdout.splitlines():
        results.update(json.loads(line))
    return results


@pytest.fixture(scope="module")
def eight_devices() -> dict:
    return run_checks("dp", "fsdp", "tp", "trainer")


@pytest.mark.parametrize("model", ["cnn", "block"])
@pytest.mark.process
@pytest.mark.slow
def test_data_parallel_20_adam_steps_equal_one_device(eight_devices, model):
    result = eight_devices["dp"][model]
    assert result["loss_diff"] <= 1e-5 and result["param_diff"] <= 1e-5, result
    assert result["last_loss"] < result["first_loss"]  # it trained


@pytest.mark.process
@pytest.mark.slow
def test_fully_sharded_state_is_an_eighth_per_device_and_trains_the_same(eight_devices):
    result = eight_devices["fsdp"]
    assert result["loss_diff"] <= 1e-5 and result["param_diff"] <= 1e-5, result
    sharded, replicated = result["sharded_bytes_1"], result["replicated_bytes"]
    assert result["state_bytes_8"] <= replicated + sharded / 8 * 1.1, result


@pytest.mark.process
@pytest.mark.slow
def test_two_axes_megatron_rules_train_the_same(eight_devices):
    result = eight_devices["tp"]
    assert result["loss_diff"] <= 1e-5 and result["param_diff"] <= 1e-5, result


@pytest.mark.process
@pytest.mark.slow
def test_trainer_on_a_mesh_equals_the_trainer_on_one_device(eight_devices):
    assert eight_devices["trainer"]["history_diff"] <= 1e-5


def test_trainer_refuses_a_bad_mesh_when_built():
    with pytest.raises(TypeError, match="Trainer: mesh must be a jax.sharding.Mesh, got tuple"):
        Trainer(1, mesh=(8,))
    mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,))
    with pytest.raises(KeyError, match=r"batch_axis 'batch' is not an axis of the mesh; its axes"):
        Trainer(1, mesh=mesh, batch_axis="batch")
    explicit = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Explicit,))
    with pytest.raises(NotImplementedError, match="are not AxisType.Auto"):
        Trainer(1, mesh=explicit)
    assert Trainer(1, mesh=mesh).mesh is mesh
