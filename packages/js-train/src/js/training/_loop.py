"""The parts ``Trainer.fit`` is read through: the feed, the rows and the callbacks' hooks.

- :class:`Feed`: an epoch's dispatches (one step, or K stacked batches for the K-step
  program), pulled in a prefetching thread or in the loop, and the seconds the loop waited
  for them;
- :class:`Rows`: the row a step boundary reports (its validation, the log's window, the
  epoch's means), each written once to the history, the run and the display;
- :class:`Hooks`: the callbacks' hooks in order, and the step boundary: ``on_step_end``, the
  limits' stops (:mod:`._limits`), the save request served.

They are the Trainer's own parts: they read and advance its position and totals.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import js

from ._callbacks import Callback
from ._limits import Limit, StopOnSignal, saved_note
from ._lr_scheduling import lr_columns, scheduler_room, step_scheduler
from ._perf import PerfColumns
from ._progress import Display
from ._protocol import Boundary
from ._schedule import Due, Position, Schedule, place_stacked, stack
from ._task import scanned_training_step
from ._totals import Totals, epoch_metrics, rates, with_epoch
from .data._prefetch import Prefetcher
from .data._train_data import TrainData

# Columns of a row in this order (stable within a group): epoch, step, train/, val/, lr, time/,
# perf/, mem/.
_ORDER = {"epoch": 0, "step": 1, "train": 2, "val": 3, "lr": 4, "time": 5, "perf": 6, "mem": 7}


def place(batch, mesh, axis: str, *, stacked: bool = False, prefetched: bool = False):
    """The one place every train, validation and predict batch passes before its step:
    split over the mesh's batch axis when there is a mesh, else left as it is (put on the
    default device when ``prefetched``, by the prefetching thread). A ``stacked`` group
    ``[K, B, ...]`` is placed once, its K axis whole."""
    if mesh is None:
        return jax.device_put(batch) if prefetched else batch
    if stacked:
        return place_stacked(batch, mesh, axis)
    return js.shard_batch(batch, mesh, axis)


class Dispatch(NamedTuple):
    """One call of a training program: ``steps`` steps (K stacked batches ``[K, B, ...]``
    through ``program``, the K-step one, or one batch through ``task.training_step`` when
    ``program`` is None); ``state`` is the data's position after its last batch."""

    batch: Any
    steps: int
    state: Any
    program: Callable | None = None

    def run(self, task) -> Any:
        step = task.training_step if self.program is None else self.program
        return step(task.model, task.optimizer, task.rngs, self.batch)


class Feed:
    """One fit's training dispatches, epoch by epoch.

    Args:
        data: the fit's :class:`~.data._train_data.TrainData`.
        schedule: the fit's schedule (a group of K never passes a log, validation or the
            last step).
        k: ``steps_per_execution``; ``many`` the K-step program (None when ``k`` is 1).
        scheduler: the task's lr scheduler config: one of interval ``'step'`` ends a
            dispatch at each of its steps.
        prefetch: dispatches made ready ahead in a background thread (0: in the loop).
        mesh, axis: where batches are placed (:func:`place`).
    """

    def __init__(
        self, data, schedule: Schedule, *, k=1, many=None, scheduler=None, prefetch=0, mesh=None,
        axis="data",
    ) -> None:  # fmt: skip
        self.data, self.schedule, self.k, self.many = data, schedule, k, many
        self.scheduler, self.prefetch, self.mesh, self.axis = scheduler, prefetch, mesh, axis
        self.waited = {"log": 0.0, "epoch": 0.0}  # seconds the loop waited for input

    @contextlib.contextmanager
    def epoch(self, epoch: int, position: Position) -> Iterator[Iterator[Dispatch]]:
        """This epoch's dispatches (closed on leaving: the prefetching thread joined, grain's
        iterator closed); the wait for each is added to the log's and the epoch's."""
        continues = position.steps_in_epoch > 0
        if not continues:
            self.waited["epoch"] = 0.0
        done = self.schedule.remaining(position) == 0  # resumed at the epoch's last step
        batches = iter(()) if done else self.data.batches(epoch, continues)
        source: Any = self.dispatches(batches, position.step, prefetched=self.prefetch > 0)
        if self.prefetch > 0:
            source = Prefetcher(source, self.prefetch)
        try:
            yield self._timed(source)
        finally:
            source.close()

    def _timed(self, source) -> Iterator[Dispatch]:
        while True:
            start = time.perf_counter()
            item = next(source, None)
            waited = time.perf_counter() - start
            self.waited["log"] += waited
            self.waited["epoch"] += waited
            if item is None:
                return
            yield item

    def take(self, name: str) -> float:
        """The wait since the last log (``'log'``, then counted from 0) or in the epoch."""
        waited = self.waited[name]
        if name == "log":
            self.waited["log"] = 0.0
        return waited

    def dispatches(self, batches, step: int, *, prefetched: bool = False) -> Iterator[Dispatch]:
        """A :class:`Dispatch` per group of an epoch's ``(batch, state)`` pairs, from global
        step ``step``: K host batches stacked (then placed once) where their shapes agree and
        no log, validation or the last step falls inside the group, else one at a time.

        The grouping depends only on the global step each group starts at, counted here by
        the steps already yielded, so a prefetching thread that runs this ahead of the loop
        groups exactly as the loop would."""

        def singly(group):
            nonlocal step
            for batch, state in group:
                step += 1
                yield Dispatch(place(batch, self.mesh, self.axis, prefetched=prefetched), 1, state)

        if self.many is None:  # one step per dispatch: nothing to group
            yield from singly(batches)
            return
        group = []
        for pair in batches:
            group.append(pair)
            room = self.schedule.room(Position(step=step))
            room = min(room, scheduler_room(self.scheduler, step))  # an lr step ends a group
            if room < self.k:
                yield from singly(group)
                group = []
            elif len(group) == self.k:
                stacked = stack([batch for batch, _ in group])
                if stacked is None:
                    yield from singly(group)
                else:
                    step += self.k
                    placed = place(
                        stacked, self.mesh, self.axis, stacked=True, prefetched=prefetched
                    )
                    yield Dispatch(placed, self.k, group[-1][1], self.many)
                group = []
        yield from singly(group)


