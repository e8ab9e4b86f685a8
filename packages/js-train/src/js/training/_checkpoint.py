"""ModelCheckpoint: the Trainer's checkpoints, through js-nn's checkpoint package.

The format, the digests, the writer lock, ``save_checkpoint``, ``load_checkpoint`` and the
restore onto current shardings live in :mod:`js.nn.checkpoint` (an inference install of js-core
and js-nn reads what is saved here). What is js-train's own is what to save and when: the
payload ``{**task.checkpoint_objects(), 'epoch': epoch}`` after every epoch, or with
``every_n_steps`` the Trainer's position (``'trainer'``) and the loader's (``'loader'``), and
how steps are ranked (by the monitored metric) and kept (the ``save_top_k`` best and the last).
And js-train's :func:`save_checkpoint` and :func:`load_checkpoint`: js-nn's, which also take
a grain pipeline as the ``'loader'`` entry beside the ``'trainer'`` that trains on it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from js._checks import check_int
from js.nn import checkpoint as nn_checkpoint
from js.nn.checkpoint.format import (
    CheckpointError,
    manager,
    read_json,
    read_metrics,
    score,
    steps_in,
)
from js.nn.checkpoint.lock import check_timeout, writer_lock
from js.nn.checkpoint.quiet import named_write_errors
from js.nn.checkpoint.write import save_args

from ._callbacks import (
    Callback,
    SaveRequest,
    callback_objects,
    check_mode,
    monitored,
    step_objects,
)
from ._protocol import TrainerView as Trainer  # the hooks' trainer: any TrainerView
from .data._positions import check_consumed, with_positions

if TYPE_CHECKING:  # the hooks' argument type (no cycle: _task imports no callback)
    from ._task import Task


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


def _check_top_k(save_top_k) -> int:
    save_top_k = check_int("ModelCheckpoint", "save_top_k", save_top_k, None)
    if save_top_k < -1:
        raise ValueError(
            f"ModelCheckpoint: save_top_k must be an int >= -1, got {save_top_k}. Fix: pass "
            "save_top_k=k to keep the k best steps and the last, 0 to keep only the last, or -1 "
            "to keep every step"
        )
    return save_top_k


class ModelCheckpoint(Callback):
    """Save the task's checkpoint after every epoch, keeping the ``save_top_k`` best and the last.

    The payload is ``{**task.checkpoint_objects(), 'epoch': epoch}`` (model parameters and
    buffers, optimizer state and step count, Rngs state, epoch; and each callback's
    ``checkpoint_objects(trainer, task)``, e.g. WeightAveraging's average) in the format
    described in this module, under ``path/<epoch>``. Saves run in the background while training
    goes on and are atomic. ``load_checkpoint(path, objects)`` restores the best;
    ``which='last'`` the last.

    Which steps stay (Lightning's ``save_top_k``): after each save, the new step (the last, the
    one a resume continues from) and the ``save_top_k`` best by ``monitor`` in ``mode``; a
    ``monitor`` value that is not finite (NaN, inf) ranks below every number and a tie goes to
    the later step, as ``load_checkpoint(which='best')`` chooses. Every other step is deleted,
    only once the new step is complete, so a complete last step is always on disk.
    ``save_top_k=1`` (the default) keeps the best and the last (one step when they coincide),
    ``-1`` every step, ``0`` only the last (a run to resume, no step kept for its score).
    Steps an earlier run left in ``path`` before this fit's first epoch (or step) compete with
    the new ones; a step without metrics (one ``save_checkpoint`` wrote) is never ranked nor
    deleted. ``best_k_models`` maps the kept best steps' directories to their ``monitor``
    values, best first; ``best_step``, ``best_value`` and ``best_path`` give the first of them
    (None with ``save_top_k=0``, or before any ranked step): the step
    ``load_checkpoint(path, which='best')`` loads.

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
    ``load_checkpoint`` (``'loader'``: the ArrayLoader or grain pipeline itself, or
    ``trainer.loader_position(train_data)``) and call ``fit(..., resume=True)``: training
    continues on the next batch, bit for bit as if never interrupted. A step save is ranked
    by ``monitor`` in the latest row that has it (the last validation), unranked before.
    A stop that asks for a save (``Trainer(max_time=...)``, ``trainer.stop(reason,
    save=True)``, ``trainer.request_save(reason)``: :meth:`on_save_request`) saves the step it
    stops at in the same way, so the resumed fit continues from there; epoch checkpoints are
    saved at epoch ends only (a stop mid-epoch saves that partial epoch at its end, as before).
    Once the fit's training loss is read not finite (``trainer.nonfinite``: a log, an epoch's
    end, or this save's own read of the Trainer's totals), no later step is saved: its steps go
    to ``skipped``, and the last good step stays the last.
    The directory's writer lock is held from the fit's start to its end: a second writer
    (another process's save or fit) is refused at once, or waits ``lock_timeout`` seconds.

    Args:
        path: the checkpoint directory.
        monitor: the metric that ranks checkpoints, e.g. ``'val/loss'``.
        mode: ``'min'`` or ``'max'``: whether a lower or a higher ``monitor`` is better.
        save_top_k: how many of the best steps to keep beside the last (an int >= -1; -1:
            every step, 0: only the last).
        overwrite: delete the steps at or after the fit's first epoch (every step, for a fit
            from epoch 0) when the fit starts, instead of refusing.
        every_n_steps: save every this many global steps (>= 1) instead of every epoch.
        lock_timeout: seconds to wait for another writer of ``path`` when the fit starts.

    Example:
        >>> checkpoint = ModelCheckpoint("runs/digits/checkpoints", monitor="val/accuracy",
        ...                              mode="max", save_top_k=3)
        >>> checkpoint.best_k_models  # filled as the fit saves: {path: val/accuracy}
        {}
        >>> Trainer(10, callbacks=[checkpoint])  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike,
        monitor: str = "val/loss",
        mode: str = "min",
        *,
        save_top_k: int = 1,
        overwrite: bool = False,
        every_n_steps: int | None = None,
        lock_timeout: float = 0.0,
    ) -> None:
        check_mode("ModelCheckpoint", mode)
        if every_n_steps is not None:
            every_n_steps = check_int("ModelCheckpoint", "every_n_steps", every_n_steps, 1)
        self.every_n_steps = every_n_steps
        self.save_top_k = _check_top_k(save_top_k)
        self.path = Path(path).absolute()
        self.monitor, self.mode, self.overwrite = monitor, mode, overwrite
        self.lock_timeout = check_timeout("ModelCheckpoint", lock_timeout)
        self._lock = None
        self.last_step: int | None = None
        self.skipped: list[int] = []
        self._ranked: dict[int, tuple[float, float]] = {}  # step on disk: (score, value)
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
        top_k = None if self.save_top_k == -1 else self.save_top_k
        steps = manager(self.path, keep_best=top_k, asynchronous=True)
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
        self.last_step = None
        self.skipped = []
        self._ranked = {}
        for step in [step for step in steps_in(self.path) if step < first]:
            metrics = read_metrics(self.path, step)  # these steps compete with the fit's own
            if metrics is not None:  # a step save_checkpoint wrote is not ranked
                signed = metrics.get("_score") if isinstance(metrics, dict) else None
                signed = float(signed) if isinstance(signed, (int, float)) else math.nan
                value = signed if self.mode == "max" else -signed
                self._ranked[step] = (score(metrics), value)
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
        objects = step_objects(trainer, task)
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
        state is never the best, and as the new last step it would let the manager delete the
        last good one; the step goes to ``skipped``. Returns whether it saved."""
        signed = value if self.mode == "max" else -value
        signed = signed if math.isfinite(signed) else math.nan
        manager = self._manager
        assert manager is not None, "ModelCheckpoint saves only between on_fit_start and its end"
        args = save_args(objects)  # reads the arrays (the Trainer's totals: one device read)
        if getattr(trainer, "nonfinite", None) is not None:
            self.skipped.append(step)
            return False
        # a failed earlier (background) save is raised by the next one
        with named_write_errors("ModelCheckpoint: a step", self.path):
            saved = manager.save(step, args=args, metrics={**metrics, "_score": signed})
        if not saved:
            raise FileExistsError(
                f"ModelCheckpoint: {'step' if self.every_n_steps else 'epoch'} {step} was not "
                f"saved: {self.path} already holds steps {sorted(manager.all_steps())} "
                "and orbax only saves a step after the latest. Fix: use another directory, "
                "resume with start_epoch, or pass overwrite=True."
            )
        self.last_step = step
        self._ranked[step] = (score({"_score": signed}), value)  # as orbax ranks it: NaN last
        if self.save_top_k != -1:  # what the manager deletes once the step is complete
            kept = {*self._top(), step}
            self._ranked = {s: ranked for s, ranked in self._ranked.items() if s in kept}
        return True

    def on_fit_end(self, trainer: Trainer, task: Task) -> None:
        try:
            if self._manager is not None:
                manager, self._manager = self._manager, None
                try:
                    with named_write_errors("ModelCheckpoint: a step", self.path):
                        manager.wait_until_finished()
                finally:
                    manager.close()
        finally:
            self._release()

    def _top(self) -> list[int]:
        """The ranked steps kept for their score, best first (ties: the later step first)."""
        best = sorted(self._ranked, key=lambda step: (self._ranked[step][0], step), reverse=True)
        return best if self.save_top_k == -1 else best[: self.save_top_k]

    @property
    def best_k_models(self) -> dict[Path, float]:
        """``{step directory: monitor value}`` of the steps kept for their score, best first
        (earlier runs' steps the fit continues from among them; NaN for an unranked step)."""
        return {self.path / str(step): self._ranked[step][1] for step in self._top()}

    @property
    def best_step(self) -> int | None:
        """The best step in ``path``, the one ``load_checkpoint(path, which='best')`` loads
        (None with ``save_top_k=0`` or before any ranked step)."""
        top = self._top()
        return top[0] if top else None

    @property
    def best_value(self) -> float | None:
        """The ``monitor`` value of :attr:`best_step` (None when there is none)."""
        step = self.best_step
        return None if step is None else self._ranked[step][1]

    @property
    def best_path(self) -> Path | None:
        """The directory of :attr:`best_step` (None when there is none)."""
        step = self.best_step
        return None if step is None else self.path / str(step)


def save_checkpoint(
    path: str | os.PathLike,
    objects: Mapping[str, Any],
    *,
    step: int | None = None,
    lock_timeout: float = 0.0,
) -> int:
    """Save ``objects`` under ``path``: :func:`js.nn.checkpoint.save_checkpoint` (its
    arguments, format and checks), where an entry may also be the training data itself.

    A grain pipeline (``MapDataset``, ``IterDataset`` or ``DataLoader``) has no position of its
    own (each of its iterators has one); the Trainer among ``objects`` knows where its steps
    are in it, so ``{..., 'trainer': trainer, 'loader': pipeline}`` saves
    ``trainer.loader_position(pipeline)``: grain's iterator state after the last batch a step
    consumed. An ArrayLoader saves its own position.

    Returns the step saved.

    Example:
        >>> save_checkpoint("ckpt", {**task.checkpoint_objects(), "trainer": trainer,
        ...                          "loader": pipeline})  # doctest: +SKIP
    """
    objects, pipelines = with_positions(objects, "save_checkpoint")
    check_consumed(objects, pipelines)
    return nn_checkpoint.save_checkpoint(path, objects, step=step, lock_timeout=lock_timeout)


def load_checkpoint(
    path: str | os.PathLike, objects: Mapping[str, Any], which: str | int = "best"
) -> dict:
    """Restore ``objects`` in place from ``path``: :func:`js.nn.checkpoint.load_checkpoint`
    (its arguments, checks and result), where an entry may also be the training data itself.

    A grain pipeline (``MapDataset``, ``IterDataset`` or ``DataLoader``) next to the
    ``'trainer'`` that will train on it stands for ``trainer.loader_position(pipeline)``: its
    saved iterator state is checked with everything else, and the next
    ``trainer.fit(task, pipeline, resume=True)`` continues on the batch after the saved one.
    The result names the pipeline itself.

    Example:
        >>> objects = {**task.checkpoint_objects(), "trainer": trainer,
        ...            "loader": pipeline}  # doctest: +SKIP
        >>> load_checkpoint(path, objects, which="last")  # doctest: +SKIP
        >>> trainer.fit(task, pipeline, resume=True)  # doctest: +SKIP
    """
    positions, pipelines = with_positions(objects, "load_checkpoint")
    return {**nn_checkpoint.load_checkpoint(path, positions, which), **pipelines}
