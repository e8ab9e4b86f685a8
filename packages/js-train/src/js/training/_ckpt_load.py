"""Reading checkpoints: load_checkpoint (strict, partial, verified, all or nothing) and
checkpoint_info (what each step holds, without reading arrays).

A load reads in this order, and touches no object before the last check: the step list, the
chosen step's ``meta`` (structure and format), the objects' names, kinds, keys, shapes and
dtypes against it, the items of the named objects only (orbax restores each array onto the
current sharding of the object's array), then the save id of each item and the digest of every
array. Only then are the objects loaded: other stateful objects first (their own
``load_state_dict`` may still refuse), js's own last (already checked here in full).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import orbax.checkpoint as ocp

from ._checkpoint import _kinds, _live, _manager, _score
from ._checks import is_int
from ._ckpt_format import (
    FORMAT,
    CheckpointError,
    ForeignItemError,
    item_name,
    meta_problems,
    read_json,
    restore_tree,
    unpack,
)


def steps_in(path: Path) -> list[int]:
    """The committed steps in ``path``: orbax renames a step's directory to its number only
    when the step is complete."""
    return sorted(int(p.name) for p in path.iterdir() if p.name.isdigit() and p.is_dir())


def _others(steps: list[int], step: int) -> str:
    rest = [s for s in steps if s != step]
    if not rest:
        return "save it again; no other step is present"
    return f"load another step (which=...): steps {', '.join(map(str, rest))} are present"


def _metrics(path: Path, step: int):
    """A step's metrics, None when it has none; OSError/ValueError when unreadable."""
    if not (path / str(step) / "metrics").exists():
        return None
    return read_json(path / str(step) / "metrics" / "metrics")


def _best(path: Path, steps: list[int]) -> int:
    scores, unreadable = {}, []
    for step in steps:
        try:
            metrics = _metrics(path, step)
        except (OSError, ValueError):
            unreadable.append(step)
            continue
        if metrics is not None:
            scores[step] = _score(metrics)
    if unreadable:
        warnings.warn(
            f"load_checkpoint({str(path)!r}): the metrics of steps {unreadable} cannot be read; "
            "they were skipped when choosing the best step",
            stacklevel=3,
        )
    if not scores:
        return steps[-1]
    return max(scores, key=lambda step: (scores[step], step))  # ties: the later step


def _select(path: Path, steps: list[int], which) -> int:
    if not steps:
        raise FileNotFoundError(f"load_checkpoint: no complete checkpoint in {path}")
    if which == "best":
        return _best(path, steps)
    if which == "last":
        return steps[-1]
    if is_int(which):
        if int(which) not in steps:
            raise ValueError(f"load_checkpoint: no step {int(which)} in {path}; steps: {steps}")
        return int(which)
    raise ValueError(
        f"load_checkpoint which must be 'best', 'last' or a step number, got {which!r}"
    )


def read_meta(path: Path, step: int, steps: list[int]) -> dict:
    """The step's checked ``meta`` record, or a CheckpointError naming what is wrong."""
    file = path / str(step) / "meta" / "metadata"
    try:
        meta = read_json(file)
    except FileNotFoundError:
        raise CheckpointError(
            path,
            step,
            "the metadata file meta/metadata",
            "is missing (this step holds no js checkpoint)",
            _others(steps, step),
        ) from None
    except (OSError, ValueError) as error:
        raise CheckpointError(
            path,
            step,
            "the metadata file meta/metadata",
            f"cannot be read ({type(error).__name__}: {error})",
            _others(steps, step),
        ) from None
    problems = meta_problems(meta)
    if problems:
        fix = _others(steps, step)
        if isinstance(meta, Mapping) and meta.get("format") not in (None, FORMAT):
            fix = f"load it with the js release that wrote it, or {fix}"
        raise CheckpointError(
            path, step, "the metadata file meta/metadata", "; ".join(problems), fix
        )
    return meta


