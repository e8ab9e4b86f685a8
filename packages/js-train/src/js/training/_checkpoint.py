"""ModelCheckpoint: the Trainer's checkpoints, through js-nn's checkpoint package.

The format, the digests, the writer lock, ``save_checkpoint``, ``load_checkpoint`` and the
restore onto current shardings live in :mod:`js.nn.checkpoint` (an inference install of js-core
and js-nn reads what is saved here). What is js-train's own is what to save and when: the
payload ``{**task.checkpoint_objects(), 'epoch': epoch}`` after every epoch, or with
``every_n_steps`` the Trainer's position (``'trainer'``) and the loader's (``'loader'``), and
how steps are ranked (by the monitored metric) and kept (the best and the last).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from js._checks import check_int
from js.nn.checkpoint.format import CheckpointError, manager, read_json, score, steps_in
from js.nn.checkpoint.lock import check_timeout, writer_lock
from js.nn.checkpoint.write import save_args

from ._callbacks import Callback, SaveRequest, callback_objects, check_mode, monitored

if TYPE_CHECKING:  # the hooks' argument types; imported only by type checkers (a cycle)
    from ._task import Task
    from ._trainer import Trainer


def _check_metrics(path: Path) -> None:
    """Refuse a directory holding a step whose metrics cannot be read, naming the steps."""
    broken = []
    for step in steps_in(path):
        if (path / str(step) / "metrics").exists():
            try:
                read_json(path / str(step) / "metrics" / "metrics")
            except (OSError, ValueError):
                broken.append(step)
    if broken:
        raise CheckpointError(
            path,
            None,
            f"the metrics of steps {broken}",
            "cannot be read, and ModelCheckpoint ranks every step by them",
            f"delete those steps ({path}/<step>) or use another directory",
        )


class ModelCheckpoint(Callback):
    """Save the task's checkpoint after every epoch, keeping the best and the last.

    The payload is ``{**task.checkpoint_objects(), 'epoch': epoch}`` (model parameters and
    buffers, optimizer state and step count, Rngs state, epoch; and each callback's
    ``checkpoint_objects(trainer, task)``, e.g. WeightAveraging's average) in the format
    described in this module, under ``path/<epoch>``. Saves run in the background while training
    goes on and are atomic. ``load_checkpoint(path, objects)`` restores the best;
    ``which='last'`` the last.

    A directory that already holds steps at or after the fit's first epoch (an earlier run's)
    is refused when the fit starts, since orbax would silently skip saving those epochs:
    resume with ``fit(..., start_epoch=restored_epoch + 1)``, use another directory, or pass
    ``overwrite=True``. Steps before the first epoch (those a resumed run continues from) are
    kept and still compete for best.

    With ``every_n_steps=n`` it saves every ``n`` global steps instead (at the end of the
    dispatch that reaches a multiple of ``n``), under ``path/<step>``, with the payload
    ``{**task.checkpoint_objects(), 'trainer': trainer[, 'loader': train_data]}``: the
    Trainer's position (epoch, step, the epoch's running totals) and, when the training data
    has one, its position in the epoch (``trainer.loader_position()``: an ArrayLoader's
    ``{'epoch':, 'batch':}``, a grain pipeline's own iterator state as JSON in the step's
    metadata), of the last batch a step consumed. Restore those objects with
    ``load_checkpoint`` (``'loader'``: the ArrayLoader, or
    ``trainer.loader_position(train_data)``) and call ``fit(..., resume=True)``: training
    continues on the next batch, bit for bit as if never interrupted. A step save is ranked
    by ``monitor`` in the latest row that has it (the last validation), unranked before.
    A stop that asks for a save (``Trainer(max_time=...)``, ``trainer.stop(reason,
    save=True)``, ``trainer.request_save(reason)``: :meth:`on_save_request`) saves the step it
    stops at in the same way, so the resumed fit continues from there; epoch checkpoints are
    saved at epoch ends only (a stop mid-epoch saves that partial epoch at its end, as before).
    Once the fit's training loss is read not finite (``trainer.nonfinite``: a log, an epoch's
    end, or this save's own read of the Trainer's totals), no later step is saved: its steps go
    to ``skipped``, and the last good step stays the last (a monitored value that is not finite
    ranks last too).
    The directory's writer lock is held from the fit's start to its end: a second writer
    (another process's save or fit) is refused at once, or waits ``lock_timeout`` seconds.

    Args:
        path: the checkpoint directory.
        monitor: the metric that ranks checkpoints, e.g. ``'val/loss'``.
        mode: ``'min'`` or ``'max'``: whether a lower or a higher ``monitor`` is better.
        overwrite: delete the steps at or after the fit's first epoch (every step, for a fit
            from epoch 0) when the fit starts, instead of refusing.
        every_n_steps: save every this many global steps (>= 1) instead of every epoch.
        lock_timeout: seconds to wait for another writer of ``path`` when the fit starts.

    Example:
        >>> checkpoint = ModelCheckpoint("runs/digits/checkpoints", monitor="val/accuracy",
        ...                              mode="max")
        >>> Trainer(10, callbacks=[checkpoint])  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike,
        monitor: str = "val/loss",
        mode: str = "min",
        *,
        overwrite: bool = False,
        every_n_steps: int | None = None,
        lock_timeout: float = 0.0,
    ) -> None:
        check_mode("ModelCheckpoint", mode)
        if every_n_steps is not None:
            every_n_steps = check_int("ModelCheckpoint", "every_n_steps", every_n_steps, 1)
        self.every_n_steps = every_n_steps
        self.path = Path(path).absolute()
        self.monitor, self.mode, self.overwrite = monitor, mode, overwrite
        self.lock_timeout = check_timeout("ModelCheckpoint", lock_timeout)
        self._lock = None
        self.best_step: int | None = None
        self.best_value: float | None = None
        self.last_step: int | None = None
        self.skipped: list[int] = []
        self._best_score = -math.inf
        self._manager = None

    def on_fit_start(self, trainer: Trainer, task: Task) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = writer_lock(self.path, "ModelCheckpoint", self.lock_timeout)
        try:
            self._open(trainer)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _open(self, trainer) -> None:
        _check_metrics(self.path)  # orbax reads them all to rank steps, and fails unreadably
        steps = manager(self.path, keep_best_and_last=True, asynchronous=True)
        first = getattr(trainer, "start_epoch", 0)
        if self.every_n_steps is not None:  # steps are global steps; the fit resumes after one
            first = getattr(trainer, "start_step", 0) + 1
        later = [step for step in steps.all_steps() if step >= first]
        if later and not self.overwrite:
            steps.close()
            raise FileExistsError(
                f"ModelCheckpoint: {self.path} already holds steps {sorted(later)} (an earlier "
                f"run's), at or after epoch {first} where this fit starts; orbax would skip "
                "saving those epochs. Fix: resume with start_epoch (digits.py: --resume), use "
                "another directory, or pass overwrite=True to delete them."
            )
        for step in later:
            steps.delete(step)
        self.best_step = self.best_value = self.last_step = None
        self.skipped = []
        self._best_score = -math.inf
        self._manager = steps
        self._seen = getattr(trainer, "start_step", 0) // (self.every_n_steps or 1)

    def on_step_end(self, trainer: Trainer, task: Task, step: int) -> None:
        if self.every_n_steps is None or step // self.every_n_steps == self._seen:
            return
        self._seen = step // self.every_n_steps
        self._save_step(trainer, task, step)

    def on_save_request(self, trainer: Trainer, task: Task, request: SaveRequest) -> None:
        """Save the current step for ``request`` (a stop's: ``max_time``) with
        ``every_n_steps``, unless this step is saved already; either way its directory is
        added to ``request.saved``. Nothing is saved once the fit's training loss was read
        not finite (as for every save). Epoch checkpoints save at the epoch's end only."""
        step = trainer.global_step
        if self.every_n_steps is None:
            return
        if self.last_step != step and not self._save_step(trainer, task, step):
            return
        request.saved.append(self.path / str(step))

    def _save_step(self, trainer: Trainer, task: Task, step: int) -> bool:
        objects = {
            **task.checkpoint_objects(),
            **callback_objects(trainer, task),
            "trainer": trainer,
        }
        loader = trainer.loader_position()  # of the batches consumed, not those prefetched
        if loader is not None:
            objects["loader"] = loader
        rows = [row for row in trainer.history if self.monitor in row]
        value = float(rows[-1][self.monitor]) if rows else math.nan
        return self._save(trainer, step, objects, {"step": float(step), self.monitor: value}, value)

    def on_epoch_end(self, trainer: Trainer, task: Task, metrics: dict) -> None:
        if self.every_n_steps is not None:
            return
        value = monitored("ModelCheckpoint", self.monitor, metrics)
        epoch = int(metrics["epoch"])
        objects = {**task.checkpoint_objects(), **callback_objects(trainer, task)}
        if "epoch" in objects:
            raise ValueError(
                "ModelCheckpoint adds 'epoch' itself; task.checkpoint_objects() must not contain it"
            )
        self._save(trainer, epoch, {**objects, "epoch": epoch}, metrics, value)

    def _save(self, trainer, step: int, objects: dict, metrics: dict, value: float) -> bool:
        """Save ``objects`` as ``step`` (the epoch, or the global step), ranked by ``value``
        (a non-finite value ranks last). Not when the fit's training loss was read not finite
        (``trainer.nonfinite``, by this save's own read of the Trainer's totals too): that
        state is never the best, and under keep-the-best-and-last it would replace the last
        good step; the step goes to ``skipped``. Returns whether it saved."""
        signed = value if self.mode == "max" else -value
        signed = signed if math.isfinite(signed) else math.nan
        manager = self._manager
        assert manager is not None, "ModelCheckpoint saves only between on_fit_start and its end"
        args = save_args(objects)  # reads the arrays (the Trainer's totals: one device read)
        if getattr(trainer, "nonfinite", None) is not None:
            self.skipped.append(step)
            return False
        saved = manager.save(step, args=args, metrics={**metrics, "_score": signed})
        if not saved:
            raise FileExistsError(
                f"ModelCheckpoint: {'step' if self.every_n_steps else 'epoch'} {step} was not "
                f"saved: {self.path} already holds steps {sorted(manager.all_steps())} "
                "and orbax only saves a step after the latest. Fix: use another directory, "
                "resume with start_epoch, or pass overwrite=True."
            )
        self.last_step = step
        rank = score({"_score": signed})  # as orbax ranks the step: NaN ranks last
        if self.best_step is None or rank > self._best_score:
            self.best_step, self.best_value, self._best_score = step, value, rank
        return True

    def on_fit_end(self, trainer: Trainer, task: Task) -> None:
        try:
            if self._manager is not None:
                self._manager.wait_until_finished()
                self._manager.close()
                self._manager = None
        finally:
            self._release()

    @property
    def best_path(self) -> Path | None:
        """The directory of the best step saved in this fit (None before the first save)."""
        return None if self.best_step is None else self.path / str(self.best_step)
