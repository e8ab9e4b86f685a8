"""Callback hooks and EarlyStopping."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING

from js._checks import check_int

from ._protocol import TrainerView as Trainer  # the hooks' trainer: any TrainerView

if TYPE_CHECKING:  # the hooks' argument type (no cycle: _task imports no callback)
    from ._task import Task


def check_mode(owner: str, mode: str) -> None:
    if mode not in ("min", "max"):
        raise ValueError(f"{owner} mode must be 'min' or 'max', got {mode!r}")


def check_monitor(owner: str, monitor: str, names) -> None:
    """A KeyError naming the metrics there are, unless ``monitor`` is among ``names``."""
    if monitor not in names:
        raise KeyError(
            f"{owner} monitors {monitor!r}, but the epoch's metrics are {sorted(names)}. Fix: "
            "monitor one of those (val/... needs val_data passed to fit)."
        )


def monitored(owner: str, monitor: str, metrics: dict) -> float:
    """The value of ``monitor`` in ``metrics``, or a KeyError naming what is there."""
    check_monitor(owner, monitor, metrics)
    return float(metrics[monitor])


@dataclasses.dataclass
class SaveRequest:
    """A request to checkpoint the current step (``Trainer.request_save``, a stop's:
    ``max_time``), handed to each callback's ``on_save_request``.

    Attributes:
        reason: why the save was asked, e.g. ``'max_time 0:30:00 reached after step 1200
            (1800.2 s into the fit)'``.
        saved: the step directories written for it (a ModelCheckpoint appends its own).
    """

    reason: str
    saved: list[Path] = dataclasses.field(default_factory=list)


class Callback:
    """Base class: override the hooks you need; each receives the trainer and the task.

    The hooks of one ``fit``, in the order they run (each on every callback in the order of
    ``Trainer(callbacks=...)``, then on those the Trainer's options installed: the profile
    window, the perf columns, the non-finite guard, ``max_time``, the stop signals):

    =====================================================  ===================================
    hook                                                   when
    =====================================================  ===================================
    ``on_fit_start(trainer, task)``                        once, before the first step
    ``on_epoch_start(trainer, task, epoch)``               each epoch (a resumed one too)
    ``on_train_batch_start(trainer, task, batch, steps)``  before each dispatch: one step, or
                                                           K (``steps_per_execution``) on a
                                                           stacked batch ``[K, B, ...]``
    ``on_validation_epoch_start(trainer, task)``           a validation is due at that step:
    ``on_validation_epoch_end(trainer, task)``             around its batches (also in
                                                           ``Trainer.validate``)
    ``on_validation_end(trainer, task, metrics)``          the step's row, with ``val/*``
    ``on_step_end(trainer, task, step)``                   after the dispatch's row (``step``
                                                           the global step)
    ``on_save_request(trainer, task, request)``            at that step boundary, when a save
                                                           was asked (after the limits' stops)
    ``on_epoch_end(trainer, task, metrics)``               after the epoch's last step, its row
                                                           written
    ``on_save_request(trainer, task, request)``            before ``on_train_end``, for a request
                                                           made after the last step boundary
    ``on_train_end(trainer, task)``                        training ended without an error
    ``on_fit_end(trainer, task)``                          last, also after an error
    =====================================================  ===================================

    ``metrics`` is the row's dict of floats, the one the run logs (with ``step`` and
    ``epoch``); a row goes to the history when it is made and to the run and the display
    once, whole (a row at an epoch's last step with its epoch columns). ``trainer.epoch``,
    ``trainer.global_step`` and ``trainer.transfers`` read ``trainer.position``;
    ``trainer.start_epoch`` and ``trainer.start_step`` are where the fit started,
    ``trainer.history`` the rows so far. ``checkpoint_objects(trainer, task)`` returns what
    the callback adds to each ModelCheckpoint save.

    Stopping and saving: ``trainer.stop(reason)`` ends training, from a step or validation
    hook at that step (the epoch ends there), from ``on_epoch_end`` after the epoch;
    ``trainer.stop(reason, save=True)`` or ``trainer.request_save(reason)`` also asks for a
    checkpoint of the current step: each callback's ``on_save_request`` gets the
    :class:`SaveRequest` at the next step boundary, where ``ModelCheckpoint(every_n_steps=...)``
    saves the step (unless it just did), and ``fit(..., resume=True)`` continues from it bit
    for bit. A callback with a string ``monitor`` attribute (EarlyStopping, ModelCheckpoint) is
    checked when ``fit`` starts: a name the Trainer cannot produce (``val/...`` without
    ``val_data``, a misspelling) fails before the first epoch.

    Example:
        >>> class PrintLoss(Callback):
        ...     def on_epoch_end(self, trainer: Trainer, task: Task, metrics):
        ...         print(metrics["train/loss"])
    """

    def on_fit_start(self, trainer: Trainer, task: Task) -> None:
        pass

    def on_epoch_start(self, trainer: Trainer, task: Task, epoch: int) -> None:
        pass

    def on_train_batch_start(self, trainer: Trainer, task: Task, batch, steps: int) -> None:
        pass

    def on_step_end(self, trainer: Trainer, task: Task, step: int) -> None:
        pass

    def on_validation_end(self, trainer: Trainer, task: Task, metrics: dict) -> None:
        pass

    def on_epoch_end(self, trainer: Trainer, task: Task, metrics: dict) -> None:
        pass

    def on_validation_epoch_start(self, trainer: Trainer, task: Task) -> None:
        pass

    def on_validation_epoch_end(self, trainer: Trainer, task: Task) -> None:
        pass

    def on_save_request(self, trainer: Trainer, task: Task, request: SaveRequest) -> None:
        pass

    def on_train_end(self, trainer: Trainer, task: Task) -> None:
        pass

    def on_fit_end(self, trainer: Trainer, task: Task) -> None:
        pass

    def checkpoint_objects(self, trainer: Trainer, task: Task) -> dict:
        """``{name: object}`` this callback adds to every ModelCheckpoint save (restore them
        with ``load_checkpoint`` under the same names); none by default."""
        return {}


def callback_objects(trainer: Trainer, task: Task) -> dict:
    """The checkpoint objects of all the trainer's callbacks, for a ModelCheckpoint save."""
    objects: dict = {}
    for callback in trainer.callbacks:
        objects.update(callback.checkpoint_objects(trainer, task))
    return objects


def step_objects(trainer: Trainer, task: Task) -> dict:
    """What a checkpoint of the current step holds, to resume mid-epoch: the task's and the
    callbacks' objects, ``'trainer'`` and, when the data has one, ``'loader'`` (the position
    of the batches the steps consumed, not of those prefetched)."""
    objects = {**task.checkpoint_objects(), **callback_objects(trainer, task), "trainer": trainer}
    loader = trainer.loader_position()
    if loader is not None:
        objects["loader"] = loader
    return objects


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved for ``patience`` epochs in a row.

    As in PyTorch Lightning and Keras, training stops at the end of the ``patience``-th
    consecutive epoch without improvement: with ``patience=2`` and the best value at epoch 3,
    epochs 4 and 5 do not improve and training stops after epoch 5; ``patience=0`` stops at
    the first epoch that does not improve.

    Args:
        monitor: a metric name, e.g. ``'val/loss'``.
        patience: epochs without improvement after which training stops (>= 0).
        mode: ``'min'`` (lower is better) or ``'max'``.
        min_delta: the least change that counts as an improvement.

    Example:
        >>> stopper = EarlyStopping("val/loss", patience=2, mode="min")
    """

    def __init__(
        self,
        monitor: str = "val/loss",
        patience: int = 3,
        mode: str = "min",
        min_delta: float = 0.0,
    ) -> None:
        check_mode("EarlyStopping", mode)
        patience = check_int("EarlyStopping", "patience", patience, 0)
        self.monitor, self.patience, self.mode, self.min_delta = monitor, patience, mode, min_delta
        self.best = math.inf if mode == "min" else -math.inf
        self.wait = 0
        self.stopped_epoch: int | None = None

    def on_fit_start(self, trainer: Trainer, task: Task) -> None:
        self.best = math.inf if self.mode == "min" else -math.inf
        self.wait = 0
        self.stopped_epoch = None

    def on_epoch_end(self, trainer: Trainer, task: Task, metrics: dict) -> None:
        value = monitored("EarlyStopping", self.monitor, metrics)
        gain = self.best - value if self.mode == "min" else value - self.best
        if gain > self.min_delta:
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_epoch = int(metrics.get("epoch", -1))
            epochs = "epoch" if self.wait == 1 else "epochs"
            trainer.stop(
                f"EarlyStopping: {self.monitor} did not improve for {self.wait} {epochs} "
                f"(best {self.best:.6g}, patience {self.patience})"
            )