def _problems(ours: dict, current: dict, meta: dict) -> list[str]:
    """Every difference between the objects (kinds ``ours``, flat arrays ``current``) and the
    step's meta, as readable lines."""
    kinds, problems = meta["kinds"], []
    missing = [name for name in ours if name not in kinds]
    if missing:
        problems.append(f"objects not in the checkpoint: {missing} (it holds {sorted(kinds)})")
    for name, kind in ours.items():
        if name not in kinds:
            continue
        if kind != kinds[name]:
            problems.append(f"{name!r}: expected a {kind}, the checkpoint holds a {kinds[name]}")
            continue
        if kind == "value":
            continue
        want, got = current[name], meta["items"][name]["entries"]
        problems += [
            f"{name!r}: {key!r} missing from the checkpoint" for key in want if key not in got
        ]
        problems += [
            f"{name!r}: unexpected {key!r} in the checkpoint" for key in got if key not in want
        ]
        names: dict = {}  # dtype -> str(dtype), formatted once (it costs microseconds)
        for key in [key for key in want if key in got]:
            dtype = want[key].dtype
            have = (list(want[key].shape), names.get(dtype) or names.setdefault(dtype, str(dtype)))
            saved = (got[key]["shape"], got[key]["dtype"])
            if have != saved:
                problems.append(
                    f"{name!r}: {key!r}: expected {have[0]} {have[1]}, "
                    f"checkpoint has {saved[0]} {saved[1]}"
                )
    return problems


