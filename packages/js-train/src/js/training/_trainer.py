"""Trainer: epochs or steps of a Task's compiled steps, metrics summed on the device.

Two clocks: the epoch (one pass over the data) and the global step (one batch). Training ends
after ``max_epochs`` or ``max_steps``, whichever comes first. Everything the Trainer reports is
one row per step (floats with ``step`` and ``epoch``), in ``history``, the run and the hooks.
"""

from __future__ import annotations

import datetime
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from jax.sharding import Mesh

from js._checks import check_int, check_mesh

from ._callbacks import Callback, SaveRequest
from ._limits import MaxTime
from ._loop import Hooks, fit_parts, predictions, validation
from ._options import (
    check_callbacks,
    check_compilation_cache,
    check_eval_call,
    check_fit_call,
    check_max_time,
    check_on_nonfinite,
    check_options,
    check_resume,
    check_unroll,
    installed_callbacks,
)
from ._perf import PerfColumns, check_perf_options
from ._profile import check_profile
from ._protocol import Boundary
from ._quiet import quiet_library_logs
from ._runs import Run
from ._schedule import Position
from ._signals import check_save_on_signal
from ._task import Task
from ._totals import NonFinite, Totals
from .data._grain import grain_kind
from .data._positions import ArrayPosition, GrainPosition
from .data._train_data import TrainData

_OPTIONAL = ("max_steps", "val_every_n_steps", "log_every_n_steps", "limit_val_batches")


