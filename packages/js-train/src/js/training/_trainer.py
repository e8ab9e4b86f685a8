"""Trainer: the epoch loop around a Task's compiled steps."""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

import js

from ._callbacks import Callback, check_monitor
from ._checks import check_int, is_int
from ._mesh import check_mesh, on_mesh
from ._progress import ProgressBar, format_metrics


@jax.jit
def _accumulate(totals, loss, count, correct):
    """Add the count-weighted loss, count and correct of one step (scalars) or of K steps
    (stacked, each ``[K]``) to the running totals, on the device."""
    new = {"loss": totals["loss"] + jnp.sum(loss * count),
           "count": totals["count"] + jnp.sum(count)}
    if correct is not None:
        new["correct"] = totals["correct"] + jnp.sum(correct)
    return new


def _task_step(model, optimizer, rngs, batch, *, task):
    """``task.training_step(batch)`` on the objects passed in (the scan carry), not the task's."""
    view = copy.copy(task)
    view.model, view.optimizer, view.rngs = model, optimizer, rngs
    return view.training_step(batch)


def _stack(group: list):
    """K batches of one structure and shape stacked on a new leading axis, or None."""
    leaves = [jax.tree.flatten(b) for b in group]
    first_leaves, treedef = leaves[0]
    for other, other_def in leaves[1:]:
        if other_def != treedef or any(
            np.shape(a) != np.shape(b) for a, b in zip(first_leaves, other, strict=True)
        ):
            return None
    # Device batches stay on the device: np.stack would wait for each and copy it to the host.
    return jax.tree.map(
        lambda *xs: (jnp if any(isinstance(x, jax.Array) for x in xs) else np).stack(xs), *group)


def _zeros(has_correct: bool) -> dict:
    totals = {"loss": jnp.zeros((), jnp.float32), "count": jnp.zeros((), jnp.float32)}
    if has_correct:
        totals["correct"] = jnp.zeros((), jnp.float32)
    return totals


def _check_step_metrics(metrics, where: str) -> None:
    if not isinstance(metrics, Mapping) or "loss" not in metrics or "count" not in metrics:
        got = sorted(metrics) if isinstance(metrics, Mapping) else type(metrics).__name__
        raise KeyError(
            f"{where} must return a dict with 'loss' and 'count' (and optionally 'correct'); "
            f"got {got}. Fix: return e.g. {{'loss': loss, 'count': batch_size}}."
        )


def _summary(host: dict, prefix: str) -> dict[str, float]:
    count = float(host["count"])
    out = {f"{prefix}/loss": float(host["loss"]) / max(count, 1.0), f"{prefix}/count": count}
    if "correct" in host:
        out[f"{prefix}/accuracy"] = float(host["correct"]) / max(count, 1.0)
    return out


def _check_monitors(callbacks, has_val: bool) -> None:
    """Fail before training when a callback monitors a metric no epoch can produce.

    The Trainer's metrics are ``epoch``, ``time/epoch_s`` and ``<split>/loss``, ``/count`` and
    ``/accuracy`` (the last only when steps return ``correct``, known after the first step)
    for ``train`` and, with validation data, ``val``.
    """
    splits = ("train", "val") if has_val else ("train",)
    names = ["epoch", "time/epoch_s"] + [f"{split}/{metric}" for split in splits
                                         for metric in ("loss", "count", "accuracy")]
    for callback in callbacks:
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str):
            check_monitor(type(callback).__name__, monitor, names)


def _check_data(data, name: str, epochs: int) -> None:
    if not hasattr(data, "__iter__"):
        raise TypeError(f"fit: {name} must be an iterable of batches, got {type(data).__name__}")
    if epochs > 1 and iter(data) is data:
        raise TypeError(
            f"fit: {name} is a one-shot iterator (a generator?), which would be empty after the "
            "first epoch. Fix: pass a re-iterable, such as a list or an ArrayLoader."
        )


