"""Trainer: epochs or steps of a Task's compiled steps, metrics summed on the device.

The schedule has two clocks: the epoch (one pass over the training data) and the global step
(one call of ``task.training_step``, i.e. one batch). Training ends after ``max_epochs`` epochs
or ``max_steps`` steps, whichever comes first; validation runs at every epoch end and every
``val_every_n_steps`` steps; the train metrics since the last log are read every
``log_every_n_steps`` steps. Everything the Trainer reports is one row per step (a dict of
floats with ``step`` and ``epoch``), in ``history``, sent to the run and the callbacks.
"""

from __future__ import annotations

import datetime
import itertools
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

import js
from js._checks import check_int, check_mesh, is_int
from js.nn.checkpoint import save_checkpoint

from ._callbacks import Callback, SaveRequest, step_objects
from ._lr_scheduling import check_fit, lr_columns, scheduler_room, step_scheduler
from ._options import (
    check_callbacks,
    check_data,
    check_max_time,
    check_monitors,
    check_on_nonfinite,
    check_options,
)
from ._perf import Perf, check_perf_options
from ._profile import check_profile
from ._progress import Display
from ._quiet import quiet_library_logs
from ._runs import Run
from ._schedule import Due, Position, Schedule, check_loader_position, place_stacked, stack
from ._signals import (
    Preempted,
    StopSignals,
    check_save_on_signal,
    check_signal_directory,
    signal_name,
)
from ._task import Task, check_task, scanned_training_step
from ._totals import NonFinite, Totals, epoch_metrics, rates, with_epoch
from .data._grain import grain_kind
from .data._positions import ArrayPosition, GrainPosition
from .data._prefetch import Prefetcher
from .data._train_data import TrainData

