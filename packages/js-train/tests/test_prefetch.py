"""Device prefetch (Trainer(prefetch=N)): the same steps, losses, device reads and checkpoints as
the synchronous loop (prefetch=0), with K steps per dispatch and on a 2-device mesh too; an
error in the thread surfaces in fit; a stop joins the thread; ``time/data_wait_s`` shrinks
when the input is made ahead of the steps."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from js_train_testing import RowSource, blobs, slow_row

from js.training import ArrayLoader, Callback, ModelCheckpoint, Trainer, load_checkpoint

HERE = Path(__file__).parent
SRC = [str(p) for p in Path(__file__).resolve().parents[2].glob("*/src")]


def _loaders(x, y):
    return ArrayLoader(x, y, batch_size=8, shuffle=True, seed=3), ArrayLoader(x, y, batch_size=48)


def _columns(history) -> list:
    keep = ("step", "epoch", "train/loss", "train/loss_epoch", "train/accuracy", "val/loss")
    return [{key: row[key] for key in keep if key in row} for row in history]


def _params(task) -> dict:
    return {key: np.asarray(value) for key, value in task.model.state_dict().items()}


def _prefetch_threads() -> list:
    return [t for t in threading.enumerate() if t.name == "js-prefetch"]


@pytest.mark.parametrize("k", [1, 2])
def test_prefetch_trains_the_same_steps_with_the_same_device_reads(make_task, k):
    x, y = blobs()
    runs = {}
    for prefetch in (0, 2):
        task = make_task()
        trainer = Trainer(
            2,
            log_every_n_steps=5,
            val_every_n_steps=7,
            steps_per_execution=k,
            prefetch=prefetch,
            verbose=False,
        )
        runs[prefetch] = trainer.fit(task, *_loaders(x, y)), trainer.transfers, _params(task)
    (history0, transfers0, params0), (history2, transfers2, params2) = runs[0], runs[2]
    assert _columns(history2) == _columns(history0)
    assert transfers2 == transfers0  # no extra device-to-host read
    for key, value in params0.items():
        np.testing.assert_array_equal(params2[key], value, err_msg=key)
    waits = [row["time/data_wait_s"] for row in history2 if "train/loss" in row]
    assert len(waits) == len([row for row in history2 if "train/loss" in row])
    assert all(wait >= 0 for wait in waits)
    assert not _prefetch_threads()


@pytest.mark.parametrize("k", [1, 2])
def test_checkpoint_and_resume_with_prefetch_are_bit_for_bit(tmp_path, make_task, k):
    x, y = blobs()
    straight = make_task()
    options = dict(log_every_n_steps=1, steps_per_execution=k, verbose=False)
    expected = Trainer(2, prefetch=0, **options).fit(straight, *_loaders(x, y))

    checkpoint = ModelCheckpoint(tmp_path, "val/loss", every_n_steps=4)
    Trainer(2, callbacks=[checkpoint], max_steps=17, prefetch=2, **options).fit(
        make_task(), *_loaders(x, y)
    )
    assert checkpoint.last_step == 16  # mid-epoch 1 (12 batches an epoch)
    task, trainer, (train, val) = (
        make_task(seed=9),
        Trainer(2, prefetch=2, **options),
        _loaders(x, y),
    )
    load_checkpoint(
        tmp_path,
        {**task.checkpoint_objects(), "trainer": trainer, "loader": train},  # the loader itself
        which="last",
    )
    assert train.state_dict() == {"epoch": 1, "batch": 4}  # consumed, not prefetched
    history = trainer.fit(task, train, val, resume=True)
    assert _columns(history) == _columns(expected[16:])
    for key, value in _params(straight).items():
        np.testing.assert_array_equal(_params(task)[key], value, err_msg=key)


def test_a_fit_that_ends_mid_epoch_leaves_the_loader_at_the_consumed_batch(make_task):
    x, y = blobs()
    train, _ = _loaders(x, y)
    trainer = Trainer(1, max_steps=5, prefetch=3, verbose=False)
    trainer.fit(make_task(), train)
    assert train.state_dict() == {"epoch": 0, "batch": 5}
    assert trainer.loader_position().state_dict() == {"epoch": 0, "batch": 5}


def _broken_batches(x, y):
    for start in range(0, 24, 8):
        yield x[start : start + 8], y[start : start + 8]
    raise RuntimeError("batch 3 cannot be decoded")


class _StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, task, step):
        if step == self.step:
            trainer.stop("enough")


def test_an_error_in_the_thread_is_raised_by_fit_and_a_stop_joins_the_thread(make_task):
    x, y = blobs()
    trainer = Trainer(max_steps=10, prefetch=2, verbose=False)
    with pytest.raises(RuntimeError, match="batch 3 cannot be decoded") as raised:
        trainer.fit(make_task(), _broken_batches(x, y))
    assert "_broken_batches" in "".join(str(entry) for entry in raised.traceback)
    assert trainer.global_step == 3  # the batches before it were trained
    assert not _prefetch_threads()

    trainer = Trainer(3, callbacks=[_StopAt(2)], prefetch=2, verbose=False)
    trainer.fit(make_task(), ArrayLoader(x, y, batch_size=4))
    assert trainer.global_step == 2 and trainer.stop_reason == "enough"
    assert not _prefetch_threads()
    with pytest.raises(ValueError, match="Trainer: prefetch must be an int >= 0, got -1"):
        Trainer(1, prefetch=-1)


class _SlowStep:
    """A Task whose steps take ``seconds`` of host time (as a step on an accelerator would)."""

    def __init__(self, task, seconds):
        self.task, self.seconds = task, seconds

    def __getattr__(self, name):
        return getattr(self.task, name)

    def training_step(self, model, optimizer, rngs, batch):
        time.sleep(self.seconds)
        return self.task.training_step(model, optimizer, rngs, batch)


def test_data_wait_shrinks_when_input_is_made_ahead_of_the_steps(make_task):
    """Each batch's transform takes about as long as a step: read in the loop, the loop waits
    for it every step; read by 2 grain threads ahead, with prefetch, it hardly waits."""
    grain = pytest.importorskip("grain")
    x, y = blobs(n=168)  # 21 batches: logs at 5, 10, 15, 20, the epoch's row at 21
    source = grain.MapDataset.source(RowSource(x, y)).map(slow_row).batch(8)  # 8 x 4 ms

    def waited(data, prefetch):
        task = _SlowStep(make_task(), 0.032)
        history = Trainer(1, log_every_n_steps=5, prefetch=prefetch, verbose=False).fit(task, data)
        windows = [row for row in history if "time/epoch_s" not in row]
        assert [row["step"] for row in windows] == [5, 10, 15, 20]
        return sum(row["time/data_wait_s"] for row in windows[1:])  # after the first window

    threads = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
    ahead = waited(source.to_iter_dataset(threads), prefetch=2)
    inline = waited(source.to_iter_dataset(grain.ReadOptions(num_threads=0)), prefetch=0)
    assert inline > 0.5 * 15 * 0.032  # 15 steps, each waiting for its batch's transform
    assert ahead / inline < 0.5


@pytest.mark.process
@pytest.mark.slow
def test_prefetch_on_a_2_device_mesh_trains_the_same_steps(tmp_path):
    code = (
        "import jax, numpy as np, js\n"
        "from jax.sharding import Mesh\n"
        "from js.training import ArrayLoader, Trainer\n"
        "from js_train_testing import MLP, blobs, make_optimizer\n"
        "from js.training import Task\n"
        "mesh = Mesh(np.array(jax.devices()), ('data',))\n"
        "x, y = blobs()\n"
        "for k in (1, 2):\n"
        "    runs = []\n"
        "    for prefetch in (0, 2):\n"
        "        model = MLP(rngs=js.Rngs(params=0))\n"
        "        js.shard(model, mesh)\n"
        "        rngs = js.Rngs(dropout=1)\n"
        "        js.shard(rngs, mesh)\n"
        "        task = Task(model, make_optimizer(model), rngs=rngs)\n"
        "        t = Trainer(1, mesh=mesh, steps_per_execution=k, log_every_n_steps=3,\n"
        "                    prefetch=prefetch, verbose=False)\n"
        "        h = t.fit(task, ArrayLoader(x, y, batch_size=8, shuffle=True))\n"
        "        runs.append(([r.get('train/loss') for r in h], t.transfers,\n"
        "                     {k_: np.asarray(v) for k_, v in model.state_dict().items()}))\n"
        "    (l0, t0, p0), (l2, t2, p2) = runs\n"
        "    same = l0 == l2 and t0 == t2 and all(np.array_equal(p0[n], p2[n]) for n in p0)\n"
        "    print(len(jax.devices()), k, same)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), *SRC]),
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["2", "1", "True", "2", "2", "True"]