class Hooks:
    """The callbacks' hooks, each called on every callback in order (the user's, then those
    the constructor installed), and the step boundary.

    A hook's methods are looked up once per fit, leaving out the :class:`Callback` base's
    empty ones: a step runs only the hooks some callback defines."""

    def __init__(self, trainer, callbacks: tuple) -> None:
        self.trainer, self.callbacks = trainer, callbacks
        self.limits = [callback for callback in callbacks if isinstance(callback, Limit)]
        self.signals = next(c for c in callbacks if isinstance(c, StopOnSignal))
        self._methods: dict[str, list[Callable]] = {}

    def __call__(self, name: str, *args) -> None:
        methods = self._methods.get(name)
        if methods is None:
            empty = getattr(Callback, name)
            methods = self._methods[name] = [
                method
                for method in (getattr(callback, name) for callback in self.callbacks)
                if getattr(method, "__func__", None) is not empty
            ]
        for method in methods:
            method(self.trainer, *args)

    def start(self, task) -> None:
        """``on_fit_start`` of each callback in order; when one raises, ``on_fit_end`` of
        those already started (a ModelCheckpoint frees its directory's writer lock), then the
        error."""
        for index, callback in enumerate(self.callbacks):
            try:
                callback.on_fit_start(self.trainer, task)
            except BaseException:
                for started in self.callbacks[:index]:
                    try:
                        started.on_fit_end(self.trainer, task)
                    except Exception:  # noqa: BLE001, S110 - the first error is the one to see
                        pass
                raise

    def boundary(self, task, boundary: Boundary) -> None:
        """At a step boundary ``on_step_end``; then each limit's stop; then (not after an
        epoch's end) the pending save request: each callback's ``on_save_request``."""
        trainer = self.trainer
        if boundary.at == "step":
            self("on_step_end", task, trainer.global_step)
        for limit in self.limits:
            stop = limit.check(trainer, task, boundary)
            if stop is not None:
                trainer.stop(stop.reason, save=stop.save)
                if stop.drop_save:
                    trainer.save_request = None  # a non-finite state is not saved
        request = trainer.save_request
        if request is not None and boundary.at != "epoch":  # after an epoch: at the next step
            trainer.save_request = None
            self("on_save_request", task, request)
            trainer.saved_on_request += request.saved

    def after_fit(self) -> None:
        """After the fit's cleanup: the ``stopping:`` line, then :class:`Preempted` when a
        signal stopped the fit."""
        trainer, signals = self.trainer, self.signals
        note = saved_note(trainer, trainer._stop_saves, signals.stopped_by is not None)
        if trainer.should_stop and trainer.verbose:
            print(f"stopping: {trainer.stop_reason}{note}", flush=True)
        signals.after_fit(trainer, note)


