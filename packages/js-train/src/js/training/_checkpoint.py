"""Checkpoints through orbax-checkpoint: save_checkpoint, load_checkpoint, checkpoint_info,
ModelCheckpoint.

A checkpoint directory ``path`` is an orbax ``CheckpointManager`` root; each saved step is a
subdirectory ``path/<step>/`` holding one orbax item per stateful object (model, optimizer,
``js.Rngs``: their ``state_dict()`` arrays, each on its devices and sharding), a JSON ``meta``
item (the kinds of the objects, plain values such as the epoch, and a shape, dtype and content
digest per array, with a random save id shared by all items) and, for ModelCheckpoint, the
epoch's ``metrics``. The layout is in ``_ckpt_format``, the digests in ``_ckpt_digest``, the
writer lock in ``_ckpt_lock``; the reading half of the format (shared with js-nn's
``read_checkpoint``) in ``js.nn.checkpoint_format``.

Promises. Nothing is pickled. A step becomes visible by an atomic rename when complete, so a
process killed during a save leaves the previous steps intact. One writer at a time holds the
directory's lock. A load reads only the items of the objects it is given, checks the meta, the
save ids and every digest of what it will copy before it touches any object, and raises one
:class:`CheckpointError` naming the directory, step and part when a step is damaged (another
step still loads). Sharded arrays are written shard by shard by the processes that hold them
(metadata by the primary process) and restored onto the *current* sharding of each object's
arrays: a checkpoint moves between device counts and mesh shapes bit for bit.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp

import js
import js.optim
from js.nn.checkpoint_format import read_json
from js.nn.checkpoint_format import score as _score

from ._callbacks import Callback, check_mode, monitored
from ._checks import check_int
from ._ckpt_format import FORMAT, CheckpointError, build_item, flatten, item_name
from ._ckpt_lock import DirectoryLock, check_timeout

__all__ = ["FORMAT", "CheckpointError"]


def _manager(path, ranked=True, preservation=None, asynchronous=False):
    """A CheckpointManager on ``path``; ``ranked`` ranks steps by their ``_score`` metric
    (reading every step's metrics when it opens; unranked it reads none)."""
    options = ocp.CheckpointManagerOptions(
        best_fn=_score if ranked else None, best_mode="max", preservation_policy=preservation,
        enable_async_checkpointing=asynchronous, lightweight_initialize=not ranked,
    )
    # Array items are written without zstd: weights compress to ~0.92 of their size at best,
    # and the compressor's buffers and CPU time made a 200 MB save need 1.2x the model in
    # extra host memory and take 3-5x as long (uncompressed: 0.3x). Readers need no option:
    # each array's metadata says how it is stored, so compressed steps still load.
    registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
    registry.add(None, ocp.args.PyTreeSave, ocp.PyTreeCheckpointHandler(use_compression=False))
    return ocp.CheckpointManager(Path(path).absolute(), options=options, handler_registry=registry)


def _kind(name: str, obj) -> str:
    if isinstance(obj, js.Module):
        return "module"
    if isinstance(obj, js.Rngs):
        return "rngs"
    if all(callable(getattr(obj, attr, None)) for attr in ("state_dict", "load_state_dict")):
        return "state"
    try:
        json.dumps(obj)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"checkpoint object {name!r} is a {type(obj).__name__}: neither stateful (no "
            f"state_dict/load_state_dict) nor a plain JSON value ({error})"
        ) from None
    return "value"


def _kinds(objects: Mapping) -> dict[str, str]:
    """``{name: kind}`` of ``objects``, after checking the names (no state is read)."""
    if not isinstance(objects, Mapping) or not objects:
        raise TypeError("checkpoint objects must be a non-empty {name: object} dict")
    kinds = {}
    for name, obj in objects.items():
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"checkpoint object names must be non-empty strings without '.', "
                             f"got {name!r}")
        kinds[name] = _kind(name, obj)
    return kinds


def _live(name: str, obj) -> dict:
    """``{dotted.key: array}`` of a stateful object: js's own objects give their live
    ``jax.Array``s (no host copy; sharded arrays stay sharded), others their ``state_dict()``."""
    native = isinstance(obj, (js.Module, js.Rngs, js.optim.Optimizer))
    flat = flatten(obj.state_dict(as_numpy=False) if native else obj.state_dict())
    for key, value in flat.items():
        if not isinstance(value, (jax.Array, np.ndarray)):
            array = np.asarray(value) if np.ndim(value) >= 0 else None
            if array is None or array.dtype == object:
                raise TypeError(f"checkpoint object {name!r}: state_dict entry {key!r} is a "
                                f"{type(value).__name__}, not an array")
            flat[key] = array
    return flat


def _save_id() -> bytes:
    """16 random bytes, the same in every process of a job (the primary's)."""
    save_id = np.frombuffer(os.urandom(16), np.uint8)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        save_id = np.asarray(multihost_utils.broadcast_one_to_all(save_id))
    return bytes(save_id)


