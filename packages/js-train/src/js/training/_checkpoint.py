"""Checkpoints through orbax-checkpoint: save_checkpoint, load_checkpoint, ModelCheckpoint.

Format. A checkpoint directory ``path`` is an orbax ``CheckpointManager`` root; each saved step
is a subdirectory ``path/<step>/`` holding:

- ``state``: an orbax ``StandardSave`` of the NumPy tree ``{name: obj.state_dict()}`` for every
  stateful object: a model's parameters and buffers (``'fc.weight': array``), an optimizer's
  state and step count (its own ``state_dict()``), a ``js.Rngs``'s keys and counters.
- ``meta``: JSON ``{"format": "js.training/1", "kinds": {name: kind}, "values": {name: value}}``
  where ``kind`` is ``'module'``, ``'rngs'``, ``'state'`` (any other object with
  ``state_dict``/``load_state_dict``, e.g. an optimizer) or ``'value'`` (a plain JSON value
  such as the epoch, kept in ``values``).
- ``metrics`` (ModelCheckpoint only): the epoch's metrics, plus ``_score`` used to rank them.

Nothing is pickled. orbax writes each step into a temporary directory and renames it when
complete, so a process killed during a save leaves the previous steps intact and restorable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import orbax.checkpoint as ocp

import js

from ._callbacks import Callback, check_mode, monitored
from ._checks import check_int, is_int

FORMAT = "js.training/1"
_ITEMS = ("state", "meta")


def _score(metrics) -> float:
    score = metrics.get("_score") if isinstance(metrics, Mapping) else None
    return -math.inf if score is None or math.isnan(score) else float(score)


def _manager(path, ranked=True, preservation=None, asynchronous=False):
    """A CheckpointManager on ``path``; ``ranked`` ranks steps by their ``_score`` metric."""
    options = ocp.CheckpointManagerOptions(
        best_fn=_score if ranked else None, best_mode="max", preservation_policy=preservation,
        enable_async_checkpointing=asynchronous,
    )
    return ocp.CheckpointManager(Path(path).absolute(), item_names=_ITEMS, options=options)


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


def _numpy_tree(tree):
    if isinstance(tree, Mapping):
        return {str(key): _numpy_tree(value) for key, value in tree.items()}
    return np.asarray(tree)


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


def payload(objects: Mapping) -> tuple[dict, dict]:
    """The ``(state, meta)`` pair saved for ``objects`` (see the module docstring)."""
    kinds = _kinds(objects)
    state, meta = {}, {"format": FORMAT, "kinds": kinds, "values": {}}
    for name, obj in objects.items():
        if kinds[name] == "value":
            meta["values"][name] = obj
        else:
            state[name] = _numpy_tree(obj.state_dict())
    return state, meta


def save_args(objects: Mapping) -> ocp.args.Composite:
    """The orbax arguments that save ``objects`` (an empty state tree is left out)."""
    state, meta = payload(objects)
    items = {"meta": ocp.args.JsonSave(meta)}
    if state:
        items["state"] = ocp.args.StandardSave(state)
    return ocp.args.Composite(**items)


def save_checkpoint(path, objects: Mapping, *, step: int | None = None) -> int:
    """Save ``objects`` (``{name: model | optimizer | js.Rngs | plain value}``) under ``path``.

    Args:
        path: the checkpoint directory (created if missing); several steps can live there.
        objects: what to save, e.g. ``{**task.checkpoint_objects(), 'epoch': 3}``.
        step: the step number; by default one after the latest step in ``path`` (or 0). It
            must be after the latest step there: an earlier or existing one raises
            FileExistsError (orbax would skip it without a word).

    Returns the step saved. The save is synchronous and atomic.

    Example:
        >>> save_checkpoint("ckpt", {"model": model, "epoch": 3})  # doctest: +SKIP
    """
    if step is not None:
        step = check_int("save_checkpoint step", step, 0)
    manager = _manager(path, ranked=False)
    try:
        if step is None:
            latest = manager.latest_step()
            step = 0 if latest is None else latest + 1
        if not manager.save(step, args=save_args(objects)):
            raise FileExistsError(
                f"save_checkpoint: step {step} was not saved: {path} already holds steps "
                f"{sorted(manager.all_steps())} and orbax only saves a step after the latest. "
                "Fix: pass a larger step, or step=None for the next one."
            )
        manager.wait_until_finished()
    finally:
        manager.close()
    return step


def _flat(tree, prefix=()) -> dict:
    if isinstance(tree, Mapping):
        out = {}
        for key, value in tree.items():
            out.update(_flat(value, (*prefix, str(key))))
        return out
    array = np.asarray(tree)
    return {".".join(prefix): (list(array.shape), str(array.dtype))}


def _problems(ours: dict, current: dict, meta: dict, state: dict) -> list[str]:
    """Every difference between the objects (their kinds ``ours`` and state dicts
    ``current``) and a saved checkpoint, as readable lines."""
    kinds = meta.get("kinds", {})
    problems = []
    missing = [name for name in ours if name not in kinds]
    unexpected = [name for name in kinds if name not in ours]
    if missing:
        problems.append(f"objects not in the checkpoint: {missing}")
    if unexpected:
        problems.append(f"checkpoint entries not among the objects: {unexpected}")
    for name, kind in ours.items():
        if name not in kinds:
            continue
        if kind != kinds[name]:
            problems.append(f"{name!r}: expected a {kind}, the checkpoint holds a {kinds[name]}")
            continue
        if kind == "value":
            continue
        want, got = _flat(current[name]), _flat(state.get(name, {}))
        for key in want.keys() - got.keys():
            problems.append(f"{name!r}: {key!r} missing from the checkpoint")
        for key in got.keys() - want.keys():
            problems.append(f"{name!r}: unexpected {key!r} in the checkpoint")
        for key in sorted(want.keys() & got.keys()):
            if want[key] != got[key]:
                problems.append(f"{name!r}: {key!r}: expected {want[key][0]} {want[key][1]}, "
                                f"checkpoint has {got[key][0]} {got[key][1]}")
    return problems


def _like(saved, current):
    """``saved`` (NumPy, from disk) in the container and scalar types of ``current``."""
    if isinstance(current, Mapping):
        return {key: _like(saved[str(key)], value) for key, value in current.items()}
    if isinstance(current, (bool, int, float)) and not isinstance(current, np.generic):
        return type(current)(saved)
    return saved


def _select(manager, path, which) -> int:
    steps = manager.all_steps()
    if not steps:
        raise FileNotFoundError(f"load_checkpoint: no complete checkpoint in {path}")
    if which == "best":
        best = manager.best_step()
        return manager.latest_step() if best is None else best
    if which == "last":
        return manager.latest_step()
    if is_int(which):
        which = int(which)
        if which not in steps:
            raise ValueError(f"load_checkpoint: no step {which} in {path}; steps: {sorted(steps)}")
        return which
    raise ValueError(
        f"load_checkpoint which must be 'best', 'last' or a step number, got {which!r}"
    )


def load_checkpoint(path, objects: Mapping, which="best") -> dict:
    """Restore ``objects`` in place from the checkpoint directory ``path``.

    Strict and all or nothing: the checkpoint is read, then every object name, kind, array
    path, shape and dtype is compared with ``objects``; any difference raises one ValueError
    listing them all, before anything is copied. Then each object's own strict
    ``load_state_dict`` copies its arrays.

    Args:
        path: a directory written by :func:`save_checkpoint` or :class:`ModelCheckpoint`.
        objects: ``{name: object}`` as saved (plain values included, e.g. ``'epoch': 0``).
        which: ``'best'`` (the best monitored step of a ModelCheckpoint; the latest when no
            step has metrics), ``'last'``, or a step number.

    Returns ``objects`` with plain values replaced by the saved ones and ``'step'`` added when
    not an object name, e.g. ``{'model': model, 'epoch': 3, 'step': 3}``.

    Example:
        >>> restored = load_checkpoint("runs/digits/checkpoints", task.checkpoint_objects()
        ...                            | {"epoch": 0}, which="last")  # doctest: +SKIP
        >>> start_epoch = restored["epoch"] + 1  # doctest: +SKIP
    """
    if not Path(path).is_dir():
        raise FileNotFoundError(f"load_checkpoint: no checkpoint directory at {path}")
    ours = _kinds(objects)
    manager = _manager(path)
    try:
        step = _select(manager, path, which)
        meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        state = {}
        if any(kind != "value" for kind in meta.get("kinds", {}).values()):
            state = manager.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
    finally:
        manager.close()
    if meta.get("format") != FORMAT:
        raise ValueError(f"load_checkpoint: {path}/{step} has format {meta.get('format')!r}, "
                         f"expected {FORMAT!r}")
    # Each object's state dict, read once: compared with the checkpoint, then the template
    # that _like gives the saved arrays' container and scalar types.
    current = {name: obj.state_dict() for name, obj in objects.items() if ours[name] != "value"}
    problems = _problems(ours, current, meta, state)
    if problems:
        raise ValueError(
            f"load_checkpoint({str(path)!r}, step {step}) does not fit the objects; nothing was "
            "loaded.\n  " + "\n  ".join(problems) +
            "\nFix: build the same model, optimizer and Rngs streams as the saved ones."
        )
    result = dict(objects)
    for name, obj in objects.items():
        if meta["kinds"][name] == "value":
            result[name] = meta["values"][name]
        else:
            obj.load_state_dict(_like(state[name], current[name]))
    result.setdefault("step", step)
    return result


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

    Args:
        path: the checkpoint directory.
        monitor: the metric that ranks checkpoints, e.g. ``'val/loss'``.
        mode: ``'min'`` or ``'max'``: whether a lower or a higher ``monitor`` is better.
        overwrite: delete the steps at or after the fit's first epoch (every step, for a fit
            from epoch 0) when the fit starts, instead of refusing.
        every_n_steps: save every this many global steps (>= 1) instead of every epoch.

    Example:
        >>> checkpoint = ModelCheckpoint("runs/digits/checkpoints", monitor="val/accuracy",
        ...                              mode="max")
        >>> Trainer(10, callbacks=[checkpoint])  # doctest: +SKIP
    """

    def __init__(self, path, monitor: str = "val/loss", mode: str = "min", *,
                 overwrite: bool = False, every_n_steps: int | None = None):
        check_mode("ModelCheckpoint", mode)
        if every_n_steps is not None:
            every_n_steps = check_int("ModelCheckpoint every_n_steps", every_n_steps, 1)
        self.every_n_steps = every_n_steps
        self.path = Path(path).absolute()
        self.monitor, self.mode, self.overwrite = monitor, mode, overwrite
        self.best_step: int | None = None
        self.best_value: float | None = None
        self.last_step: int | None = None
        self._best_score = -math.inf
        self._manager = None

    def on_fit_start(self, trainer, task) -> None:
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
        if self._manager is not None:
            self._manager.wait_until_finished()
            self._manager.close()
            self._manager = None

    @property
    def best_path(self) -> Path | None:
        """The directory of the best step saved in this fit (None before the first save)."""
        return None if self.best_step is None else self.path / str(self.best_step)