class Trainer:
    """Run a Task's steps by epochs and/or steps; aggregate metrics on the device; report.

    ``fit`` never differentiates: ``task.training_step(model, optimizer, rngs, batch)`` owns
    the update. The running ``loss * count``, ``count`` and ``correct`` are summed on the
    device and read (one ``jax.device_get``) only at a log, an epoch's end, a validation, a step
    save and a progress redraw (one per ``progress_interval_s``); ``transfers`` counts them.

    ``fit`` is the loop; each option that stops, saves or measures is a callback the
    constructor installs after ``callbacks`` (their docstrings say the details): ``profile``
    (:class:`~._profile.ProfileSteps`), ``perf_metrics`` (:class:`~._perf.PerfColumns`),
    ``on_nonfinite`` (:class:`~._limits.NonFiniteGuard`), ``max_time``
    (:class:`~._limits.MaxTime`), the stop signals and ``save_on_signal``
    (:class:`~._limits.StopOnSignal`).

    Args:
        max_epochs: epochs to run (>= 1), counted from 0; None for no epoch limit.
        callbacks: :class:`Callback` objects (EarlyStopping, ModelCheckpoint, ...).
        run: where the rows go: any object with ``log(metrics, step)`` (``step`` the global
            step) and optionally ``close()`` (:class:`CSVRun`, :class:`TensorBoardRun`).
        max_steps: stop after this many training steps (batches), even mid-epoch; with
            ``max_epochs=None`` the training data may be endless.
        val_every_n_steps: also validate every this many steps (validation always runs at an
            epoch's end when ``val_data`` is given).
        log_every_n_steps: report the train metrics since the last log every this many
            steps; None: only at epoch ends.
        limit_val_batches: validate on at most this many batches.
        progress: draw a live progress display (rich); ``None``: only on a terminal.
        verbose: print each row for a person (:func:`~._progress.format_metrics`: units, 4
            significant digits, the main columns; the run and the history keep them all).
        steps_per_execution: K training steps per dispatch: K stacked batches through
            ``task.training_step`` inside one ``lax.scan`` (``js.scan_steps``) under one
            ``js.jit``, with the results of K separate steps (see ``_loop.Feed`` for the
            batches that run one at a time).
        unroll: ``lax.scan``'s ``unroll`` for those K steps (True, False or an int).
        mesh: a ``jax.sharding.Mesh`` to train on (every batch split over ``batch_axis`` with
            ``js.shard_batch``; place the model with ``js.shard`` first), or None.
        batch_axis: the mesh axis the batches are split over.
        compilation_cache: True: ``js.enable_compilation_cache()`` when ``fit``, ``validate``
            or ``predict`` starts; a path: that directory; False leaves JAX's cache alone.
        profile: ``(start_step, end_step)``: a ``jax.profiler`` trace of those global steps of
            each fit, e.g. ``(10, 20)`` to leave compilation out.
        profile_dir: where the trace goes; default the run's ``directory``, else
            ``runs/profile``.
        prefetch: dispatches a background thread pulls and places ahead of the running step
            (>= 0; 0: in the loop); each logged row's ``time/data_wait_s`` is the loop's wait.
        perf_metrics: the ``perf/*`` and ``mem/*`` columns on every train row (throughput,
            the compiled step's FLOPs and bytes, MFU, peak device memory); no device read.
        peak_flops: the peak FLOP/s for ``perf/mfu``: a number (per device), ``'measure'``
            (:func:`measure_peak_flops`), or None: no ``perf/mfu``.
        tokens_per_sample: tokens per counted sample, for ``perf/tokens_per_s``.
        max_time: stop, asking for a save, once the fit has run this long: a
            ``datetime.timedelta``, a dict of its keywords, a ``'DD:HH:MM:SS'`` string or
            seconds, as Lightning takes it; None: no limit. Its clock is the private
            ``_clock`` (``time.monotonic``; tests replace it).
        on_nonfinite: ``'stop'``: end the fit when the training loss is read not finite; None:
            train on. Either way ``nonfinite`` says where, and no step is saved after it.
        save_on_signal: a directory where a stop signal's step is saved when no callback saved
            it; None: a signal saves through the callbacks only.

    Stop signals: during ``fit`` SIGTERM, SIGINT and SIGUSR1 only record the signal; at the
    next step boundary the fit stops with a save request (every process of a job at the same
    step), then raises :class:`Preempted` (exit code ``128 + signal``); ``fit(...,
    resume=True)`` continues bit for bit. orbax's routine "Waiting for previous save" warning
    goes to ``logging`` at DEBUG (:func:`show_library_logs`).

    Example:
        >>> trainer = Trainer(max_steps=1000, val_every_n_steps=200, log_every_n_steps=50)
        >>> history = trainer.fit(task, ArrayLoader(x, y, batch_size=32), val)  # doctest: +SKIP
        >>> history[-1]["step"], history[-1]["val/loss"]  # doctest: +SKIP
    """

    progress_interval_s = 1.0
    _clock: Callable[[], float] = time.monotonic  # max_time's clock; tests replace it

    def __init__(
        self,
        max_epochs: int | None = None,
        callbacks: Iterable[Callback] = (),
        run: Run | None = None,
        *,
        max_steps: int | None = None,
        val_every_n_steps: int | None = None,
        log_every_n_steps: int | None = None,
        limit_val_batches: int | None = None,
        progress: bool | None = None,
        verbose: bool = True,
        steps_per_execution: int = 1,
        unroll: int | bool = True,
        mesh: Mesh | None = None,
        batch_axis: str = "data",
        compilation_cache: bool | str | os.PathLike = True,
        profile: tuple[int, int] | None = None,
        profile_dir: str | os.PathLike | None = None,
        prefetch: int = 2,
        perf_metrics: bool = True,
        peak_flops: float | str | None = None,
        tokens_per_sample: int | None = None,
        max_time: datetime.timedelta | Mapping[str, float] | str | float | None = None,
        on_nonfinite: str | None = None,
        save_on_signal: str | os.PathLike | None = None,
    ) -> None:
        if max_epochs is not None:
            max_epochs = check_int("Trainer", "max_epochs", max_epochs, 1)
        optional = (max_steps, val_every_n_steps, log_every_n_steps, limit_val_batches)
        options = check_options(max_epochs, dict(zip(_OPTIONAL, optional, strict=True)))
        callbacks = tuple(callbacks)
        check_callbacks(callbacks)
        if run is not None and not callable(getattr(run, "log", None)):
            raise TypeError(f"Trainer run must have a log(metrics, step) method, got {run!r}")
        profiler = check_profile(profile, profile_dir, run, options["max_steps"])
        self.steps_per_execution = check_int(
            "Trainer", "steps_per_execution", steps_per_execution, 1
        )
        self.unroll = check_unroll(unroll)
        if mesh is not None:
            check_mesh("Trainer", mesh, batch_axis, name="batch_axis")
        self.compilation_cache = check_compilation_cache(compilation_cache)
        perf, peak, tokens = check_perf_options(perf_metrics, peak_flops, tokens_per_sample)
        self.max_time = check_max_time(max_time)  # seconds
        self.on_nonfinite = check_on_nonfinite(on_nonfinite)
        self.save_on_signal = check_save_on_signal(save_on_signal)
        self.prefetch = check_int("Trainer", "prefetch", prefetch, 0)
        self.max_epochs, self.max_steps = max_epochs, options["max_steps"]
        self.mesh, self.batch_axis = mesh, batch_axis
        self.val_every_n_steps = options["val_every_n_steps"]
        self.log_every_n_steps = options["log_every_n_steps"]
        self.limit_val_batches = options["limit_val_batches"]
        self.run, self.progress, self.verbose = run, progress, verbose
        self.profiler = profiler  # its .traces: the trace directories written
        self.callbacks = callbacks + installed_callbacks(  # after the user's (see _limits)
            profiler, perf and PerfColumns(peak, tokens, self.unroll), self.on_nonfinite,
            self.max_time and MaxTime(self.max_time, lambda: self._clock()), self.save_on_signal
        )  # fmt: skip
        self.history: list[dict[str, float]] = []
        self.position = Position()
        self.start_epoch = self.start_step = 0
        self.train_data: Any = None
        self._data: TrainData | None = None  # the last fit's (or loader_position's) data
        self._totals = Totals()
        self._scheduler = None  # the task's SchedulerConfig during a fit
        self.should_stop, self.stop_reason = False, None
        self.save_request: SaveRequest | None = None  # pending until a step boundary
        self.saved_on_request: list[Path] = []  # the last fit's step directories saved so
        self._stop_saves = False  # the fit's stop asked for a save
        self._nonfinite: NonFinite | None = None  # of ended epochs (the totals' of this one)
        quiet_library_logs()

    # The position's numbers under the names callbacks (ModelCheckpoint) and users read.
    epoch = property(lambda self: self.position.epoch, doc="The current epoch (from 0).")
    global_step = property(lambda self: self.position.step, doc="Training steps run.")
    transfers = property(
        lambda self: self.position.transfers,
        doc="Device-to-host metric reads of the last fit/validate/predict.",
    )

    @property
    def nonfinite(self) -> NonFinite | None:
        """Where the last fit's training loss was first read not finite: ``NonFinite(first_step,
        step, loss)``, steps since the previous (finite) read; None while every read was."""
        return self._nonfinite or self._totals.nonfinite

    def fit(
        self,
        task: Task,
        train_data: Iterable[Any],
        val_data: Iterable[Any] | None = None,
        *,
        start_epoch: int = 0,
        resume: bool = False,
    ) -> list[dict]:
        """Train ``task`` until ``max_epochs`` or ``max_steps``; return the history.

        Args:
            task: a :class:`Task` (or an object with its steps, ``set_phase``, ``model``,
                ``optimizer`` and ``rngs``).
            train_data: an iterable of batches (tuples or dicts of arrays), iterated once per
                epoch (``set_epoch(epoch)`` first when it has one: ArrayLoader), or a grain
                ``MapDataset``, ``IterDataset`` or ``DataLoader`` (the ``js-train[grain]``
                extra; an epoch is one pass or one fresh iterator, see ``_data.TrainData``).
            val_data: an optional iterable of validation batches.
            start_epoch: the first epoch's number, to continue from an epoch-end checkpoint
                (``restored['epoch'] + 1``); the global step starts at ``start_epoch *
                len(train_data)`` (0 without a length).
            resume: continue from the position :func:`load_checkpoint` restored (``'trainer'``
                in the objects, saved by ``ModelCheckpoint(every_n_steps=...)``), mid-epoch
                included, with the loader's own (``'loader'``: see :meth:`loader_position`).

        Returns the history: a dict of floats per reported step: ``step``, ``epoch``,
        ``train/{loss,count,accuracy}``, ``time/samples_per_s``, ``time/data_wait_s``,
        ``perf/*`` and ``mem/*``, ``lr`` (``lr/pg<i>`` for further groups), ``val/...`` after a
        validation, ``time/epoch_s`` at an epoch's end. Plain ``train/*`` are the row's own
        interval (the log's window, else the epoch); a log on an epoch's last step adds the
        epoch's means as ``train/*_epoch`` (``on_epoch_end`` gets them as the plain names).

        Raises:
            Preempted: after a stop signal, once its step is saved and the fit cleaned up.
        """
        schedule, feed, rows, hooks = self._start(task, train_data, val_data, start_epoch, resume)
        position = self.position
        try:
            hooks.start(task)
            self._totals.restart_clock(self.global_step)  # the fit's time from its first step
            while not schedule.finished(position) and not self.should_stop:
                hooks("on_epoch_start", task, self.epoch)
                rows.begin_epoch(task)
                with feed.epoch(self.epoch, position) as dispatches:
                    for dispatch in dispatches:
                        rows.flush()  # the previous step's row: no epoch ends there
                        hooks("on_train_batch_start", task, dispatch.batch, dispatch.steps)
                        self._totals.add(dispatch.run(task))
                        position.step += dispatch.steps
                        feed.data.consumed = dispatch.state
                        due = schedule.after(position, dispatch.steps)
                        rows.step(task, due, dispatch.steps)
                        reads = due.log or due.validate or due.epoch_end
                        hooks.boundary(task, Boundary("step", reads, schedule.final(position, due)))
                        if due.epoch_end or self.should_stop:
                            break
                rows.epoch_end(task)
                hooks.boundary(task, Boundary("epoch", True, False))
            hooks.boundary(task, Boundary("end", True, True))  # a signal, a save asked since
            hooks("on_train_end", task)
        finally:
            rows.close(task, feed.data)
        hooks.after_fit()  # the stopping line; Preempted after a stop signal
        return self.history

    def _start(self, task, train_data, val_data, start_epoch: int, resume: bool):
        """Check everything a fit needs before a step runs; set the position (restored with
        ``resume``, else at ``start_epoch``); return the fit's parts (``_loop.fit_parts``)."""
        grain = grain_kind(train_data) is not None
        start_epoch = check_fit_call(self, task, train_data, val_data, start_epoch, resume, grain)
        self._scheduler = getattr(task, "lr_scheduler_config", None)
        data = self._data
        if data is None or data.data is not train_data:
            data = TrainData(train_data)
        if resume and self.position.steps_in_epoch > 0:
            check_resume(train_data, data, self.epoch, self.global_step)
        # the consumed position is the restored one until a step runs (a fit that fails
        # before then leaves the loader as it was)
        data.consumed = data.resume_state if resume else None
        if not resume:
            data.resume_state = None
            step = start_epoch * (data.length or 0)
            self.position = Position(epoch=start_epoch, step=step, epoch_start_step=step)
            self._totals = Totals()
        self.position.transfers = 0
        self.history, self.train_data, self._data = [], train_data, data
        self.should_stop, self.stop_reason, self._stop_saves = False, None, False
        self.save_request, self.saved_on_request = None, []
        self._nonfinite = None
        # callbacks read these in on_fit_start (ModelCheckpoint)
        self.start_epoch, self.start_step = self.epoch, self.global_step
        return fit_parts(self, task, data, val_data)

    def stop(self, reason: str = "stopped by a callback", *, save: bool = False) -> None:
        """Ask ``fit`` to end (``reason``: in ``stop_reason`` and the ``stopping:`` line):
        after the current step from a step or validation hook, after the epoch from
        ``on_epoch_end``; ``save``: also :meth:`request_save` the step it stops at."""
        self.should_stop, self.stop_reason = True, reason
        if save:
            self._stop_saves = True
            self.request_save(reason)

    def request_save(self, reason: str) -> None:
        """Ask for a checkpoint of the current step (``reason``: ``request.reason``): at the
        next step boundary (or before ``on_train_end``) each callback's ``on_save_request``
        runs, where ``ModelCheckpoint(every_n_steps=...)`` saves the step (unless it just did);
        ``saved_on_request`` lists the directories, and ``fit(..., resume=True)`` continues
        from one bit for bit."""
        self.save_request = SaveRequest(reason)

    def validate(self, task: Task, data: Iterable[Any]) -> dict[str, float]:
        """Run ``task.validation_step`` over ``data`` (up to ``limit_val_batches``); return
        ``{'val/loss':, 'val/count':[, 'val/accuracy':]}`` after one device read."""
        check_eval_call(self, task, data, "val_data")
        return validation(self, task, data, Hooks(self, self.callbacks))

    def predict(self, task: Task, data: Iterable[Any]) -> np.ndarray:
        """``task.predict_step(model, batch)`` over ``data`` in eval mode, the outputs
        concatenated along the first axis and read to the host once (NumPy)."""
        check_eval_call(self, task, data, "data")
        return predictions(self, task, data)

    def loader_position(self, train_data: Any = None) -> Any:
        """The training data's position, as the ``'loader'`` entry of a checkpoint.

        ``ModelCheckpoint(every_n_steps=...)`` saves it: the position after the last batch a
        step consumed (not after those the prefetching thread pulled ahead): an ArrayLoader's
        ``{'epoch':, 'batch':}`` (``ArrayPosition``, which loads into the loader too), or a
        grain pipeline's own iterator state, saved as JSON in the step's metadata
        (``GrainPosition``), which ``fit(..., resume=True)`` on the same pipeline hands to the
        new iterator: training continues bit for bit, workers included.

        Args:
            train_data: the data to restore the position of, before ``fit(train_data,
                resume=True)``; None: the current (or last) fit's, or None when it has none.

        Example:
            >>> objects = {**task.checkpoint_objects(), "trainer": trainer,
            ...            "loader": trainer.loader_position(dataset)}  # doctest: +SKIP
            >>> load_checkpoint(path, objects, which="last")  # doctest: +SKIP
            >>> trainer.fit(task, dataset, resume=True)  # doctest: +SKIP
        """
        data = self._data
        if train_data is not None and (data is None or data.data is not train_data):
            data = TrainData(train_data)
        if data is None:
            return None
        if data.grain is not None:
            return GrainPosition(data, self._remember)
        if data.stateful:
            return ArrayPosition(data)
        if train_data is not None:
            raise TypeError(
                f"Trainer.loader_position: a {type(train_data).__name__} has no position to "
                "save or restore. Fix: use an ArrayLoader, a loader with state_dict/"
                "load_state_dict, or a grain MapDataset, IterDataset or DataLoader."
            )
        return None

    def _remember(self, data: TrainData) -> None:
        """A grain position restored by load_checkpoint: the next fit on its data resumes it."""
        self._data = data

    def state_dict(self) -> dict[str, Any]:
        """The position of a fit, for mid-epoch resume: ``epoch``, ``step``, the step the epoch
        started at, and the epoch's running totals (``loss`` (sum of ``loss * count``),
        ``count``, ``correct``, ``has_correct``), read from the device once."""
        position = self.position
        return {
            "epoch": position.epoch,
            "step": position.step,
            "epoch_start_step": position.epoch_start_step,
            **self._totals.state_dict(position),
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a :meth:`state_dict`; ``fit(..., resume=True)`` continues from it."""
        self.position = Position(
            int(state["epoch"]), int(state["step"]), int(state["epoch_start_step"])
        )
        self._totals = Totals.from_state(state, self.position.steps_in_epoch > 0)
        if math.isfinite(float(state["loss"])):  # a non-finite window starts after it
            self._totals.finite_step = self.position.step
