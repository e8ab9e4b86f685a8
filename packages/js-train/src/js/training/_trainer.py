"""Trainer: epochs or steps of a Task's compiled steps, metrics summed on the device.

The schedule has two clocks: the epoch (one pass over the training data) and the global step
(one call of ``task.training_step``, i.e. one batch). Training ends after ``max_epochs`` epochs
or ``max_steps`` steps, whichever comes first; validation runs at every epoch end and every
``val_every_n_steps`` steps; the train metrics since the last log are read every
``log_every_n_steps`` steps. Everything the Trainer reports is one row per step (a dict of
floats with ``step`` and ``epoch``), in ``history``, sent to the run and the callbacks.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

import js

from ._checks import check_int, is_int
from ._mesh import check_mesh
from ._options import check_callbacks, check_data, check_monitors, check_options
from ._progress import Display
from ._task import check_task, scanned_training_step
from ._totals import Totals, rates, stack

# Columns of a row in this order (stable within a group): epoch, step, train/, val/, lr, time/.
_ORDER = {"epoch": 0, "step": 1, "train": 2, "val": 3, "lr": 4, "time": 5}
_OPTIONAL = ("max_steps", "val_every_n_steps", "log_every_n_steps", "limit_val_batches")


def _due(every: int | None, before: int, after: int) -> bool:
    """Whether a multiple of ``every`` lies in ``(before, after]`` (a dispatch's steps)."""
    return every is not None and after // every > before // every


def _check_position(data, epoch: int) -> None:
    """A mid-epoch resume needs the loader restored to the same epoch as the Trainer."""
    state = data.state_dict() if callable(getattr(data, "state_dict", None)) else None
    if state is not None and int(state.get("epoch", epoch)) != epoch:
        raise ValueError(
            f"fit(resume=True): the Trainer resumes epoch {epoch} mid-way, but train_data is "
            f"at epoch {int(state['epoch'])}, batch {int(state.get('batch', 0))}. Fix: restore "
            "the loader from the same checkpoint: load_checkpoint(path, {..., 'trainer': "
            "trainer, 'loader': loader})."
        )


class Trainer:
    """Run a Task's steps by epochs and/or steps; aggregate metrics on the device; report.

    ``fit`` never differentiates: ``task.training_step(model, optimizer, rngs, batch)`` owns
    the update. The running ``loss * count``, ``count`` and (when present) ``correct`` are
    summed on the device; they are read to the host (``jax.device_get``, one read) only at a
    log step, an epoch's end and a progress redraw (at most one per ``progress_interval_s``,
    1 s, and only on a terminal), so the next step is dispatched while the previous one runs.
    ``transfers`` counts those reads in the last ``fit``/``validate``/``predict``: one per log,
    one per epoch end that is not also a log step, one per validation, plus one per
    ``ModelCheckpoint(every_n_steps=...)`` save (the totals in its payload).

    Args:
        max_epochs: epochs to run (>= 1), counted from 0; None for no epoch limit.
        callbacks: :class:`Callback` objects (EarlyStopping, ModelCheckpoint, ...).
        run: where the rows go: any object with ``log(metrics, step)`` and optionally
            ``close()`` (:class:`CSVRun`, :class:`TensorBoardRun`); ``step`` is the global step.
        max_steps: stop after this many training steps (batches), even mid-epoch; with
            ``max_epochs=None`` the training data may be an endless iterable.
        val_every_n_steps: also validate every this many steps (validation always runs at an
            epoch's end when ``val_data`` is given).
        log_every_n_steps: read and report the train metrics since the last log every this
            many steps (``train/*``, ``time/samples_per_s``, ``lr`` with a schedule). None:
            only at epoch ends.
        limit_val_batches: validate on at most this many batches.
        progress: draw a live progress display (rich); ``None`` draws one only when stdout is
            a terminal.
        verbose: print the metrics of each row (a table on a terminal, a line otherwise).
        steps_per_execution: run K training steps per dispatch: K batches are stacked and
            ``task.training_step`` runs K times inside one ``lax.scan`` (``js.scan_steps``)
            under one ``js.jit``; parameters and losses equal those of K separate steps. A group
            whose batches differ in shape and the batches before a log, validation or the
            last step run one at a time, so those happen on their exact steps; a callback's
            step schedule (``ModelCheckpoint(every_n_steps)``) fires at the end of the
            dispatch that reaches it.
        unroll: passed to ``lax.scan`` when ``steps_per_execution`` is above 1: ``True``
            unrolls the K steps (fast for convolutions on the CPU), ``False`` keeps a loop
            (faster to compile for small dense steps and large K), an int ``n`` unrolls ``n``.
        mesh: a ``jax.sharding.Mesh`` to train on, or None (one device). Every train,
            validation and predict batch is split over ``batch_axis`` with ``js.shard_batch``
            as it enters a step; place the model (and ``Rngs``) with ``js.shard`` before
            building the optimizer. Metrics are still summed on the devices.
        batch_axis: the mesh axis the batches are split over.
        compilation_cache: True (the default) turns on JAX's persistent compilation cache
            with ``js.enable_compilation_cache()`` when ``fit``, ``validate`` or ``predict``
            starts, so a later run loads its compiled steps instead of compiling them; a path
            uses that directory; False leaves the cache as it is. ``JS_COMPILATION_CACHE=0`` in
            the environment turns it off everywhere.

    Example:
        >>> trainer = Trainer(max_steps=1000, val_every_n_steps=200, log_every_n_steps=50)
        >>> history = trainer.fit(task, ArrayLoader(x, y, batch_size=32), val)  # doctest: +SKIP
        >>> history[-1]["step"], history[-1]["val/loss"]  # doctest: +SKIP
    """

    progress_interval_s = 1.0

    def __init__(self, max_epochs: int | None = None, callbacks=(), run=None, *,
                 max_steps: int | None = None, val_every_n_steps: int | None = None,
                 log_every_n_steps: int | None = None, limit_val_batches: int | None = None,
                 progress: bool | None = None, verbose: bool = True,
                 steps_per_execution: int = 1, unroll: int | bool = True,
                 mesh=None, batch_axis: str = "data",
                 compilation_cache: bool | str | os.PathLike = True):
        if max_epochs is not None:
            max_epochs = check_int("Trainer max_epochs", max_epochs, 1)
        options = check_options(max_epochs, dict(zip(_OPTIONAL, (
            max_steps, val_every_n_steps, log_every_n_steps, limit_val_batches), strict=True)))
        callbacks = tuple(callbacks)
        check_callbacks(callbacks)
        if run is not None and not callable(getattr(run, "log", None)):
            raise TypeError(f"Trainer run must have a log(metrics, step) method, got {run!r}")
        steps_per_execution = check_int("Trainer steps_per_execution", steps_per_execution, 1)
        if not isinstance(unroll, bool) and not (is_int(unroll) and unroll >= 1):
            raise TypeError(f"Trainer unroll must be True, False or an int >= 1 (steps unrolled "
                            f"per loop iteration), got {unroll!r}")
        check_mesh(mesh, batch_axis)
        if not isinstance(compilation_cache, (bool, str, os.PathLike)):
            raise TypeError(
                "Trainer compilation_cache must be True, False or a directory path, got "
                f"{type(compilation_cache).__name__}. Fix: compilation_cache=False to leave "
                "JAX's cache alone, or a path such as '~/.cache/js/jax'"
            )
        self.compilation_cache = compilation_cache
        self.max_epochs = max_epochs
        self.mesh, self.batch_axis = mesh, batch_axis
        self.max_steps = options["max_steps"]
        self.val_every_n_steps = options["val_every_n_steps"]
        self.log_every_n_steps = options["log_every_n_steps"]
        self.limit_val_batches = options["limit_val_batches"]
        self.steps_per_execution, self.unroll = steps_per_execution, unroll
        self.callbacks, self.run = callbacks, run
        self.progress, self.verbose = progress, verbose
        self.history: list[dict[str, float]] = []
        self.transfers = 0
        self.epoch = self.start_epoch = 0
        self.global_step = self.start_step = 0
        self.train_data, self._validated_at = None, None
        self._totals = Totals()
        self.should_stop, self.stop_reason = False, None

    # -- the loop ------------------------------------------------------------------------------

    def fit(self, task, train_data, val_data=None, *, start_epoch: int = 0,
            resume: bool = False) -> list[dict]:
        """Train ``task`` until ``max_epochs`` or ``max_steps``; return the history.

        Args:
            task: a :class:`Task` (or any object with ``training_step(model, optimizer, rngs,
                batch)``, ``validation_step(model, batch)``, ``set_phase`` and the attributes
                ``model``, ``optimizer`` and ``rngs``).
            train_data: an iterable of batches (tuples or dicts of arrays), iterated once per
                epoch; ``set_epoch(epoch)`` is called first when it has one (ArrayLoader).
            val_data: an optional iterable of validation batches.
            start_epoch: the first epoch's number, to continue from an epoch-end checkpoint
                (``restored['epoch'] + 1``); the global step starts at ``start_epoch *
                len(train_data)`` (0 without a length).
            resume: continue from the position this Trainer was restored to by
                :func:`load_checkpoint` (``'trainer'`` in the objects, saved by
                ``ModelCheckpoint(every_n_steps=...)``), mid-epoch included: its epoch, step
                and running totals, with the loader's own position (``'loader'``).

        Returns the history: one dict of floats per reported step, with ``step``, ``epoch``,
        ``train/loss``, ``train/count``, ``train/accuracy`` (when steps return ``correct``),
        ``time/samples_per_s``, ``lr`` (with a schedule), ``val/...`` after a validation and
        ``time/epoch_s`` at an epoch's end (its train metrics then cover the whole epoch).
        """
        check_task(task)
        start_epoch = check_int("fit start_epoch", start_epoch, 0)
        self._enable_cache()
        several = self.max_epochs is None or self.max_epochs - start_epoch > 1
        check_data(train_data, "train_data", several and self.max_epochs is not None)
        if val_data is not None:
            check_data(val_data, "val_data", several)
        check_monitors(self.callbacks, val_data is not None)
        self._start(train_data, start_epoch, resume)
        display = Display(enabled=self.progress, interval_s=self.progress_interval_s)
        many = None
        if self.steps_per_execution > 1:
            many = scanned_training_step(task, self.unroll)
        self._hook("on_fit_start", task)
        try:
            while not self._finished() and not self.should_stop:
                mid_epoch = resume and self.global_step > self._totals.epoch_start_step
                self._hook("on_epoch_start", task, self.epoch)
                if hasattr(train_data, "set_epoch") and not mid_epoch:
                    train_data.set_epoch(self.epoch)
                task.set_phase("train")
                display.begin(f"epoch {self.epoch}", self._bar_total(train_data, mid_epoch))
                ran_out, last = True, False
                for run, batch, n in self._groups(train_data, many):
                    before = self.global_step
                    self._totals.add(run(task, batch))
                    self.global_step += n
                    display.advance(n, self._running_loss)
                    # The epoch's last step (or max_steps) is reported by the epoch's row.
                    last = self._step_limit() or self._epoch_done(train_data)
                    if not last:
                        self._step_end(task, val_data, before, display)
                        self._hook("on_step_end", task, self.global_step)
                    if self._step_limit() or self.should_stop:
                        ran_out = False  # the epoch ends early; a resume would continue it
                        break
                self._epoch_end(task, val_data, display, ran_out)
                if last:  # after the epoch's row: a checkpoint here resumes at the next epoch
                    self._hook("on_step_end", task, self.global_step)
                resume = False
        finally:
            display.close()
            self._hook("on_fit_end", task)
            if self.run is not None and callable(getattr(self.run, "close", None)):
                self.run.close()
        if self.should_stop and self.verbose:
            print(f"stopping: {self.stop_reason}", flush=True)
        return self.history

    def _step_end(self, task, val_data, before: int, display) -> None:
        """After a dispatch that took the global step from ``before``: the validation and the
        log due in those steps, as one row."""
        row = {}
        if val_data is not None and _due(self.val_every_n_steps, before, self.global_step):
            row.update(self._validation(task, val_data, display))
            self._validated_at = self.global_step
            task.set_phase("train")
        if _due(self.log_every_n_steps, before, self.global_step):
            row.update(self._totals.window(self, task))
        if row:
            self._report(task, row, display)

    def _epoch_end(self, task, val_data, display, ran_out: bool) -> None:
        """The epoch's row: its train metrics and time, and a validation when there is data.
        When the data ran out, the next epoch starts; else (max_steps, a stop) the totals
        stay, so a resumed fit continues this epoch."""
        if self._totals.empty_epoch():
            raise ValueError(f"epoch {self.epoch} train: the data yielded no batches. Fix: "
                             "check its length.")
        row = self._totals.epoch_summary(self, task)
        display.end()
        if val_data is not None and self._validated_at != self.global_step:
            row.update(self._validation(task, val_data, display))
        row = self._report(task, row, display, epoch_end=True)
        self._hook("on_epoch_end", task, row)
        if ran_out:
            self.epoch += 1
            self._totals = Totals(epoch_start_step=self.global_step)

    def _report(self, task, row: dict, display, *, epoch_end: bool = False) -> dict:
        row = {"epoch": float(self.epoch), "step": float(self.global_step), **row}
        if self.history and self.history[-1]["step"] == row["step"]:
            row = {**self.history.pop(), **row}  # one row per step: the epoch's end joins in
        row = dict(sorted(row.items(), key=lambda item: _ORDER.get(item[0].split("/")[0], 2)))
        self.history.append(row)
        if "val/loss" in row:
            self._hook("on_validation_end", task, row)
        if self.run is not None:
            self.run.log(row, step=self.global_step)
        if self.verbose:
            display.metrics(row, final=epoch_end)
        return row

    # -- evaluation ----------------------------------------------------------------------------

    def validate(self, task, data) -> dict[str, float]:
        """Run ``task.validation_step`` over ``data`` (up to ``limit_val_batches``); return
        ``{'val/loss':, 'val/count':[, 'val/accuracy':]}`` after one device read."""
        check_task(task)
        self._enable_cache()
        check_data(data, "val_data", False)
        self.transfers = 0
        return self._validation(task, data, Display(enabled=False))

    def predict(self, task, data) -> np.ndarray:
        """``task.predict_step(model, batch)`` over ``data`` in eval mode, the outputs
        concatenated along the first axis and read to the host once (NumPy)."""
        check_task(task)
        self._enable_cache()
        check_data(data, "data", False)
        self.transfers = 0
        task.set_phase("eval")
        outputs = [task.predict_step(task.model, self._to_device(b)) for b in data]
        if not outputs:
            raise ValueError("predict: the data yielded no batches. Fix: check its length.")
        self.transfers += 1
        return jax.device_get(jax.tree.map(lambda *xs: jnp.concatenate(xs), *outputs))

    def _validation(self, task, data, display) -> dict[str, float]:
        task.set_phase("eval")
        totals = None
        batches = itertools.islice(data, self.limit_val_batches)
        for batch in batches:
            metrics = task.validation_step(task.model, self._to_device(batch))
            totals = Totals.accumulate(totals, metrics, "validation_step")
        if totals is None:
            raise ValueError("validation: the data yielded no batches. Fix: check its length.")
        self.transfers += 1
        return rates(jax.device_get(totals), "val")

    # -- pieces --------------------------------------------------------------------------------

    def _enable_cache(self) -> None:
        """The persistent compilation cache, before the first step compiles (process-wide)."""
        if self.compilation_cache is not False:
            js.enable_compilation_cache(
                None if self.compilation_cache is True else self.compilation_cache
            )

    def _to_device(self, batch):
        """The one place every train, validation and predict batch passes before its step:
        split over the mesh's batch axis when there is a mesh, else left as it is."""
        if self.mesh is None:
            return batch
        return js.shard_batch(batch, self.mesh, self.batch_axis)

    def _groups(self, data, many):
        """``(run, batch, steps)`` per dispatch: K stacked batches through ``many`` where the
        shapes agree and no log, validation or the last step falls inside the group."""
        k = self.steps_per_execution

        def one(task, batch):
            return task.training_step(task.model, task.optimizer, task.rngs, batch)

        def several(task, batches):
            return many(task.model, task.optimizer, task.rngs, batches)

        group = []
        for batch in map(self._to_device, data):
            if many is None or self._room() < k:
                yield from ((one, b, 1) for b in group + [batch])
                group = []
                continue
            group.append(batch)
            if len(group) == k:
                stacked = stack(group)
                yield from [(several, stacked, k)] if stacked is not None else (
                    (one, b, 1) for b in group)
                group = []
        yield from ((one, b, 1) for b in group)

    def _epoch_done(self, data) -> bool:
        """Whether the step just run was the last batch of data with a length."""
        length = len(data) if hasattr(data, "__len__") else None
        return self.global_step - self._totals.epoch_start_step == length

    def _running_loss(self) -> float:
        return self._totals.running_loss(self)

    def _room(self) -> int:
        """Steps until the next log, validation or the last step (large when none)."""
        room = [self.max_steps - self.global_step] if self.max_steps else []
        for every in (self.log_every_n_steps, self.val_every_n_steps):
            if every is not None:
                room.append(every - self.global_step % every)
        return min(room, default=1 << 30)

    def _start(self, train_data, start_epoch: int, resume: bool) -> None:
        self.history, self.transfers = [], 0
        self.should_stop, self.stop_reason = False, None
        self.train_data, self._validated_at = train_data, None
        if resume and self.global_step > self._totals.epoch_start_step:
            _check_position(train_data, self.epoch)
        if not resume:
            per_epoch = len(train_data) if hasattr(train_data, "__len__") else 0
            self.epoch, self.global_step = start_epoch, start_epoch * per_epoch
            self._totals = Totals(epoch_start_step=self.global_step)
        # callbacks read these in on_fit_start (ModelCheckpoint)
        self.start_epoch, self.start_step = self.epoch, self.global_step
        self._totals.restart_clock(self.global_step)

    def _bar_total(self, data, mid_epoch: bool) -> int | None:
        if self.max_epochs is None and self.max_steps is not None:
            return self.max_steps - self.global_step
        total = len(data) if hasattr(data, "__len__") else None
        if total is not None and mid_epoch:
            total -= self.global_step - self._totals.epoch_start_step
        return total

    def _finished(self) -> bool:
        return (self.max_epochs is not None and self.epoch >= self.max_epochs) or self._step_limit()

    def _step_limit(self) -> bool:
        return self.max_steps is not None and self.global_step >= self.max_steps

    def stop(self, reason: str = "stopped by a callback") -> None:
        """Ask ``fit`` to end: after the current step from a step or validation hook, after
        the epoch from ``on_epoch_end`` (EarlyStopping)."""
        self.should_stop, self.stop_reason = True, reason

    def _hook(self, name: str, *args) -> None:
        for callback in self.callbacks:
            getattr(callback, name)(self, *args)

    # -- checkpointing the position ------------------------------------------------------------

    def state_dict(self) -> dict[str, np.ndarray]:
        """The position of a fit, for mid-epoch resume: ``epoch``, ``step``, the step the epoch
        started at, and the epoch's running totals (``loss`` (sum of ``loss * count``),
        ``count``, ``correct``, ``has_correct``), read from the device once."""
        return self._totals.state_dict(self)

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a :meth:`state_dict`; ``fit(..., resume=True)`` continues from it."""
        self.epoch, self.global_step = int(state["epoch"]), int(state["step"])
        self._totals = Totals.from_state(state)