def validation(trainer, task, data, hooks: Hooks) -> dict[str, float]:
    """``val/*`` of ``task.validation_step`` over ``data`` (up to ``limit_val_batches``),
    between ``on_validation_epoch_start`` and ``_end``, read once."""
    task.set_phase("eval")
    totals = None
    hooks("on_validation_epoch_start", task)
    try:
        for batch in itertools.islice(data, trainer.limit_val_batches):
            batch = place(batch, trainer.mesh, trainer.batch_axis)
            totals = Totals.accumulate(
                totals, task.validation_step(task.model, batch), "validation_step"
            )
    finally:
        hooks("on_validation_epoch_end", task)
    if totals is None:
        raise ValueError("validation: the data yielded no batches. Fix: check its length.")
    trainer.position.transfers += 1
    return rates(jax.device_get(totals), "val")


def predictions(trainer, task, data) -> Any:
    """``task.predict_step`` over ``data`` in eval mode, concatenated and read once."""
    task.set_phase("eval")
    outputs = [
        task.predict_step(task.model, place(batch, trainer.mesh, trainer.batch_axis))
        for batch in data
    ]
    if not outputs:
        raise ValueError("predict: the data yielded no batches. Fix: check its length.")
    trainer.position.transfers += 1
    return jax.device_get(jax.tree.map(lambda *xs: jnp.concatenate(xs), *outputs))


class Rows:
    """One fit's rows. A step boundary's row (:meth:`step`) goes to the history at once (the
    callbacks read it there) and to the run and the display when the next dispatch starts
    (:meth:`flush`) or at the epoch's end, where a row at the epoch's last step gains the
    epoch's columns first: each row is written once, whole.

    Args:
        trainer: the Trainer (its position, totals, scheduler, history, run, verbose).
        val_data: the validation data, or None.
        feed: the fit's :class:`Feed` (the data waits).
        hooks: the fit's :class:`Hooks`.
        display: the fit's :class:`~._progress.Display`.
        perf: the ``perf/*`` and ``mem/*`` columns (a :class:`~._perf.PerfColumns`), or None.
    """

    def __init__(self, trainer, val_data, feed: Feed, hooks: Hooks, display, perf) -> None:
        self.trainer, self.val_data, self.feed, self.hooks = trainer, val_data, feed, hooks
        self.display, self.perf = display, perf
        self.pending: int | None = None  # the history index of a row not yet written out
        self.closed: dict | None = None  # the epoch's row, when its last step reported it

    def begin_epoch(self, task) -> None:
        trainer = self.trainer
        self.closed = None
        task.set_phase("train")
        self.display.begin(f"epoch {trainer.epoch}", self.feed.schedule.bar_total(trainer.position))

    def step(self, task, due: Due, steps: int) -> None:
        """After a dispatch of ``steps`` steps: the row of the step it reached (the validation
        and the log due there and, at the epoch's last step, the epoch's means)."""
        trainer = self.trainer
        position, totals = trainer.position, trainer._totals
        self.display.advance(steps, lambda: totals.running_loss(position))
        row: dict = {}
        if due.epoch_end:
            self.display.end()
        if due.validate:
            row.update(validation(trainer, task, self.val_data, self.hooks))
            if not due.epoch_end:
                task.set_phase("train")
        if due.log:
            row.update(totals.window(position, task, self.perf))
            row["time/data_wait_s"] = self.feed.take("log")
        if due.epoch_end:
            row = with_epoch(row, totals.epoch_summary(position, task, self.perf))
            row["time/data_wait_s"] = self.feed.take("epoch")
        config = trainer._scheduler
        if config is not None and config.interval == "step":
            if trainer.global_step % config.frequency == 0:  # dispatches end at these steps
                step_scheduler(config, row)
        if row:
            self._add(task, row, validated=due.validate)
        if due.epoch_end:
            self.closed = trainer.history[-1]
            self.flush()

    def epoch_end(self, task) -> None:
        """The epoch's end: its row (unless its last dispatch reported it: data without a
        length that ran out, a stop, a resume with only the end left), ``on_epoch_end``, and
        the next epoch when the data ran out; after ``max_steps`` or a stop mid-epoch the
        totals stay, so a resumed fit continues this epoch."""
        trainer = self.trainer
        position = trainer.position
        if trainer._totals.empty_epoch():
            raise ValueError(
                f"epoch {trainer.epoch} train: the data yielded no batches. Fix: check its length."
            )
        ran_out = self.feed.schedule.ran_out(position, trainer.should_stop)
        if self.closed is None:
            self.display.end()
            row = dict(trainer.history[self.pending]) if self.pending is not None else {}
            validate = self.val_data is not None and "val/loss" not in row
            if validate:
                row.update(validation(trainer, task, self.val_data, self.hooks))
            row = with_epoch(row, trainer._totals.epoch_summary(position, task, self.perf))
            row["time/data_wait_s"] = self.feed.take("epoch")
            self._add(task, row, validated=validate)
            self.closed = trainer.history[-1]
            self.flush()
        metrics = epoch_metrics(trainer.history[-1])  # the epoch's row, written
        config = trainer._scheduler
        if config is not None and config.interval == "epoch" and ran_out:
            if (trainer.epoch + 1) % config.frequency == 0:
                step_scheduler(config, metrics)
        self.hooks("on_epoch_end", task, metrics)
        if ran_out:
            position.next_epoch()
            trainer._nonfinite = trainer.nonfinite  # what this epoch's reads found outlives them
            trainer._totals = Totals()

    def _add(self, task, row: dict, *, validated: bool) -> None:
        """``row`` to the history (in place of the pending row of its step, which it extends),
        then ``on_validation_end`` when it validated; written out by :meth:`flush`."""
        trainer = self.trainer
        row = {"epoch": float(trainer.epoch), "step": float(trainer.global_step), **row}
        row.update(lr_columns(trainer._scheduler))
        row = dict(sorted(row.items(), key=lambda item: _ORDER.get(item[0].split("/")[0], 2)))
        if self.pending is not None:
            trainer.history[self.pending] = row
        else:
            trainer.history.append(row)
        self.pending = len(trainer.history) - 1
        if validated:
            self.hooks("on_validation_end", task, row)

    def flush(self) -> None:
        """The pending row to the run and the display (once: it closes no epoch, or it is
        the epoch's row)."""
        if self.pending is None:
            return
        trainer, row = self.trainer, self.trainer.history[self.pending]
        self.pending = None
        if trainer.run is not None:
            trainer.run.log(row, step=int(row["step"]))
        if trainer.verbose:
            self.display.metrics(row, final=row is self.closed)

    def close(self, task, data: TrainData) -> None:
        """The fit's end (also after an error): the pending row written, the data's position
        kept, the display closed, ``on_fit_end``, the run closed."""
        trainer = self.trainer
        try:
            self.flush()
            keep_position(trainer.position, data)
            self.display.close()
        finally:
            try:
                self.hooks("on_fit_end", task)
            finally:  # the signal handlers come back even when an on_fit_end raised
                self.hooks.signals.on_fit_end(trainer, task)
            close = getattr(trainer.run, "close", None)  # optional: Run only promises log()
            if callable(close):
                close()


