"""The callbacks that stop a fit, which the Trainer's constructor installs from its options.

``Trainer(on_nonfinite='stop')`` adds :class:`NonFiniteGuard`, ``Trainer(max_time=...)``
:class:`MaxTime`, and every Trainer :class:`StopOnSignal` (the stop signals, and
``save_on_signal``), after the user's callbacks, in that order. Each is a :class:`Limit`: at
every step boundary (after the callbacks' ``on_step_end``), after each epoch's
``on_epoch_end`` and after the fit's last boundary, the loop asks each limit's :meth:`check`
for a :class:`~._protocol.Stop`, applies it (``trainer.stop(reason, save=...)``), then serves
the pending save request (each callback's ``on_save_request``). None of them reads a device
array or touches the loop's state: they see the Trainer through its public attributes.
"""

from __future__ import annotations

import datetime
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from js.nn.checkpoint import save_checkpoint

from ._callbacks import Callback, SaveRequest, step_objects
from ._protocol import Boundary, Stop, TrainerView
from ._signals import Preempted, StopSignals, signal_name


class Limit(Callback):
    """A callback the loop asks, at each boundary, whether to stop (see the module)."""

    def check(self, trainer: TrainerView, task: Any, boundary: Boundary) -> Stop | None:
        """The stop this limit asks for at ``boundary``, or None."""
        return None


class NonFiniteGuard(Limit):
    """``Trainer(on_nonfinite='stop')``: end the fit once a read found the training loss not
    finite (NaN or inf), naming the steps it became so in ``stop_reason``.

    It looks at ``trainer.nonfinite``, which the reads the Trainer makes anyway set (a log, an
    epoch's end, a progress redraw, a step save's totals), never with a read of its own: the
    epoch's running loss sum turns non-finite with the first such step and stays so, so the
    first read after it catches it, and ``transfers`` is the same with the guard on. A pending
    save request is dropped (a ModelCheckpoint saves no step from then on, so its last step
    is the last good one). Skipping the bad update is not offered: it happens inside
    ``task.training_step``, where ``jnp.where(jnp.isfinite(loss), new, old)`` keeps the old
    state.
    """

    def __init__(self) -> None:
        self.stopped = False

    def on_fit_start(self, trainer: TrainerView, task: Any) -> None:
        self.stopped = False

    def check(self, trainer: TrainerView, task: Any, boundary: Boundary) -> Stop | None:
        bad = trainer.nonfinite
        if bad is None or self.stopped or boundary.at == "end":
            return None
        self.stopped = True
        same = bad.first_step == bad.step
        window = f"step {bad.step}" if same else f"steps {bad.first_step}-{bad.step}"
        return Stop(
            f"on_nonfinite='stop': the training loss became {bad.loss} in {window} (read at "
            f"step {bad.step}); no checkpoint is saved from then on. Fix: resume from the last "
            "good checkpoint with a lower learning rate, gradient clipping or the bad batch "
            "fixed",
            drop_save=True,
        )