# Columns of a row in this order (stable within a group): epoch, step, train/, val/, lr, time/,
# perf/, mem/.
_ORDER = {"epoch": 0, "step": 1, "train": 2, "val": 3, "lr": 4, "time": 5, "perf": 6, "mem": 7}
_OPTIONAL = ("max_steps", "val_every_n_steps", "log_every_n_steps", "limit_val_batches")


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
            dispatch that reaches it. A Task's ``lr_scheduler`` of interval ``'step'`` ends a
            dispatch at each of its steps (``frequency`` 1 is refused: use a traced ``lr=``).
        unroll: passed to ``lax.scan`` when ``steps_per_execution`` is above 1: ``True``
            unrolls the K steps (fast for convolutions on the CPU), ``False`` keeps a loop
            (faster to compile for small dense steps and large K), an int ``n`` unrolls ``n``.
        mesh: a ``jax.sharding.Mesh`` to train on, or None (one device). Every train,
            validation and predict batch is split over ``batch_axis`` with ``js.shard_batch``
            as it enters a step (K stacked host batches ``[K, B, ...]`` are placed once, the K
            axis whole); place the model (and ``Rngs``) with ``js.shard`` before
            building the optimizer. Metrics are still summed on the devices.
        batch_axis: the mesh axis the batches are split over.
        compilation_cache: True (the default) turns on JAX's persistent compilation cache
            with ``js.enable_compilation_cache()`` when ``fit``, ``validate`` or ``predict``
            starts, so a later run loads its compiled steps instead of compiling them; a path
            uses that directory; False leaves the cache as it is. ``JS_COMPILATION_CACHE=0`` in
            the environment turns it off everywhere.
        profile: ``(start_step, end_step)``: record a ``jax.profiler`` trace of the global
            steps in ``[start_step, end_step)`` of each fit (it stops at the fit's end when that
            comes first, also after an error), ending with one ``jax.block_until_ready`` on the
            task's state (a wait, not a read: ``transfers`` is unchanged). Start after the first
            steps to leave compilation out, e.g. ``(10, 20)``. Layers are named in it (every
            ``js.Module`` call is a named scope).
        profile_dir: where the trace is written (``<profile_dir>/plugins/profile/<timestamp>/
            <host>.xplane.pb``, read by TensorBoard's profile plugin and XProf); default the
            run's ``directory`` (CSVRun, TensorBoardRun) when it has one, else
            ``runs/profile``.
        prefetch: training dispatches made ready ahead of the step that runs (>= 0; 2 by
            default): a background thread pulls the next batches (K of them, stacked, with
            ``steps_per_execution=K``) from the epoch's iterator and places them on the
            device(s) (``js.shard_batch`` with a mesh, else ``jax.device_put``) while the
            current step runs; at most ``prefetch`` placed dispatches wait. 0 pulls each batch
            when its step is due, in the loop (as before, host batches then go to the step as
            they are). The steps, their grouping and the checkpointed loader position are
            the same either way (a checkpoint saves the position of the batches the steps
            consumed, not of those the thread ran ahead to); an error in the thread is
            raised by ``fit``. Validation and predict batches are not prefetched. Every
            logged row has ``time/data_wait_s``, the seconds the loop waited for its next
            training dispatch since the previous log (the epoch's, on epoch rows).
        perf_metrics: add the ``perf/*`` and ``mem/*`` columns to every train row (a log's
            window, an epoch): ``perf/samples_per_s`` (the row's ``time/samples_per_s``),
            ``perf/steps_per_s``, ``perf/tokens_per_s`` (with ``tokens_per_sample``),
            ``perf/flops_per_step`` (``cost_analysis()['flops']`` of one training step's
            compiled program, ``js.jit(task.training_step)`` lowered and compiled once per fit
            with the first batch's shapes, whatever ``steps_per_execution``), ``perf/mfu``
            (with ``peak_flops``: ``flops_per_step * steps_per_s / peak_flops``),
            ``mem/program_bytes`` (the running step program's ``memory_analysis()``:
            argument + output + temp - alias bytes; the K-step program's when
            ``steps_per_execution`` is above 1) and ``mem/peak_device_bytes`` (the largest
            ``peak_bytes_in_use`` of the local devices' ``memory_stats()``; no column on the
            CPU, which reports none). None of them reads a device array: ``transfers`` is the
            same with them off. Their cost is that analysis, once per fit: one more
            compilation of the step (kept per task, and in the persistent compilation cache),
            whose trace runs ``task.training_step``'s Python once more (a step with host side
            effects, e.g. one that counts its calls, sees one extra call). False: none of
            these columns, no analysis.
        peak_flops: the peak FLOP/s ``perf/mfu`` is read against: a number (the
            accelerator's datasheet figure for the step's dtype, per device), ``'measure'``
            (:func:`measure_peak_flops` once per process: a large matmul's achieved rate), or
            None (the default): no ``perf/mfu`` column.
        tokens_per_sample: tokens in one counted sample (the ``count`` a step returns) for
            ``perf/tokens_per_s`` (``perf/samples_per_s * tokens_per_sample``): a language
            model's block size when its step counts sequences, 1 when it counts tokens (its
            ``count`` is ``B * T``, as ``docs/examples/char_lm.py``'s); None: no tokens column.
        max_time: stop once this much wall-clock time has passed since the fit started
            (each fit, a resumed one too, gets the whole time): a ``datetime.timedelta``, a
            dict of its keywords (``{'hours': 1, 'minutes': 30}``), a ``'DD:HH:MM:SS'`` string
            (``'00:12:00:00'``) or seconds as a number, as Lightning takes it; None: no limit.
            Checked on the host after each dispatch (no device read), so the fit stops at a
            step boundary, the step in flight finished, and may run over by one dispatch
            (and that step's log, validation or save). The stop asks for a save
            (``on_save_request``): a ``ModelCheckpoint(every_n_steps=...)`` saves the step
            it stopped at, which ``fit(..., resume=True)`` continues bit for bit. The clock
            is ``time.monotonic`` (the private ``_clock`` attribute; tests replace it). In a
            multi-process job it is checked only at log, validation and epoch-end steps,
            where process 0's clock decides for every process (one small broadcast), so all
            stop at the same step.
        on_nonfinite: ``'stop'``: end the fit when the training loss is read not finite
            (NaN or inf), naming the steps it became so in ``stop_reason``; None (the
            default): train on. It is checked on the reads the Trainer makes anyway (a log,
            an epoch's end, a progress redraw, a step save's totals), never with a read of its
            own: the epoch's running loss sum turns non-finite with the first such step and
            stays so, so the first read after it catches it, and ``transfers`` is the same
            with the guard on. Either way ``nonfinite`` says where it happened and a
            ModelCheckpoint saves no step from then on, so its last step is the last good
            one. Skipping the bad update is not offered: the update happens inside
            ``task.training_step``, which the Trainer does not see into, and a skip would
            need a per-step check there (a Task can keep the old state itself with
            ``jnp.where(jnp.isfinite(loss), new, old)``).
        save_on_signal: a directory where a stop signal's step is saved when no callback
            saved it (a run without ``ModelCheckpoint(every_n_steps=...)``): with
            :func:`save_checkpoint` (synchronous) as step ``<global step>``, with the payload
            a step ModelCheckpoint saves (``task.checkpoint_objects()``, the callbacks'
            objects, ``'trainer'`` and, when the data has one, ``'loader'``); resume it with
            ``load_checkpoint(save_on_signal, {..., 'trainer': trainer, 'loader': ...},
            which='last')`` and ``fit(..., resume=True)``. A directory that holds steps after
            the fit's first step is refused when the fit starts. None (the default): a signal
            saves only through the callbacks.

    Stop signals: during ``fit`` (its main thread only; the previous handlers come back when
    it ends) SIGTERM, SIGINT (Ctrl-C) and SIGUSR1 (a scheduler's warning before preemption)
    only record the signal: the step in flight finishes, and at that step boundary the fit
    stops with a save request, as ``max_time`` does (a ``ModelCheckpoint(every_n_steps=...)``
    saves the step, the Trainer's and the loader's positions included); further signals are
    ignored until the write is committed (``on_fit_end`` waits for it), so no step is torn, and
    no KeyboardInterrupt lands inside a step or orbax's threads. Then ``fit`` prints one line
    to stderr (the signal, the step, the directory saved) and raises :class:`Preempted`, a
    ``SystemExit`` whose code is ``128 + signal`` (143 SIGTERM, 130 SIGINT, 138 SIGUSR1): the
    script exits with it unless it catches ``Preempted``. ``load_checkpoint(..., which=
    'last')`` and ``fit(..., resume=True)`` continue bit for bit. In a job whose
    ``jax.distributed.initialize`` started JAX's preemption sync manager (the default; JAX then
    catches SIGTERM itself), SIGTERM is left to JAX and SIGINT/SIGUSR1 are passed on to it as a
    SIGTERM to the process; every process asks ``reached_preemption_sync_point`` for each
    global step (a host call, about 0.1 us), so a signal to any one process stops them all at
    the same step, within about a second (JAX's notifier polls once a second). Without it, the
    processes agree at log, validation and epoch-end steps (one small gather there).

    The Trainer routes orbax's routine "Waiting for previous save" warning to ``logging`` at
    DEBUG (logger ``js.training.library``); ``JS_LIBRARY_LOGS=1`` or
    :func:`show_library_logs` shows it again.

    Example:
        >>> trainer = Trainer(max_steps=1000, val_every_n_steps=200, log_every_n_steps=50)
        >>> history = trainer.fit(task, ArrayLoader(x, y, batch_size=32), val)  # doctest: +SKIP
        >>> history[-1]["step"], history[-1]["val/loss"]  # doctest: +SKIP
    """

    progress_interval_s = 1.0

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
        options = check_options(
            max_epochs,
            dict(
                zip(
                    _OPTIONAL,
                    (max_steps, val_every_n_steps, log_every_n_steps, limit_val_batches),
                    strict=True,
                )
            ),
        )
        callbacks = tuple(callbacks)
        check_callbacks(callbacks)
        if run is not None and not callable(getattr(run, "log", None)):
            raise TypeError(f"Trainer run must have a log(metrics, step) method, got {run!r}")
        profiler = check_profile(profile, profile_dir, run, options["max_steps"])
        if profiler is not None:  # last: it stops its trace after the others' step work
            callbacks += (profiler,)
        steps_per_execution = check_int("Trainer", "steps_per_execution", steps_per_execution, 1)
        if not isinstance(unroll, bool) and not (is_int(unroll) and unroll >= 1):
            raise TypeError(
                f"Trainer unroll must be True, False or an int >= 1 (steps unrolled "
                f"per loop iteration), got {unroll!r}"
            )
        if mesh is not None:
            check_mesh("Trainer", mesh, batch_axis, name="batch_axis")
        if not isinstance(compilation_cache, (bool, str, os.PathLike)):
            raise TypeError(
                "Trainer compilation_cache must be True, False or a directory path, got "
                f"{type(compilation_cache).__name__}. Fix: compilation_cache=False to leave "
                "JAX's cache alone, or a path such as '~/.cache/js/jax'"
            )
        self._perf = Perf(*check_perf_options(perf_metrics, peak_flops, tokens_per_sample))
        self.max_time = check_max_time(max_time)  # seconds
        self.on_nonfinite = check_on_nonfinite(on_nonfinite)
        self.save_on_signal = check_save_on_signal(save_on_signal)
        self.compilation_cache = compilation_cache
        self.prefetch = check_int("Trainer", "prefetch", prefetch, 0)
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
        self.position = Position()
        self.start_epoch = self.start_step = 0
        self.train_data, self._many = None, None
        self._data: TrainData | None = None  # the last fit's (or loader_position's) data
        self._wait = {"log": 0.0, "epoch": 0.0}  # seconds the loop waited for input
        self._totals = Totals()
        self._scheduler = None  # the task's SchedulerConfig during a fit
        self.should_stop, self.stop_reason = False, None
        self.save_request: SaveRequest | None = None  # pending until a step boundary
        self.saved_on_request: list[Path] = []  # the last fit's step directories saved so
        self._nonfinite: NonFinite | None = None  # of ended epochs (the totals' of this one)
        self._stop_saves = self._guarded = False  # a stop asked a save; the guard stopped
        self._fit_started = 0.0
        self._signals: StopSignals | None = None  # the stop signals' record during a fit
        self._stopped_by: int | None = None  # the signal that stopped the last fit
        self.profiler = profiler  # its .traces: the trace directories written
        quiet_library_logs()

    # The position's numbers under the names callbacks (ModelCheckpoint) and users read.
    epoch = property(lambda self: self.position.epoch, doc="The current epoch (from 0).")
    global_step = property(lambda self: self.position.step, doc="Training steps run.")
    transfers = property(
        lambda self: self.position.transfers,
        doc="Device-to-host metric reads of the last fit/validate/predict.",
    )
    _clock: Callable[[], float] = time.monotonic  # max_time's clock; tests replace it

    @property
    def nonfinite(self) -> NonFinite | None:
        """Where the last fit's training loss was first read not finite: ``NonFinite(
        first_step, step, loss)``, the steps ``first_step``..``step`` since the previous
        (finite) read, read at ``step``; None while every read was finite."""
        return self._nonfinite or self._totals.nonfinite

    # -- the loop ------------------------------------------------------------------------------

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
            task: a :class:`Task` (or any object with ``training_step(model, optimizer, rngs,
                batch)``, ``validation_step(model, batch)``, ``set_phase`` and the attributes
                ``model``, ``optimizer`` and ``rngs``).
            train_data: an iterable of batches (tuples or dicts of arrays), iterated once per
                epoch; ``set_epoch(epoch)`` is called first when it has one (ArrayLoader). A
                grain pipeline too (the ``js-train[grain]`` extra): a ``grain.MapDataset``
                (an epoch is one pass, ``len(dataset)`` batches, the same order each epoch as
                grain defines it), a ``grain.IterDataset`` (``.mp_prefetch(...)`` workers
                included) or a ``grain.DataLoader`` (``worker_count=`` processes): an epoch
                is one fresh iterator until it ends, endless with ``num_epochs=None`` (train
                those with ``max_steps``). absl flags are marked parsed for grain's workers.
            val_data: an optional iterable of validation batches.
            start_epoch: the first epoch's number, to continue from an epoch-end checkpoint
                (``restored['epoch'] + 1``); the global step starts at ``start_epoch *
                len(train_data)`` (0 without a length).
            resume: continue from the position this Trainer was restored to by
                :func:`load_checkpoint` (``'trainer'`` in the objects, saved by
                ``ModelCheckpoint(every_n_steps=...)``), mid-epoch included: its epoch, step
                and running totals, with the loader's own position (``'loader'``: the
                ArrayLoader itself, or ``trainer.loader_position(train_data)``, which also
                names a grain pipeline's iterator state; see :meth:`loader_position`).

        Returns the history: one dict of floats per reported step, with ``step``, ``epoch``,
        ``train/loss``, ``train/count``, ``train/accuracy`` (when steps return ``correct``),
        ``time/samples_per_s``, ``time/data_wait_s``, the ``perf/*`` and ``mem/*`` columns of
        ``perf_metrics`` (on every row with train metrics: ``perf/samples_per_s``,
        ``perf/steps_per_s``, ``perf/tokens_per_s``, ``perf/flops_per_step``, ``perf/mfu``,
        ``mem/program_bytes``, ``mem/peak_device_bytes``, each where it applies), ``lr`` (with
        a schedule; with a Task's ``lr_scheduler``, group 0's rate as the row is reported, and
        ``lr/pg<i>`` for each further group), ``val/...`` after a validation and
        ``time/epoch_s`` at an epoch's end. A row's plain ``train/*`` are its own interval: the
        log's window on a log step, else the whole epoch; where a log falls on an epoch's last
        step, the epoch's means are added as ``train/*_epoch`` (and ``on_epoch_end`` gets them
        under the plain names).

        Raises:
            Preempted: after a stop signal (SIGTERM, SIGINT, SIGUSR1), once the step it stopped
                at is saved and the fit has cleaned up; its ``code`` is ``128 + signal``.
        """
        schedule = self._start(task, train_data, val_data, start_epoch, resume)
        display = Display(enabled=self.progress, interval_s=self.progress_interval_s)
        signals = self._signals = StopSignals(self.global_step)
        with signals:  # until the callbacks' on_fit_end: a save on a stop is written by then
            self._fit(task, train_data, val_data, schedule, display)
        if self.should_stop and self.verbose:
            print(f"stopping: {self.stop_reason}{self._saved_note()}", flush=True)
        if self._stopped_by is not None:
            self._preempt(self._stopped_by, signals.ignored)
        if signals.signum is not None:  # after the last step boundary: the fit had finished,
            signal.raise_signal(signals.signum)  # so the previous handler gets it, as if unset
        return self.history

    def _fit(self, task, train_data, val_data, schedule: Schedule, display) -> None:
        self._start_callbacks(task)
        data = self._data
        assert data is not None  # set by _start
        try:
            while not schedule.finished(self.position) and not self.should_stop:
                self._begin_epoch(task, train_data, schedule, display)
                row = None  # the epoch's row, when its last dispatch reported it
                dispatches = self._feed(data, schedule)
                try:
                    while (item := self._next_dispatch(dispatches)) is not None:
                        run, batch, steps, state = item
                        self._perf.observe(task, batch, steps, self._many)  # once per program
                        self._totals.add(run(task, batch))
                        self.position.step += steps
                        data.consumed = state
                        display.advance(steps, self._running_loss)
                        due = schedule.after(self.position, steps)
                        row = self._step_end(task, val_data, schedule, due, display)
                        if due.epoch_end or self.should_stop:
                            break
                finally:
                    dispatches.close()  # the prefetching thread joined, grain's iterator closed
                self._epoch_end(task, val_data, schedule, row, display)
                self._guard()
            self._check_signal(None)  # one received after the last step boundary
            self._serve_save_request(task)  # one made after the last step boundary
            self._hook("on_train_end", task)
        finally:
            self._keep_position(data)
            display.close()
            self._hook("on_fit_end", task)
            close = getattr(self.run, "close", None)  # optional: Run only promises log()
            if callable(close):
                close()

    def _saved_note(self) -> str:
        """What a stop that asked for a save left behind, for the ``stopping:`` line."""
        if not self._stop_saves:
            return ""
        if self.saved_on_request:
            return "; saved " + ", ".join(str(path) for path in self.saved_on_request)
        if self.nonfinite is not None:
            return "; not saved (the training loss is not finite)"
        if self._stopped_by is not None and self.save_on_signal is None:
            return (
                "; not saved (no ModelCheckpoint(every_n_steps=...) in the callbacks, no "
                "Trainer(save_on_signal=...))"
            )
        return "; not saved (no ModelCheckpoint(every_n_steps=...) in the callbacks)"

    def _begin_epoch(self, task, data, schedule: Schedule, display) -> None:
        """``on_epoch_start``; the epoch's data wait from 0 (unless the epoch continues, after
        a resume; the loader's epoch is set by ``TrainData.batches``); the train phase; the
        progress bar."""
        self._hook("on_epoch_start", task, self.epoch)
        if self.position.steps_in_epoch == 0:
            self._wait["epoch"] = 0.0
        task.set_phase("train")
        display.begin(f"epoch {self.epoch}", schedule.bar_total(self.position))

    def _step_end(self, task, val_data, schedule: Schedule, due: Due, display) -> dict | None:
        """After a dispatch: the row of the step it reached (the validation and the log due
        there and, at the epoch's last step, the epoch's means), then ``on_step_end``, then
        the limits (the non-finite guard, ``max_time``) and a save requested by now.
        Returns the row when it is the epoch's."""
        row = {}
        if due.epoch_end:
            display.end()
        if due.validate:
            row.update(self._validation(task, val_data, display))
            if not due.epoch_end:
                task.set_phase("train")
        if due.log:
            row.update(self._totals.window(self.position, task, self._perf))
            row["time/data_wait_s"], self._wait["log"] = self._wait["log"], 0.0
        if due.epoch_end:
            row = with_epoch(row, self._totals.epoch_summary(self.position, task, self._perf))
            row["time/data_wait_s"] = self._wait["epoch"]
        config = self._scheduler
        if config is not None and config.interval == "step":
            if self.global_step % config.frequency == 0:  # dispatches end at these steps
                step_scheduler(config, row)
        if row:
            row = self._report(task, row, display, validated=due.validate, final=due.epoch_end)
        self._hook("on_step_end", task, self.global_step)
        self._guard()
        self._check_time(schedule, due)
        self._check_signal(due)
        self._serve_save_request(task)
        return row if due.epoch_end else None

    # -- limits and saves on request -----------------------------------------------------------

    def _guard(self) -> None:
        """``on_nonfinite='stop'``: stop once a read found the training loss not finite."""
        bad = self.nonfinite
        if bad is None or self.on_nonfinite != "stop" or self._guarded:
            return
        self._guarded = self.should_stop = True
        self.save_request = None  # a non-finite state is not saved (ModelCheckpoint skips it)
        window = (
            f"step {bad.step}"
            if bad.first_step == bad.step
            else (f"steps {bad.first_step}-{bad.step}")
        )
        self.stop_reason = (
            f"on_nonfinite='stop': the training loss became {bad.loss} in {window} (read at "
            f"step {bad.step}); no checkpoint is saved from then on. Fix: resume from the last "
            "good checkpoint with a lower learning rate, gradient clipping or the bad batch "
            "fixed"
        )

    def _check_time(self, schedule: Schedule, due: Due) -> None:
        """``max_time``: stop at this step boundary, asking for a save, once the fit has run
        that long (on the host clock; not after the fit's last step, which ends it anyway)."""
        if self.max_time is None or self.should_stop or schedule.final(self.position, due):
            return
        shared = jax.process_count() > 1
        if shared and not (due.log or due.validate or due.epoch_end):
            return  # processes agree where they read anyway, not on every step
        elapsed = self._clock() - self._fit_started
        over = elapsed >= self.max_time
        if shared:  # process 0's clock decides for all: each stops at the same step
            from jax.experimental import multihost_utils

            over = bool(multihost_utils.broadcast_one_to_all(np.asarray(over)))
        if over:
            limit = datetime.timedelta(seconds=self.max_time)
            self.stop(
                f"max_time {limit} reached after step {self.global_step} ({elapsed:.1f} s "
                "into the fit)",
                save=True,
            )

    def _check_signal(self, due: Due | None) -> None:
        """A stop signal received by now (agreed by every process of a job): stop at this
        step boundary, asking for a save; ``fit`` raises :class:`Preempted` after its cleanup.
        ``due`` None: after the fit's last boundary (a signal during its last validation)."""
        signals = self._signals
        if signals is None or self._stopped_by is not None:
            return
        reads = due is None or due.log or due.validate or due.epoch_end
        signum = signals.due(self.global_step, jax.process_count() > 1, reads)
        if signum is None:
            return
        self._stopped_by = signum
        self.stop(f"received {signal_name(signum)} after step {self.global_step}", save=True)

    def _preempt(self, signum: int, ignored: list[int]) -> None:
        """Raise :class:`Preempted` (exit code ``128 + signum``) with a line on stderr."""
        saved = list(self.saved_on_request)
        where = (
            "saved " + ", ".join(str(path) for path in saved)
            if saved
            else self._saved_note().removeprefix("; ") or "not saved"
        )
        later = f"; {len(ignored)} later signal(s) ignored while saving" if ignored else ""
        message = (
            f"js.training: {signal_name(signum)} received, stopped after step "
            f"{self.global_step} ({where}{later}); exiting with code {128 + signum}. Resume: "
            "load_checkpoint(path, {..., 'trainer': trainer, 'loader': ...}, which='last') "
            "then fit(..., resume=True)"
        )
        print(message, file=sys.stderr, flush=True)
        raise Preempted(signum, self.global_step, saved, message)

    def request_save(self, reason: str) -> None:
        """Ask for a checkpoint of the current step: at the next step boundary (after its
        ``on_step_end``; or before ``on_train_end`` when no step follows) each callback's
        ``on_save_request(trainer, task, request)`` runs, and a
        ``ModelCheckpoint(every_n_steps=...)`` saves that step (the Trainer's and the
        loader's positions included) unless it just did; ``saved_on_request`` then lists the
        step directories. ``fit(..., resume=True)`` continues from it bit for bit.

        Args:
            reason: why, for the callbacks (``request.reason``) and the ``stopping:`` line.
        """
        self.save_request = SaveRequest(reason)

    def _serve_save_request(self, task) -> None:
        request, self.save_request = self.save_request, None
        if request is not None:
            self._hook("on_save_request", task, request)
            if not request.saved and self._stopped_by is not None:
                self._save_on_signal(task, request)
            self.saved_on_request += request.saved

    def _save_on_signal(self, task, request: SaveRequest) -> None:
        """``save_on_signal``: the stop signal's step, which no callback saved, written there
        (synchronously; every process of a job saves it together)."""
        path = self.save_on_signal
        if path is None or self.nonfinite is not None:
            return
        step = save_checkpoint(path, step_objects(self, task), step=self.global_step)
        request.saved.append(path / str(step))

    def _epoch_end(self, task, val_data, schedule: Schedule, row: dict | None, display) -> None:
        """The epoch's end: its row, unless its last dispatch reported it (data without a
        length that ran out, a stop, a resume with only the end left), ``on_epoch_end``, and
        the next epoch when the data ran out; after ``max_steps`` or a stop mid-epoch the
        totals stay, so a resumed fit continues this epoch."""
        if self._totals.empty_epoch():
            raise ValueError(
                f"epoch {self.epoch} train: the data yielded no batches. Fix: check its length."
            )
        ran_out = schedule.ran_out(self.position, self.should_stop)
        if row is None:
            display.end()
            same = self.history and self.history[-1]["step"] == self.global_step
            row = self.history.pop() if same else {}  # the step's row gains the epoch's
            validate = val_data is not None and "val/loss" not in row
            if validate:
                row.update(self._validation(task, val_data, display))
            row = with_epoch(row, self._totals.epoch_summary(self.position, task, self._perf))
            row["time/data_wait_s"] = self._wait["epoch"]
            row = self._report(task, row, display, validated=validate, final=True)
        config = self._scheduler
        if config is not None and config.interval == "epoch" and ran_out:
            if (self.epoch + 1) % config.frequency == 0:
                step_scheduler(config, epoch_metrics(row))
        self._hook("on_epoch_end", task, epoch_metrics(row))
        if ran_out:
            self.position.next_epoch()
            self._nonfinite = self.nonfinite  # what this epoch's reads found outlives them
            self._totals = Totals()

    def _report(self, task, row: dict, display, *, validated: bool, final: bool) -> dict:
        """One row of a step to the history, the run, ``on_validation_end`` and the display."""
        row = {"epoch": float(self.epoch), "step": float(self.global_step), **row}
        row.update(lr_columns(self._scheduler))
        row = dict(sorted(row.items(), key=lambda item: _ORDER.get(item[0].split("/")[0], 2)))
        self.history.append(row)
        if validated:
            self._hook("on_validation_end", task, row)
        if self.run is not None:
            self.run.log(row, step=self.global_step)
        if self.verbose:
            display.metrics(row, final=final)
        return row

    # -- evaluation ----------------------------------------------------------------------------

    def validate(self, task: Task, data: Iterable[Any]) -> dict[str, float]:
        """Run ``task.validation_step`` over ``data`` (up to ``limit_val_batches``); return
        ``{'val/loss':, 'val/count':[, 'val/accuracy':]}`` after one device read."""
        check_task(task)
        self._enable_cache()
        check_data(data, "val_data", False)
        self.position.transfers = 0
        return self._validation(task, data, Display(enabled=False))

    def predict(self, task: Task, data: Iterable[Any]) -> np.ndarray:
        """``task.predict_step(model, batch)`` over ``data`` in eval mode, the outputs
        concatenated along the first axis and read to the host once (NumPy)."""
        check_task(task)
        self._enable_cache()
        check_data(data, "data", False)
        self.position.transfers = 0
        task.set_phase("eval")
        outputs = [task.predict_step(task.model, self._to_device(b)) for b in data]
        if not outputs:
            raise ValueError("predict: the data yielded no batches. Fix: check its length.")
        self.position.transfers += 1
        return jax.device_get(jax.tree.map(lambda *xs: jnp.concatenate(xs), *outputs))

    def _validation(self, task, data, display) -> dict[str, float]:
        task.set_phase("eval")
        totals = None
        batches = itertools.islice(data, self.limit_val_batches)
        self._hook("on_validation_epoch_start", task)
        try:
            for batch in batches:
                metrics = task.validation_step(task.model, self._to_device(batch))
                totals = Totals.accumulate(totals, metrics, "validation_step")
        finally:
            self._hook("on_validation_epoch_end", task)
        if totals is None:
            raise ValueError("validation: the data yielded no batches. Fix: check its length.")
        self.position.transfers += 1
        return rates(jax.device_get(totals), "val")

    # -- pieces --------------------------------------------------------------------------------

    def _enable_cache(self) -> None:
        """The persistent compilation cache, before the first step compiles (process-wide)."""
        if self.compilation_cache is not False:
            js.enable_compilation_cache(
                None if self.compilation_cache is True else self.compilation_cache
            )

    def _to_device(self, batch, *, stacked: bool = False, prefetched: bool = False):
        """The one place every train, validation and predict batch passes before its step:
        split over the mesh's batch axis when there is a mesh, else left as it is (put on the
        default device when ``prefetched``, by the prefetching thread). A ``stacked`` group
        ``[K, B, ...]`` is placed once, its K axis whole."""
        if self.mesh is None:
            return jax.device_put(batch) if prefetched else batch
        if stacked:
            return place_stacked(batch, self.mesh, self.batch_axis)
        return js.shard_batch(batch, self.mesh, self.batch_axis)

    def _feed(self, data: TrainData, schedule: Schedule):
        """This epoch's dispatches: made in a prefetching thread (``prefetch`` ahead), or in
        the loop with ``prefetch=0``. Both have ``close()``."""
        continues = self.position.steps_in_epoch > 0
        batches = data.batches(self.epoch, continues)
        dispatches = self._dispatches(batches, schedule, prefetched=self.prefetch > 0)
        return Prefetcher(dispatches, self.prefetch) if self.prefetch > 0 else dispatches

    def _next_dispatch(self, dispatches):
        """The next dispatch (None at the epoch's end), the wait for it added to the log's and
        the epoch's ``time/data_wait_s``."""
        start = time.perf_counter()
        item = next(dispatches, None)
        waited = time.perf_counter() - start
        self._wait["log"] += waited
        self._wait["epoch"] += waited
        return item

    def _dispatches(self, batches, schedule: Schedule, *, prefetched: bool = False):
        """``(run, batch, steps, state)`` per dispatch of this epoch's ``(batch, state)``
        pairs: K host batches stacked (then placed once) through the K-step program where
        their shapes agree and no log, validation or the last step falls inside the group,
        else one at a time; ``state`` is the data's position after the dispatch's last batch.

        The grouping depends only on the global step each group starts at, counted here from
        the epoch's start by the steps already yielded, so a prefetching thread that runs
        this ahead of the loop groups exactly as the loop would."""
        k = self.steps_per_execution
        step = self.position.step

        def one(task, batch):
            return task.training_step(task.model, task.optimizer, task.rngs, batch)

        def several(task, batches):
            assert self._many is not None  # `several` is only yielded while there is one
            return self._many(task.model, task.optimizer, task.rngs, batches)

        def singly(group):
            nonlocal step
            for batch, state in group:
                step += 1
                yield one, self._to_device(batch, prefetched=prefetched), 1, state

        if schedule.remaining(self.position) == 0:  # resumed at the epoch's last step
            return
        group = []
        for pair in batches:
            group.append(pair)
            # a scheduler of interval 'step' ends a dispatch at each of its steps
            room = min(schedule.room(Position(step=step)), scheduler_room(self._scheduler, step))
            if self._many is None or room < k:
                yield from singly(group)
                group = []
            elif len(group) == k:
                stacked = stack([batch for batch, _ in group])
                if stacked is None:
                    yield from singly(group)
                else:
                    step += k
                    placed = self._to_device(stacked, stacked=True, prefetched=prefetched)
                    yield several, placed, k, group[-1][1]
                group = []
        yield from singly(group)

    def _running_loss(self) -> float:
        return self._totals.running_loss(self.position)

    def _start(self, task, train_data, val_data, start_epoch: int, resume: bool) -> Schedule:
        """Check everything a fit needs before a step runs; set the position (restored with
        ``resume``, else at ``start_epoch``); return the fit's schedule."""
        self._fit_started = self._clock()  # max_time counts from here
        check_task(task)
        start_epoch = check_int("fit", "start_epoch", start_epoch, 0)
        self._enable_cache()
        several = self.max_epochs is None or self.max_epochs - start_epoch > 1
        if grain_kind(train_data) is None:  # iter() of a grain pipeline may start workers
            check_data(train_data, "train_data", several and self.max_epochs is not None)
        if val_data is not None:
            check_data(val_data, "val_data", several)
        check_monitors(self.callbacks, val_data is not None)
        if self.save_on_signal is not None:
            check_signal_directory(self.save_on_signal, self.global_step if resume else 0)
        self._scheduler = getattr(task, "lr_scheduler_config", None)
        if self._scheduler is not None:
            check_fit(self._scheduler, self, val_data is not None)
        data = self._data
        if data is None or data.data is not train_data:
            data = TrainData(train_data)
        length = data.length
        if resume and self.position.steps_in_epoch > 0:
            check_loader_position(train_data, self.epoch)
            if data.grain is not None and data.resume_state is None:
                raise ValueError(
                    f"fit(resume=True): the Trainer resumes epoch {self.epoch} mid-way (step "
                    f"{self.global_step}), but no position of train_data (a grain "
                    f"{data.grain}) was restored, and it would start the epoch over. Fix: "
                    "load_checkpoint(path, {..., 'trainer': trainer, 'loader': "
                    "trainer.loader_position(train_data)}) with this train_data first."
                )
        # the consumed position is the restored one until a step runs (a fit that fails
        # before then leaves the loader as it was)
        data.consumed = data.resume_state if resume else None
        if not resume:
            data.resume_state = None
            step = start_epoch * (length or 0)
            self.position = Position(epoch=start_epoch, step=step, epoch_start_step=step)
            self._totals = Totals()
        self.position.transfers = 0
        self.history, self.train_data, self._data = [], train_data, data
        self._wait = {"log": 0.0, "epoch": 0.0}
        self.should_stop, self.stop_reason = False, None
        self.save_request, self.saved_on_request = None, []
        self._stop_saves = self._guarded = False
        self._nonfinite = None
        self._stopped_by = None
        # callbacks read these in on_fit_start (ModelCheckpoint)
        self.start_epoch, self.start_step = self.epoch, self.global_step
        self._many = None
        if self.steps_per_execution > 1:
            self._many = scanned_training_step(task, self.unroll)
        self._perf.start(self.steps_per_execution)  # 'measure': the peak, before the clock
        self._totals.restart_clock(self.global_step)
        return Schedule(
            max_epochs=self.max_epochs,
            max_steps=self.max_steps,
            val_every_n_steps=self.val_every_n_steps,
            log_every_n_steps=self.log_every_n_steps,
            validates=val_data is not None,
            length=length,
        )

    def stop(self, reason: str = "stopped by a callback", *, save: bool = False) -> None:
        """Ask ``fit`` to end: after the current step from a step or validation hook, after
        the epoch from ``on_epoch_end`` (EarlyStopping).

        Args:
            reason: why, in ``stop_reason`` and the ``stopping:`` line.
            save: also ask for a checkpoint of the step it stops at (:meth:`request_save`),
                as ``max_time`` does.
        """
        self.should_stop, self.stop_reason = True, reason
        if save:
            self._stop_saves = True
            self.request_save(reason)

    def _start_callbacks(self, task) -> None:
        """``on_fit_start`` of each callback in order; when one raises, ``on_fit_end`` of
        those already started (a ModelCheckpoint frees its directory's writer lock), then the
        error."""
        for index, callback in enumerate(self.callbacks):
            try:
                callback.on_fit_start(self, task)
            except BaseException:
                for started in self.callbacks[:index]:
                    try:
                        started.on_fit_end(self, task)
                    except Exception:  # noqa: BLE001, S110 - the first error is the one to see
                        pass
                raise

    def _hook(self, name: str, *args) -> None:
        for callback in self.callbacks:
            getattr(callback, name)(self, *args)

    # -- checkpointing the position ------------------------------------------------------------

    def loader_position(self, train_data: Any = None) -> Any:
        """The training data's position, as the ``'loader'`` entry of a checkpoint.

        ``ModelCheckpoint(every_n_steps=...)`` saves it: the position after the last batch a
        step consumed (not after those the prefetching thread pulled ahead). For an
        ArrayLoader (any loader with ``state_dict``/``load_state_dict``) it is the loader's
        ``{'epoch':, 'batch':}`` and loads into the loader itself too; for a grain pipeline it
        is grain's own iterator state (``iterator.get_state()``), saved as JSON in the step's
        metadata, which a ``fit(..., resume=True)`` on the same pipeline hands to the new
        iterator's ``set_state``: training continues bit for bit, workers included. In a
        multi-process job the primary process writes that metadata and every process restores
        its state, which is right when every process's pipeline has the same structure (one
        per process over its shard, built the same way).

        Args:
            train_data: the training data to restore the position of, before
                ``fit(train_data, resume=True)``; None: that of the current (or last) fit.

        Returns an object for ``load_checkpoint``/``save_checkpoint``, or None (with
        ``train_data=None``) when the data has no position (a plain iterable).

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

    def _keep_position(self, data: TrainData) -> None:
        """At a fit's end mid-epoch, the data's position is that of the consumed batches (a
        prefetching thread pulled further): an ArrayLoader is set back there and a grain
        pipeline's next ``fit(resume=True)`` continues there."""
        if self.position.steps_in_epoch == 0 or data.consumed is None:
            return
        if data.grain is not None:
            data.resume_state = data.consumed
        elif data.stateful:
            data.data.load_state_dict(data.consumed)

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