def keep_position(position: Position, data: TrainData) -> None:
    """At a fit's end mid-epoch, the data's position is that of the consumed batches (a
    prefetching thread pulled further): an ArrayLoader is set back there and a grain
    pipeline's next ``fit(resume=True)`` continues there."""
    if position.steps_in_epoch == 0 or data.consumed is None:
        return
    if data.grain is not None:
        data.resume_state = data.consumed
    elif data.stateful:
        data.data.load_state_dict(data.consumed)


def fit_parts(trainer, task, data: TrainData, val_data) -> tuple[Schedule, Feed, Rows, Hooks]:
    """A fit's schedule, feed, rows and hooks, from the Trainer's options."""
    schedule = Schedule(
        max_epochs=trainer.max_epochs,
        max_steps=trainer.max_steps,
        val_every_n_steps=trainer.val_every_n_steps,
        log_every_n_steps=trainer.log_every_n_steps,
        validates=val_data is not None,
        length=data.length,
    )
    k = trainer.steps_per_execution
    many = scanned_training_step(task, trainer.unroll) if k > 1 else None
    feed = Feed(
        data, schedule, k=k, many=many, scheduler=trainer._scheduler, prefetch=trainer.prefetch,
        mesh=trainer.mesh, axis=trainer.batch_axis,
    )  # fmt: skip
    hooks = Hooks(trainer, trainer.callbacks)
    display = Display(enabled=trainer.progress, interval_s=trainer.progress_interval_s)
    perf = next((c for c in trainer.callbacks if isinstance(c, PerfColumns)), None)
    return schedule, feed, Rows(trainer, val_data, feed, hooks, display, perf), hooks