def save_args(objects: Mapping) -> ocp.args.Composite:
    """The orbax arguments that save ``objects``: built (digests included) before anything is
    written, so that a refused save leaves nothing on disk."""
    kinds, save_id = _kinds(objects), _save_id()
    meta = {"format": FORMAT, "save_id": save_id.hex(), "kinds": kinds, "values": {},
            "items": {}}
    items = {}
    for name, obj in objects.items():
        if kinds[name] == "value":
            meta["values"][name] = obj
            continue
        tree, meta["items"][name] = build_item(_live(name, obj), save_id)
        items[item_name(name)] = ocp.args.PyTreeSave(tree)
    return ocp.args.Composite(meta=ocp.args.JsonSave(meta), **items)


def _writer_lock(path: Path, owner: str, timeout: float) -> DirectoryLock | None:
    """The directory's writer lock, held by the primary process; every process of a job
    learns whether the primary got it."""
    lock, error = None, None
    if jax.process_index() == 0:
        try:
            lock = DirectoryLock(path, owner, timeout).acquire()
        except TimeoutError as caught:
            error = caught
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        got = multihost_utils.broadcast_one_to_all(np.int32(error is None))
        if not int(got) and error is None:
            error = TimeoutError(f"{owner}: the primary process could not lock {path}")
    if error is not None:
        raise error
    return lock


def save_checkpoint(path, objects: Mapping, *, step: int | None = None,
                    lock_timeout: float = 0.0) -> int:
    """Save ``objects`` (``{name: model | optimizer | js.Rngs | plain value}``) under ``path``.

    Args:
        path: the checkpoint directory (created if missing); several steps can live there.
        objects: what to save, e.g. ``{**task.checkpoint_objects(), 'epoch': 3}``.
        step: the step number; by default one after the latest step in ``path`` (or 0). It
            must be after the latest step there: an earlier or existing one raises
            FileExistsError (orbax would skip it without a word).
        lock_timeout: seconds to wait for another writer of ``path`` to finish; by default a
            directory another process is writing raises TimeoutError at once.

    Returns the step saved. The save is synchronous, atomic and holds the directory's writer
    lock from choosing the step to the commit. In a multi-process job every process calls it.

    Example:
        >>> save_checkpoint("ckpt", {"model": model, "epoch": 3})  # doctest: +SKIP
    """
    if step is not None:
        step = check_int("save_checkpoint step", step, 0)
    lock_timeout = check_timeout("save_checkpoint", lock_timeout)
    args = save_args(objects)  # every check and digest before the directory exists
    path = Path(path).absolute()
    path.mkdir(parents=True, exist_ok=True)
    lock = _writer_lock(path, "save_checkpoint", lock_timeout)
    try:
        manager = _manager(path, ranked=False)
        try:
            if step is None:
                latest = manager.latest_step()
                step = 0 if latest is None else latest + 1
            if not manager.save(step, args=args):
                raise FileExistsError(
                    f"save_checkpoint: step {step} was not saved: {path} already holds steps "
                    f"{sorted(manager.all_steps())} and orbax only saves a step after the "
                    "latest. Fix: pass a larger step, or step=None for the next one."
                )
            manager.wait_until_finished()
        finally:
            manager.close()
    finally:
        if lock is not None:
            lock.release()
    return step
def _check_metrics(path: Path) -> None:
    """Refuse a directory holding a step whose metrics cannot be read, naming the steps."""
    broken = []
    for step in sorted(int(p.name) for p in path.iterdir() if p.name.isdigit() and p.is_dir()):
        if (path / str(step) / "metrics").exists():
            try:
                read_json(path / str(step) / "metrics" / "metrics")
            except (OSError, ValueError):
                broken.append(step)
    if broken:
        raise CheckpointError(
            path, None, f"the metrics of steps {broken}", "cannot be read, and ModelCheckpoint "
            "ranks every step by them", f"delete those steps ({path}/<step>) or use another "
            "directory")