class Trainer:
    """Run epochs of a Task's steps, aggregate metrics on the device, report them.

    ``fit`` never differentiates: ``task.training_step`` owns the update. Per epoch it sums
    ``loss * count``, ``count`` and (when present) ``correct`` on the device and reads them to
    the host once, at the epoch's end (and at most once a second for a progress bar drawn on a
    terminal), so the next step is dispatched while the previous one still runs.
    ``transfers`` lists the device-to-host reads of each epoch; ``progress_interval_s`` (1 s)
    is the least time between two reads for the progress bar.

    Args:
        max_epochs: epochs to run (>= 1), counted from 0.
        callbacks: :class:`Callback` objects (EarlyStopping, ModelCheckpoint, ...).
        run: where metrics go: any object with ``log(metrics, step)`` and optionally
            ``close()`` (e.g. :class:`CSVRun`), called once per epoch with the dict the
            callbacks get.
        progress: draw a progress bar; ``None`` draws one only when stdout is a terminal.
        verbose: print one line of metrics per epoch.
        steps_per_execution: run K training steps per dispatch (Keras' option): K batches are
            stacked and the task's ``training_step`` runs K times inside one ``lax.scan``
            (``js.scan_steps``) under one ``js.jit``. Losses and parameters equal those of K
            separate steps; metrics are still summed per step. A group whose batches differ in
            shape (the last, smaller batch) and the leftover batches of an epoch run one at a
            time. ``training_step`` must reach the model, optimizer and rngs through
            ``task.model``, ``task.optimizer`` and ``task.rngs``. Validation is unaffected.
        unroll: passed to ``lax.scan`` through ``js.scan_steps`` when ``steps_per_execution``
            is above 1: ``True`` (the default) unrolls the K steps into one straight-line
            program, ``False`` (or 1) keeps a loop, an int ``n`` unrolls ``n`` steps per loop
            iteration. XLA on the CPU runs convolution gradients inside a loop very slowly
            (digits CNN, K=8: 6.4 s an epoch looped, 0.12 s unrolled, 0.18 s with K=1), while
            a loop compiles faster for small dense steps and large K (an MLP with K=32: 1.3 s
            to compile looped, 15 s unrolled, at about the same speed), so pass
            ``unroll=False`` there.
        mesh: a ``jax.sharding.Mesh`` to train on, or None (one device). Every train and
            validation batch is split over ``batch_axis`` with ``js.shard_batch`` as it enters a
            step; place the model (and ``Rngs``) with ``js.shard`` before building the
            optimizer. Metrics are still summed on the devices and read once per epoch.
        batch_axis: the mesh axis the batches are split over.

    Example:
        >>> trainer = Trainer(max_epochs=5)
        >>> history = trainer.fit(task, ArrayLoader(x, y, batch_size=32))  # doctest: +SKIP
        >>> history[-1]["train/loss"]  # doctest: +SKIP
    """

    progress_interval_s = 1.0

    def __init__(self, max_epochs: int, callbacks=(), run=None, *, progress: bool | None = None,
                 verbose: bool = True, steps_per_execution: int = 1, unroll: int | bool = True,
                 mesh=None, batch_axis: str = "data"):
        max_epochs = check_int("Trainer max_epochs", max_epochs, 1)
        check_mesh(mesh, batch_axis)
        callbacks = tuple(callbacks)
        for callback in callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(
                    f"Trainer callbacks must be Callback instances, got {type(callback).__name__}"
                )
        paths = [str(c.path) for c in callbacks if hasattr(c, "path")]
        if len(paths) != len(set(paths)):
            raise ValueError(
                f"Trainer got two checkpoint callbacks writing to the same path ({paths}): they "
                "would overwrite each other. Fix: give each its own directory."
            )
        if run is not None and not callable(getattr(run, "log", None)):
            raise TypeError(f"Trainer run must have a log(metrics, step) method, got {run!r}")
        steps_per_execution = check_int("Trainer steps_per_execution", steps_per_execution, 1)
        if not isinstance(unroll, bool) and not (is_int(unroll) and unroll >= 1):
            raise TypeError(f"Trainer unroll must be True, False or an int >= 1 (steps unrolled "
                            f"per loop iteration), got {unroll!r}")
        self.max_epochs = max_epochs
        self.mesh, self.batch_axis = mesh, batch_axis
        self.steps_per_execution = steps_per_execution
        self.unroll = unroll
        self._many: dict = {}
        self.callbacks = callbacks
        self.run = run
        self.progress = progress
        self.verbose = verbose
        self.history: list[dict[str, float]] = []
        self.transfers: list[int] = []
        self.start_epoch = 0
        self.should_stop = False
        self.stop_reason: str | None = None

    def stop(self, reason: str = "stopped by a callback") -> None:
        """Ask ``fit`` to end after the current epoch (callbacks call this)."""
        self.should_stop, self.stop_reason = True, reason

    def _hook(self, name: str, *args) -> None:
        for callback in self.callbacks:
            getattr(callback, name)(self, *args)

    def _groups(self, data, many):
        """``(run, batch, steps)`` per dispatch: K stacked batches through ``many`` where it can."""
        k = self.steps_per_execution
        if many is None:  # fit passes one only when k > 1
            yield from ((None, batch, 1) for batch in data)
            return
        group = []
        for batch in data:
            group.append(batch)
            if len(group) == k:
                stacked = _stack(group)
                if stacked is None:
                    yield from ((None, b, 1) for b in group)
                else:
                    yield many, stacked, k
                group = []
        yield from ((None, b, 1) for b in group)

    def _many_step(self, task):
        """``batches -> stacked metrics``: K of ``task.training_step`` in one dispatch."""
        if id(task) not in self._many:  # the entry holds the task, so its id is not reused
            scanned = js.jit(js.scan_steps(functools.partial(_task_step, task=task),
                                           unroll=self.unroll))
            self._many[id(task)] = (task, scanned)
        scanned = self._many[id(task)][1]
        return lambda batches: scanned(task.model, task.optimizer, task.rngs, batches)

    def _epoch(self, step, data, label: str, many=None) -> tuple[dict, int]:
        """Run ``step`` over ``data``; return the host totals and the device reads it took."""
        bar = ProgressBar(label, len(data) if hasattr(data, "__len__") else None,
                          enabled=self.progress, interval_s=self.progress_interval_s)
        totals, reads, steps = None, 0, 0
        data = on_mesh(data, self.mesh, self.batch_axis)  # where every batch enters a step
        for run, batch, count in self._groups(data, many):
            metrics = step(batch) if run is None else run(batch)
            if totals is None:
                _check_step_metrics(metrics, label)
                totals = _zeros("correct" in metrics)
            totals = _accumulate(totals, metrics["loss"], metrics["count"],
                                 metrics.get("correct"))
            steps += count
            if bar.due():
                host = jax.device_get(totals)
                reads += 1
                bar.update(steps, float(host["loss"]) / max(float(host["count"]), 1.0))
        bar.close()
        if totals is None:
            raise ValueError(f"{label}: the data yielded no batches. Fix: check its length.")
        return jax.device_get(totals), reads + 1

    def fit(self, task, train_data, val_data=None, *, start_epoch: int = 0) -> list[dict]:
        """Train ``task`` for epochs ``start_epoch .. max_epochs - 1``; return the history.

        Args:
            task: a :class:`Task` (or any object with ``training_step``, ``validation_step``
                and ``set_phase``).
            train_data: an iterable of batches (tuples or dicts of arrays), iterated once per
                epoch; ``set_epoch(epoch)`` is called first when it has one (ArrayLoader).
            val_data: an optional iterable of validation batches, run after each epoch.
            start_epoch: the first epoch's number, to continue a run restored with
                :func:`load_checkpoint` (its data order and epoch numbers continue too).

        Returns the history: one dict of floats per epoch with ``epoch``, ``train/loss``,
        ``train/count``, ``train/accuracy`` (when steps return ``correct``), the same under
        ``val/`` with validation data, and ``time/epoch_s``.
        """
        start_epoch = check_int("fit start_epoch", start_epoch, 0)
        _check_data(train_data, "train_data", self.max_epochs - start_epoch)
        if val_data is not None:
            _check_data(val_data, "val_data", self.max_epochs - start_epoch)
        _check_monitors(self.callbacks, val_data is not None)
        self.history, self.transfers = [], []
        self.should_stop, self.stop_reason = False, None
        self.start_epoch = start_epoch  # callbacks read it in on_fit_start (ModelCheckpoint)
        self._hook("on_fit_start", task)
        try:
            for epoch in range(start_epoch, self.max_epochs):
                started = time.perf_counter()
                self._hook("on_epoch_start", task, epoch)
                if hasattr(train_data, "set_epoch"):
                    train_data.set_epoch(epoch)
                task.set_phase("train")
                many = self._many_step(task) if self.steps_per_execution > 1 else None
                host, reads = self._epoch(task.training_step, train_data,
                                          f"epoch {epoch} train", many)
                metrics = {"epoch": float(epoch), **_summary(host, "train")}
                if val_data is not None:
                    task.set_phase("eval")
                    host, val_reads = self._epoch(task.validation_step, val_data,
                                                  f"epoch {epoch} val")
                    reads += val_reads
                    metrics.update(_summary(host, "val"))
                    self._hook("on_validation_end", task, metrics)
                metrics["time/epoch_s"] = time.perf_counter() - started
                self.history.append(metrics)
                self.transfers.append(reads)
                if self.run is not None:
                    self.run.log(metrics, step=epoch)
                if self.verbose:
                    print(format_metrics(metrics), flush=True)
                self._hook("on_epoch_end", task, metrics)
                if self.should_stop:
                    if self.verbose:
                        print(f"stopping: {self.stop_reason}", flush=True)
                    break
        finally:
            self._hook("on_fit_end", task)
            if self.run is not None and callable(getattr(self.run, "close", None)):
                self.run.close()
        return self.history
