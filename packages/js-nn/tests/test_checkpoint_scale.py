"""Checkpoints at both ends of the scale (issue 10): many small arrays load through js-core's
batched placement, large arrays are written uncompressed, and steps written compressed (by
js-train before that change) still load. Speed itself is measured by tools/bench/_checkpoint."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

import js
import js.nn as nn
from js.nn.checkpoint import load_checkpoint, save_checkpoint
from js.nn.checkpoint.format import manager as _manager
from js.nn.checkpoint.write import save_args


class ManySmall(js.Module):
    def __init__(self, n: int, seed: int):
        super().__init__()
        self.layers = [nn.Linear(2, 2, rngs=js.Rngs(params=seed + i)) for i in range(n)]


@pytest.mark.slow
def test_a_model_of_many_small_arrays_round_trips_onto_its_device(tmp_path):
    # 1,100 weights of one shape and 1,100 biases of another: past the count where js-core's
    # placed_like copies through a jitted copy instead of jax.device_put.
    saved, loaded = ManySmall(1100, seed=0), ManySmall(1100, seed=5000)
    save_checkpoint(tmp_path / "ck", {"model": saved})
    load_checkpoint(tmp_path / "ck", {"model": loaded})
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    want, got = saved.state_dict(), loaded.state_dict(as_numpy=False)
    assert list(got) == list(want)
    for key, value in got.items():
        assert isinstance(value, jax.Array) and value.sharding == device, key
        np.testing.assert_array_equal(np.asarray(value), want[key], err_msg=key)


class Wide(js.Module):
    """One 1 MiB weight that zstd shrinks to almost nothing (every row the same)."""

    def __init__(self, offset: float):
        super().__init__()
        self.weight = js.Parameter(jnp.tile(jnp.arange(512.0) + offset, (512, 1)))


def _stored_bytes(step: Path) -> int:
    return sum(f.stat().st_size for f in step.rglob("*") if f.is_file())


def test_arrays_are_stored_uncompressed_and_compressed_steps_still_load(tmp_path):
    path = tmp_path / "ck"
    save_checkpoint(path, {"model": Wide(0.0), "epoch": 0})
    assert _stored_bytes(path / "0") >= 512 * 512 * 4  # stored as it is: no zstd buffers
    # Step 1 as js-train wrote it before: orbax's StandardSave, zstd-compressed.
    written = save_args({"model": Wide(1.0), "epoch": 1})
    compressed = {
        name: ocp.args.StandardSave(item.item) if isinstance(item, ocp.args.PyTreeSave) else item
        for name, item in written.items()
    }
    manager = _manager(path, ranked=False)
    try:
        manager.save(1, args=ocp.args.Composite(**compressed))
        manager.wait_until_finished()
    finally:
        manager.close()
    assert _stored_bytes(path / "1") < 512 * 512  # zstd shrank it: the old layout
    for step, offset in ((1, 1.0), (0, 0.0)):
        target = Wide(5.0)
        restored = load_checkpoint(path, {"model": target, "epoch": -1}, which=step)
        np.testing.assert_array_equal(target.weight.value, Wide(offset).weight.value)
        assert restored["step"] == restored["epoch"] == step