class ModelCheckpoint(Callback):
    """Save the task's checkpoint after every epoch, keeping the best and the last.

    The payload is ``{**task.checkpoint_objects(), 'epoch': epoch}`` (model parameters and
    buffers, optimizer state and step count, Rngs state, epoch) in the format described in
    this module, under ``path/<epoch>``. Saves run in the background while training goes on
    and are atomic. ``load_checkpoint(path, objects)`` restores the best; ``which='last'`` the
    last.

    A directory that already holds steps at or after the fit's first epoch (an earlier run's)
    is refused when the fit starts, since orbax would silently skip saving those epochs:
    resume with ``fit(..., start_epoch=restored_epoch + 1)``, use another directory, or pass
    ``overwrite=True``. Steps before the first epoch (those a resumed run continues from) are
    kept and still compete for best.

    With ``every_n_steps=n`` it saves every ``n`` global steps instead (at the end of the
    dispatch that reaches a multiple of ``n``), under ``path/<step>``, with the payload
    ``{**task.checkpoint_objects(), 'trainer': trainer[, 'loader': train_data]}``: the
    Trainer's position (epoch, step, the epoch's running totals) and, when the training data
    has ``state_dict``/``load_state_dict`` (ArrayLoader), its position in the epoch. Restore
    those objects with ``load_checkpoint`` and call ``fit(..., resume=True)``: training
    continues on the next batch, bit for bit as if never interrupted. A step save is ranked
    by ``monitor`` in the latest row that has it (the last validation), unranked before.
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

    def __init__(self, path, monitor: str = "val/loss", mode: str = "min", *,
                 overwrite: bool = False, every_n_steps: int | None = None,
                 lock_timeout: float = 0.0):
        check_mode("ModelCheckpoint", mode)
        if every_n_steps is not None:
            every_n_steps = check_int("ModelCheckpoint every_n_steps", every_n_steps, 1)
        self.every_n_steps = every_n_steps
        self.path = Path(path).absolute()
        self.monitor, self.mode, self.overwrite = monitor, mode, overwrite
        self.lock_timeout = check_timeout("ModelCheckpoint", lock_timeout)
        self._lock = None
        self.best_step: int | None = None
        self.best_value: float | None = None
        self.last_step: int | None = None
        self._best_score = -math.inf
        self._manager = None

    def on_fit_start(self, trainer, task) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = _writer_lock(self.path, "ModelCheckpoint", self.lock_timeout)
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
        keep = ocp.checkpoint_managers
        policy = keep.AnyPreservationPolicy([keep.LatestN(n=1),
                                             keep.BestN(get_metric_fn=_score, n=1)])
        manager = _manager(self.path, preservation=policy, asynchronous=True)
        first = getattr(trainer, "start_epoch", 0)
        if self.every_n_steps is not None:  # steps are global steps; the fit resumes after one
            first = getattr(trainer, "start_step", 0) + 1
        later = [step for step in manager.all_steps() if step >= first]
        if later and not self.overwrite:
            manager.close()
            raise FileExistsError(
                f"ModelCheckpoint: {self.path} already holds steps {sorted(later)} (an earlier "
                f"run's), at or after epoch {first} where this fit starts; orbax would skip "
                "saving those epochs. Fix: resume with start_epoch (digits.py: --resume), use "
                "another directory, or pass overwrite=True to delete them."
            )
        for step in later:
            manager.delete(step)
        self.best_step = self.best_value = self.last_step = None
        self._best_score = -math.inf
        self._manager = manager
        self._seen = getattr(trainer, "start_step", 0) // (self.every_n_steps or 1)

    def on_step_end(self, trainer, task, step: int) -> None:
        if self.every_n_steps is None or step // self.every_n_steps == self._seen:
            return
        self._seen = step // self.every_n_steps
        objects = {**task.checkpoint_objects(), "trainer": trainer}
        data = trainer.train_data
        if all(callable(getattr(data, name, None)) for name in ("state_dict", "load_state_dict")):
            objects["loader"] = data
        rows = [row for row in trainer.history if self.monitor in row]
        value = float(rows[-1][self.monitor]) if rows else math.nan
        self._save(step, objects, {"step": float(step), self.monitor: value}, value)

    def on_epoch_end(self, trainer, task, metrics: dict) -> None:
        if self.every_n_steps is not None:
            return
        value = monitored("ModelCheckpoint", self.monitor, metrics)
        epoch = int(metrics["epoch"])
        objects = task.checkpoint_objects()
        if "epoch" in objects:
            raise ValueError("ModelCheckpoint adds 'epoch' itself; task.checkpoint_objects() "
                             "must not contain it")
        self._save(epoch, {**objects, "epoch": epoch}, metrics, value)

    def _save(self, step: int, objects: dict, metrics: dict, value: float) -> None:
        """Save ``objects`` as ``step`` (the epoch, or the global step), ranked by ``value``."""
        score = value if self.mode == "max" else -value
        saved = self._manager.save(step, args=save_args(objects),
                                   metrics={**metrics, "_score": score})
        if not saved:
            raise FileExistsError(
                f"ModelCheckpoint: {'step' if self.every_n_steps else 'epoch'} {step} was not "
                f"saved: {self.path} already holds steps {sorted(self._manager.all_steps())} "
                "and orbax only saves a step after the latest. Fix: use another directory, "
                "resume with start_epoch, or pass overwrite=True."
            )
        self.last_step = step
        rank = _score({"_score": score})  # as orbax ranks the step: NaN ranks last
        if self.best_step is None or rank > self._best_score:
            self.best_step, self.best_value, self._best_score = step, value, rank

    def on_fit_end(self, trainer, task) -> None:
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