@contextmanager
def _quiet_orbax():
    """orbax logs (and asyncio prints) the tracebacks of a failed read before raising; the
    CheckpointError we raise says it once, readably."""
    loggers = [logging.getLogger(name) for name in ("absl", "orbax", "asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _restore(manager, where: tuple, name: str, record: dict, currents: dict) -> dict:
    """One object's item as orbax restores it onto ``currents``' shardings."""
    path, step, steps = where
    item = item_name(name)
    args = ocp.args.Composite(**{item: ocp.args.StandardRestore(restore_tree(record, currents))})
    try:
        with _quiet_orbax():
            return manager.restore(step, args=args)[item]
    except Exception as error:  # orbax/tensorstore raise many types for one cause
        text = str(error).splitlines()[0][:300] if str(error) else ""
        raise CheckpointError(
            path,
            step,
            f"item {item!r} (the arrays of {name!r})",
            f"cannot be read ({type(error).__name__}: {text})",
            _others(steps, step),
        ) from None


def _checked(where: tuple, name: str, record: dict, tree: dict, save_id: str) -> dict:
    """The item's ``{key: array}`` once its save id and every digest are checked."""
    path, step, steps = where
    try:
        flat, damaged = unpack(record, tree, save_id)
    except ForeignItemError:
        raise CheckpointError(
            path,
            step,
            f"item {item_name(name)!r}",
            "belongs to another save (its save id is not "
            "the one in the step's meta/metadata): the step mixes two saves",
            _others(steps, step),
        ) from None
    if damaged:
        listed = ", ".join(f"'{name}.{key}'" for key in damaged)
        raise CheckpointError(
            path,
            step,
            f"{'array' if len(damaged) == 1 else 'arrays'} {listed}",
            "does not match its recorded digest: the checkpoint is damaged",
            _others(steps, step),
        )
    return flat


def _read_items(path: Path, step: int, steps: list[int], meta: dict, current: dict) -> dict:
    """``{name: {key: array}}`` for the named objects, read, id-checked and digest-checked."""
    flat, where = {}, (path, step, steps)
    manager = _manager(path, ranked=False)
    try:
        for name, currents in current.items():
            record = meta["items"][name]
            tree = _restore(manager, where, name, record, currents)
            flat[name] = _checked(where, name, record, tree, meta["save_id"])
    finally:
        manager.close()
    return flat


def _like(saved, current):
    """``saved`` (flat, from disk) in the container and scalar types of ``current``."""
    if isinstance(current, Mapping):
        return {key: _like(saved[str(key)], value) for key, value in current.items()}
    if isinstance(current, (bool, int, float)) and not isinstance(current, np.generic):
        return type(current)(saved)
    return np.array(saved) if isinstance(saved, np.ndarray) else saved


def _nested(flat: dict, template, prefix: tuple = ()):
    if isinstance(template, Mapping):
        return {key: _nested(flat, value, (*prefix, str(key))) for key, value in template.items()}
    return _like(flat[".".join(prefix)], template)


def load_checkpoint(path, objects: Mapping, which="best") -> dict:
    """Restore ``objects`` in place from the checkpoint directory ``path``.

    Partial, strict and all or nothing: only the objects named in ``objects`` are read (a
    model alone can be restored from a ModelCheckpoint for evaluation); each must be in the
    checkpoint with the same kind, array keys, shapes and dtypes, and any difference raises
    one ValueError listing them all. The items read are then checked against their save id
    and every array against its digest; a damaged step raises :class:`CheckpointError`. Only
    then is anything copied, each array onto the current devices and sharding of the
    object's array (a checkpoint written on 8 devices loads onto 1, or onto another mesh).

    Args:
        path: a directory written by :func:`save_checkpoint` or :class:`ModelCheckpoint`.
        objects: ``{name: object}`` to restore, a subset of the saved names (plain values
            included, e.g. ``'epoch': 0``).
        which: ``'best'`` (the best monitored step of a ModelCheckpoint, skipping with a
            warning steps whose metrics cannot be read; the latest when no step has metrics),
            ``'last'``, or a step number. ``'last'`` and a step number read that step only.

    Returns ``objects`` with plain values replaced by the saved ones and ``'step'`` added when
    not an object name, e.g. ``{'model': model, 'epoch': 3, 'step': 3}``.

    Example:
        >>> restored = load_checkpoint("runs/digits/checkpoints", task.checkpoint_objects()
        ...                            | {"epoch": 0}, which="last")  # doctest: +SKIP
        >>> start_epoch = restored["epoch"] + 1  # doctest: +SKIP
    """
    path = Path(path).absolute()
    if not path.is_dir():
        raise FileNotFoundError(f"load_checkpoint: no checkpoint directory at {path}")
    ours = _kinds(objects)
    steps = steps_in(path)
    step = _select(path, steps, which)
    meta = read_meta(path, step, steps)
    current = {name: _live(name, obj) for name, obj in objects.items() if ours[name] != "value"}
    problems = _problems(ours, current, meta)
    if problems:
        raise ValueError(
            f"load_checkpoint({str(path)!r}, step {step}) does not fit the objects; nothing was "
            "loaded.\n  "
            + "\n  ".join(problems)
            + "\nFix: build the same model, optimizer and Rngs streams as the saved ones, and "
            "name only objects the checkpoint holds."
        )
    flat = _read_items(path, step, steps, meta, current)
    result = dict(objects)
    native = ("module", "rngs")
    order = sorted(current, key=lambda name: ours[name] in native or _is_optimizer(objects[name]))
    for name in order:
        obj = objects[name]
        if ours[name] in native or _is_optimizer(obj):
            obj.load_state_dict(flat[name])
        else:
            obj.load_state_dict(_nested(flat[name], obj.state_dict()))
    for name, kind in ours.items():
        if kind == "value":
            result[name] = meta["values"][name]
    result.setdefault("step", step)
    return result


def _is_optimizer(obj) -> bool:
    import js.optim

    return isinstance(obj, js.optim.Optimizer)


def _step_info(path: Path, step: int, steps: list[int]) -> dict:
    info = {"step": step, "metrics": None, "objects": {}, "problem": None}
    try:
        metrics = _metrics(path, step)
        if metrics is not None:
            info["metrics"] = {k: v for k, v in metrics.items() if k != "_score"}
    except (OSError, ValueError, AttributeError) as error:
        info["problem"] = f"metrics cannot be read ({type(error).__name__})"
    try:
        meta = read_meta(path, step, steps)
    except CheckpointError as error:
        info["problem"] = str(error)
        return info
    for name, kind in meta["kinds"].items():
        if kind == "value":
            info["objects"][name] = {"kind": kind, "value": meta["values"][name]}
        else:
            info["objects"][name] = {"kind": kind, "arrays": len(meta["items"][name]["entries"])}
    return info


def checkpoint_info(path) -> list[dict]:
    """What each step of the checkpoint directory ``path`` holds, without reading arrays.

    Returns one record per committed step, in step order::

        {"step": 3, "metrics": {"val/loss": 0.21, ...} or None,
         "objects": {"model": {"kind": "module", "arrays": 8},
                     "epoch": {"kind": "value", "value": 3}},
         "problem": None or why the step cannot be loaded}

    A damaged step is listed with its ``problem`` rather than raising.

    Example:
        >>> [info["step"] for info in checkpoint_info("runs/digits/checkpoints")]
        ... # doctest: +SKIP
        [3, 9]
    """
    path = Path(path).absolute()
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint_info: no checkpoint directory at {path}")
    steps = steps_in(path)
    return [_step_info(path, step, steps) for step in steps]
