"""Checkpoints a careful user can trust, on js-nn alone (issue 10): a flipped byte in an array
file is refused, host and device digests agree, and the writer lock holds against a killed
writer and a second one (real child processes). The cases that need a Trainer or an optimizer
stay in js-train's test_checkpoint_trust.py."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import js
import js.nn as nn
from js.nn.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from js.nn.checkpoint.digest import device_digests, host_digest

PACKAGES = Path(__file__).resolve().parents[2]
# js-nn's suite installs js-core, js-losses (its dependency) and js-nn only: so do the children
SRC = [str(PACKAGES / name / "src") for name in ("js-core", "js-losses", "js-nn")]


class MLP(js.Module):
    """Linear -> BatchNorm1d -> ReLU -> Linear: parameters and buffers."""

    def __init__(self, din=4, hidden=16, classes=3, *, rngs):
        super().__init__()
        self.fc1 = nn.Linear(din, hidden, rngs=rngs)
        self.norm = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, classes, rngs=rngs)

    def forward(self, x):
        return self.fc2(jax.nn.relu(self.norm(self.fc1(x))))


class Big:
    """A stateful object with one large (unpacked) array."""

    def __init__(self, n=40_000):
        self.w = np.arange(n, dtype=np.float32)

    def state_dict(self):
        return {"w": self.w}

    def load_state_dict(self, state):
        self.w = state["w"]


def _largest_data_file(item: Path) -> Path:
    return max(
        (p for p in item.rglob("*") if p.is_file() and "/d/" in str(p)),
        key=lambda p: p.stat().st_size,
    )


def test_a_flipped_byte_in_an_array_file_is_refused(tmp_path):
    save_checkpoint(tmp_path, {"big": Big(), "model": MLP(rngs=js.Rngs(params=0))})
    for item in ("state_big", "state_model"):
        data = _largest_data_file(tmp_path / "0" / item)
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x10
        data.write_bytes(bytes(raw))
    big, model = Big(10), MLP(rngs=js.Rngs(params=3))
    before = model.state_dict()
    with pytest.raises(
        CheckpointError,
        match=r"step 0: (item 'state_(big|model)'.*cannot be "
        r"read|arrays? '(big|model)\..*does not match its recorded digest)",
    ):
        load_checkpoint(tmp_path, {"big": Big(40_000), "model": model})
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])
    assert big.w.size == 10


def test_digests_agree_on_host_and_device_and_catch_one_flipped_bit():
    import jax.numpy as jnp
    import ml_dtypes

    rng = np.random.default_rng(0)
    arrays = [
        rng.normal(size=(3, 5)).astype(np.float32),
        rng.integers(0, 9, (4, 2), np.uint32),
        rng.normal(size=(7,)).astype(ml_dtypes.bfloat16),
        rng.random(5) > 0.5,
        rng.integers(-9, 9, (2, 3)).astype(np.int8),
        np.array(3, np.int32),
    ]
    assert device_digests([jnp.asarray(a) for a in arrays]) == [host_digest(a) for a in arrays]
    flipped = arrays[0].copy()
    flipped.reshape(-1).view(np.uint8)[7] ^= 0x01
    assert host_digest(flipped) != host_digest(arrays[0])
    swapped = arrays[0].copy().reshape(-1)
    swapped[[0, 1]] = swapped[[1, 0]]
    assert host_digest(swapped) != host_digest(arrays[0].reshape(-1))


HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from js.nn.checkpoint.lock import DirectoryLock
    lock = DirectoryLock(Path(sys.argv[1]), "holder").acquire()
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    lock.release()
    print("released", flush=True)
""")


def _child(script, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(SRC)}
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)], env=env, stdout=subprocess.PIPE, text=True
    )


@pytest.mark.process
@pytest.mark.slow
def test_the_lock_of_a_killed_writer_is_recovered(tmp_path):
    holder = _child(HOLD_LOCK, tmp_path, 600)
    try:
        assert holder.stdout.readline().strip() == "locked"
        os.kill(holder.pid, signal.SIGKILL)
        assert holder.wait(timeout=60) == -signal.SIGKILL
    finally:
        holder.kill()
        holder.stdout.close()
    assert save_checkpoint(tmp_path, {"epoch": 0}) == 0


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from js.nn.checkpoint import save_checkpoint

    class Filled:
        def __init__(self, value): self.w = np.full(100_000, value, np.float32)
        def state_dict(self): return {"w": self.w}
        def load_state_dict(self, state): self.w = state["w"]

    writer = int(sys.argv[2])
    for i in range(3):
        value = writer * 100 + i  # the epoch and the array say who wrote the step
        step = save_checkpoint(sys.argv[1], {"big": Filled(value), "epoch": value},
                               lock_timeout=120)
        print("saved", step, value, flush=True)
""")


@pytest.mark.process
@pytest.mark.slow
def test_two_writers_never_mix_their_steps(tmp_path):
    writers = [_child(WRITER, tmp_path, index) for index in (1, 2)]
    try:
        outputs = [w.communicate(timeout=300)[0] for w in writers]
    finally:
        for w in writers:
            w.kill()
    assert [w.returncode for w in writers] == [0, 0]
    claimed = dict(
        tuple(map(int, line.split()[1:])) for text in outputs for line in text.splitlines()
    )
    assert sorted(claimed) == list(range(6))  # six distinct steps, each told to one writer
    for step, value in claimed.items():
        target = Big(100_000)
        restored = load_checkpoint(tmp_path, {"big": target, "epoch": 0}, which=step)
        assert restored["epoch"] == value
        np.testing.assert_array_equal(target.w, np.full(100_000, value, np.float32))
