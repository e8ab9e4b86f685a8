"""Child process of test_signals.py: the MLP trained by a Trainer with a ModelCheckpoint every
``--every`` steps, printing ``step <n> pid <pid>`` after each step so the test can signal it at
a known moment (a short pause per step paces the run).

    python signal_job.py cut DIR [--self SIGNAL@STEP] [--again]   # stopped by a signal
    python signal_job.py resume DIR OUT.npz [STRAIGHT.npz]  # load DIR's last step, fit on,
        # save the params (and first those of an uninterrupted run)
    python signal_job.py straight OUT.npz     # the uninterrupted run's params

Alone it trains from an ArrayLoader on one device; under ``js.training.launch`` (several
processes) on a mesh of every process's device from grain, each process reading its rows.
``--self SIGNAL@STEP`` makes the process send SIGNAL to itself at STEP (process 1 only in a
job); ``--again`` sends it a second SIGTERM while its stop's save is being written.
``--max-time S`` stops the run by ``Trainer(max_time=S)`` instead (exit 0); in a job process
1's clock stands still, so only process 0's can stop them.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import jax
import numpy as np
from jax.sharding import AxisType
from js_train_testing import MLP, blobs, make_optimizer

import js
from js.training import (
    ArrayLoader,
    Callback,
    ModelCheckpoint,
    Task,
    Trainer,
    init_distributed,
    load_checkpoint,
)

STEPS = 40


class Pace(Callback):
    """Print each step (the test waits for one before signalling), pause, signal itself."""

    def __init__(self, pause: float, self_signal: tuple[int, int] | None, again: bool) -> None:
        self.pause, self.self_signal, self.again = pause, self_signal, again

    def on_step_end(self, trainer, task, step):
        print(f"step {step} pid {os.getpid()}", flush=True)
        if self.self_signal is not None and step == self.self_signal[1]:
            if jax.process_count() == 1 or jax.process_index() == 1:
                os.kill(os.getpid(), self.self_signal[0])
        time.sleep(self.pause)

    def on_save_request(self, trainer, task, request):  # after ModelCheckpoint's: it is writing
        if self.again:
            print(f"second SIGTERM while saving {request.saved}", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)


def build(every: int | None, callbacks=(), seed: int = 0, **options):
    """The task, its training data and a Trainer of STEPS steps (a ModelCheckpoint in
    ``callbacks``, more Trainer ``options``); on a mesh from grain in a job of several
    processes."""
    x, y = blobs(96)
    mesh = None
    if jax.process_count() > 1:
        from js.training.data import process_batches

        mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
        data = process_batches(list(zip(x, y, strict=True)), 16, seed=5).repeat(None)
        model = js.shard(MLP(p=0.0, rngs=js.Rngs(params=seed)), mesh)
    else:
        data = ArrayLoader(x, y, batch_size=16, shuffle=True, seed=5)
        model = MLP(p=0.0, rngs=js.Rngs(params=seed))
    task = Task(model, make_optimizer(model))
    epochs = None if mesh is not None else 100
    trainer = Trainer(
        epochs,
        callbacks,
        max_steps=STEPS,
        mesh=mesh,
        log_every_n_steps=4,
        progress=False,
        verbose=True,
        **options,
    )
    return task, data, trainer


def _local(value):
    shards = getattr(value, "addressable_shards", None)
    return value if shards is None else shards[0].data


def save(path: str, task) -> None:
    if jax.process_index() == 0:
        np.savez(path, **params(task))


def params(task) -> dict[str, np.ndarray]:
    """The model's state on the host (a replicated array's local copy in a job)."""
    state = task.model.state_dict()
    return {k: np.asarray(_local(v)) for k, v in state.items()}


def main() -> None:
    init_distributed()
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["cut", "resume", "straight"])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.05)
    parser.add_argument("--self", dest="self_signal", default=None)
    parser.add_argument("--again", action="store_true")
    parser.add_argument("--max-time", type=float, default=None)
    options = parser.parse_args()
    if options.mode == "straight":
        task, data, trainer = build(None)
        trainer.fit(task, data)
        save(options.paths[0], task)
        return
    checkpoint = ModelCheckpoint(options.paths[0], "train/loss", every_n_steps=options.every)
    if options.mode == "resume":
        if len(options.paths) > 2:
            task, data, trainer = build(None)
            trainer.fit(task, data)
            save(options.paths[2], task)
        task, data, trainer = build(None, seed=7)  # the checkpoint's params win
        objects = {**task.checkpoint_objects(), "trainer": trainer}
        loader = data if jax.process_count() == 1 else trainer.loader_position(data)
        load_checkpoint(options.paths[0], {**objects, "loader": loader}, which="last")
        print(f"resumed at step {trainer.global_step}", flush=True)
        trainer.fit(task, data, resume=True)
        save(options.paths[1], task)
        return
    self_signal = None
    if options.self_signal is not None:
        name, _, step = options.self_signal.partition("@")
        self_signal = (int(getattr(signal, name)), int(step))
    pace = Pace(options.pause, self_signal, options.again)
    task, data, trainer = build(options.every, [checkpoint, pace], max_time=options.max_time)
    if options.max_time is not None and jax.process_index() == 1:
        trainer._clock = lambda: 0.0  # never over here: process 0's clock decides for both
    print(f"ready pid {os.getpid()}", flush=True)
    trainer.fit(task, data)
    if options.max_time is not None and trainer.should_stop:
        print(f"max_time stopped the fit at step {trainer.global_step}", flush=True)
        return
    print("finished without a signal", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