class MaxTime(Limit):
    """``Trainer(max_time=...)``: stop, asking for a save, once the fit has run this long.

    Each fit (a resumed one too) gets the whole time, counted from its ``on_fit_start``. It is
    checked on the host after each dispatch (no device read), so the fit stops at a step
    boundary, the step in flight finished, and may run over by one dispatch (and that step's
    log, validation or save); not after the fit's last step, which ends it anyway. The stop
    asks for a save (``on_save_request``): a ``ModelCheckpoint(every_n_steps=...)`` saves the
    step, which ``fit(..., resume=True)`` continues bit for bit. In a multi-process job it is
    checked only where the processes read anyway (log, validation and epoch-end steps), where
    process 0's clock decides for every process (one small broadcast), so all stop at the same
    step.

    Args:
        seconds: the limit (``check_max_time`` turns the Trainer's forms into seconds).
        clock: the clock read (``time.monotonic``; the Trainer passes its ``_clock``, which
            tests replace).
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.clock = seconds, clock
        self.started = 0.0

    def on_fit_start(self, trainer: TrainerView, task: Any) -> None:
        self.started = self.clock()

    def check(self, trainer: TrainerView, task: Any, boundary: Boundary) -> Stop | None:
        if boundary.at != "step" or trainer.should_stop or boundary.final:
            return None
        shared = jax.process_count() > 1
        if shared and not boundary.reads:
            return None  # processes agree where they read anyway, not on every step
        elapsed = self.clock() - self.started
        over = elapsed >= self.seconds
        if shared:  # process 0's clock decides for all: each stops at the same step
            from jax.experimental import multihost_utils

            over = bool(multihost_utils.broadcast_one_to_all(np.asarray(over)))
        if not over:
            return None
        limit = datetime.timedelta(seconds=self.seconds)
        return Stop(
            f"max_time {limit} reached after step {trainer.global_step} ({elapsed:.1f} s into "
            "the fit)",
            save=True,
        )


class StopOnSignal(Limit):
    """Stop signals during ``fit``, and ``Trainer(save_on_signal=directory)``.

    From its ``on_fit_start`` to its ``on_fit_end`` (installed last: after every other
    callback's ``on_fit_end``, so a save on a stop is written by then) SIGTERM, SIGINT and
    SIGUSR1 only record the signal (:class:`~._signals.StopSignals`); at the next step
    boundary the fit stops, asking for a save. When no callback saved that step and
    ``directory`` is set, its ``on_save_request`` writes it there with
    :func:`save_checkpoint` (synchronously, the payload a step ModelCheckpoint saves). After
    the fit's cleanup, :meth:`after_fit` raises :class:`~._signals.Preempted` (a signal
    received after the fit's last boundary goes to the previous handler instead).

    Args:
        directory: ``save_on_signal`` (absolute), or None.
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.signals: StopSignals | None = None
        self.stopped_by: int | None = None  # the signal that stopped the last fit

    def on_fit_start(self, trainer: TrainerView, task: Any) -> None:
        self.stopped_by = None
        self.signals = StopSignals(trainer.global_step).__enter__()

    def on_fit_end(self, trainer: TrainerView, task: Any) -> None:
        """The previous handlers back (once: the loop calls it again after an error)."""
        if self.signals is not None:
            self.signals.__exit__(None, None, None)

    def check(self, trainer: TrainerView, task: Any, boundary: Boundary) -> Stop | None:
        """A stop signal received by now (agreed by every process of a job)."""
        if self.signals is None or self.stopped_by is not None or boundary.at == "epoch":
            return None
        shared = jax.process_count() > 1
        signum = self.signals.due(trainer.global_step, shared, boundary.reads)
        if signum is None:
            return None
        self.stopped_by = signum
        return Stop(f"received {signal_name(signum)} after step {trainer.global_step}", save=True)

    def on_save_request(self, trainer: TrainerView, task: Any, request: SaveRequest) -> None:
        """The stop signal's step, which no callback saved, written to ``directory``."""
        if request.saved or self.stopped_by is None or self.directory is None:
            return
        if trainer.nonfinite is not None:
            return
        step = save_checkpoint(
            self.directory, step_objects(trainer, task), step=trainer.global_step
        )
        request.saved.append(self.directory / str(step))

    def after_fit(self, trainer: TrainerView, note: str) -> None:
        """After the fit's cleanup: :class:`Preempted` when a signal stopped it; a signal
        received after its last boundary is raised again for the previous handler."""
        signals = self.signals
        if self.stopped_by is not None:
            _preempt(trainer, self.stopped_by, [] if signals is None else signals.ignored, note)
        if signals is not None and signals.signum is not None:
            signal.raise_signal(signals.signum)


def saved_note(trainer: Any, stop_saves: bool, signalled: bool) -> str:
    """What a stop that asked for a save left behind, for the ``stopping:`` line."""
    if not stop_saves:
        return ""
    if trainer.saved_on_request:
        return "; saved " + ", ".join(str(path) for path in trainer.saved_on_request)
    if trainer.nonfinite is not None:
        return "; not saved (the training loss is not finite)"
    if signalled and trainer.save_on_signal is None:
        return (
            "; not saved (no ModelCheckpoint(every_n_steps=...) in the callbacks, no "
            "Trainer(save_on_signal=...))"
        )
    return "; not saved (no ModelCheckpoint(every_n_steps=...) in the callbacks)"


def _preempt(trainer: TrainerView, signum: int, ignored: list[int], note: str) -> None:
    """Raise :class:`Preempted` (exit code ``128 + signum``) with a line on stderr."""
    saved = list(trainer.saved_on_request)
    where = "saved " + ", ".join(map(str, saved)) if saved else note.removeprefix("; ")
    later = f"; {len(ignored)} later signal(s) ignored while saving" if ignored else ""
    message = (
        f"js.training: {signal_name(signum)} received, stopped after step "
        f"{trainer.global_step} ({where or 'not saved'}{later}); exiting with code "
        f"{128 + signum}. Resume: load_checkpoint(path, {{..., 'trainer': trainer, 'loader': "
        "...}, which='last') then fit(..., resume=True)"
    )
    print(message, file=sys.stderr, flush=True)
    raise Preempted(signum, trainer.global_step, saved, message)
