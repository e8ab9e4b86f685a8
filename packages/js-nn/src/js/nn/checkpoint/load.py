"""Loading checkpoints: load_checkpoint (strict, partial, verified, all or nothing),
checkpoint_info (what each step holds, without reading arrays) and ``load_weights``' route.

A load reads in this order, and touches no object before the last check: the step list, the
chosen step's ``meta`` (structure and format; read once), the objects' names, kinds, keys,
shapes and dtypes against it, the items of the named objects only (orbax restores each array
onto the current sharding of the object's array), then the save id of each item and the
digest of every array (:mod:`.read`). Only then are the objects loaded: other stateful objects
first (their own ``load_state_dict`` may still refuse), js's own last (already checked here in
full). A checkpoint written on 8 devices loads onto 1, or onto another mesh, bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from js._checks import compare_state

from .format import (
    ON_META,
    CheckpointError,
    item_name,
    kinds_of,
    live_arrays,
    locate,
    native,
    other_steps,
    read_meta,
    read_metrics,
    select_step,
    steps_in,
)
from .read import read_items


def _json_problem(obj, state) -> str | None:
    """What a ``json`` object's optional ``check_state(state)`` says is wrong (None: fits)."""
    check = getattr(obj, "check_state", None)
    problem = check(state) if callable(check) else None
    return None if problem is None else str(problem)


def _problems(objects: Mapping, ours: dict, current: dict, meta: dict) -> list[str]:
    """Every difference between the objects (kinds ``ours``, flat arrays ``current``) and the
    step's meta, as readable lines; a ``json`` object with ``check_state(state)`` is asked
    whether the saved state fits it (a message, or None)."""
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
        if kind == "json":
            problem = _json_problem(objects[name], meta["values"][name])
            if problem is not None:
                problems.append(f"{name!r}: {problem}")
            continue
        want, got = current[name], meta["items"][name]["entries"]
        given = {
            key: jax.ShapeDtypeStruct(tuple(entry["shape"]), jnp.dtype(entry["dtype"]))
            for key, entry in got.items()
        }
        missing, unexpected, mismatched = compare_state(want, given)
        problems += [f"{name!r}: {key!r} missing from the checkpoint" for key in missing]
        problems += [f"{name!r}: unexpected {key!r} in the checkpoint" for key in unexpected]
        # compare_state's "'key': expected A, got B", with B named as what the checkpoint has
        for line in mismatched:
            expected, _, found = line.rpartition(", got ")
            problems.append(f"{name!r}: {expected}, checkpoint has {found}")
    return problems


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


def load_checkpoint(
    path: str | os.PathLike, objects: Mapping[str, Any], which: str | int = "best"
) -> dict:
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

    An object with ``get_state()``/``set_state(state)`` (kind ``json``, e.g. the Trainer's
    ``loader_position`` for a grain pipeline) gets its saved JSON state through ``set_state``,
    first; when it also has ``check_state(state)``, that is asked with the other checks, and a
    message it returns refuses the load before anything is restored.

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
    ours = kinds_of(objects)
    steps = steps_in(path)
    step = select_step(path, steps, which)
    return restore(objects, ours, (path, step, steps), read_meta(path, step, steps))


def restore(
    objects: Mapping, ours: dict, where: tuple, meta: dict, caller: str = "load_checkpoint"
) -> dict:
    """Restore ``objects`` (of kinds ``ours``) in place from the step ``where`` =
    ``(directory, step, steps)`` whose checked ``meta`` the caller read: what
    :func:`load_checkpoint` does once it has chosen the step."""
    path, step, _ = where
    current = {
        name: live_arrays(name, obj) for name, obj in objects.items() if ours[name] not in ON_META
    }
    problems = _problems(objects, ours, current, meta)
    if problems:
        raise ValueError(
            f"{caller}({str(path)!r}, step {step}) does not fit the objects; nothing was "
            "loaded.\n  "
            + "\n  ".join(problems)
            + "\nFix: build the same model, optimizer and Rngs streams as the saved ones, and "
            "name only objects the checkpoint holds."
        )
    flat = read_items(where, meta, current)
    for name, kind in ours.items():  # JSON states first: set_state may still refuse
        if kind == "json":
            objects[name].set_state(meta["values"][name])
    # js's own objects last: they were checked here in full, the others' load_state_dict may
    # still refuse (and then nothing of js's was touched).
    for name in sorted(current, key=lambda name: native(objects[name])):
        obj = objects[name]
        if native(obj):
            obj.load_state_dict(flat[name])
        else:
            obj.load_state_dict(_nested(flat[name], obj.state_dict()))
    result = dict(objects)
    for name, kind in ours.items():
        if kind == "value":
            result[name] = meta["values"][name]
    result.setdefault("step", step)
    return result


def load_model(model, path, which, name: str) -> None:
    """``load_weights`` on a checkpoint directory: restore ``model`` in place from the module
    entry ``name``, reading the step's ``meta`` once (here) and the entry's item only."""
    where, meta, _ = locate(path, name, which, "load_weights")
    if meta["kinds"][name] != "module":
        raise KeyError(
            f"load_weights: {where[0]}, step {where[1]}: the entry {name!r} is a "
            f"{meta['kinds'][name]}, not a model. Fix: pass name= a module entry "
            f"({sorted(k for k, kind in meta['kinds'].items() if kind == 'module')})"
        )
    restore({name: model}, {name: "module"}, where, meta, caller="load_weights")


def _step_info(path: Path, step: int, steps: list[int]) -> dict:
    info = {"step": step, "metrics": None, "objects": {}, "problem": None}
    try:
        metrics = read_metrics(path, step)
        if metrics is not None:
            info["metrics"] = {k: v for k, v in metrics.items() if k != "_score"}
    except (OSError, ValueError, AttributeError) as error:
        info["problem"] = f"metrics cannot be read ({type(error).__name__})"
    try:
        meta = read_meta(path, step, steps)
    except CheckpointError as error:
        info["problem"] = str(error)
        return info
    missing = []
    for name, kind in meta["kinds"].items():
        if kind in ON_META:
            info["objects"][name] = {"kind": kind, "value": meta["values"][name]}
        else:
            info["objects"][name] = {"kind": kind, "arrays": len(meta["items"][name]["entries"])}
            if not (path / str(step) / item_name(name)).is_dir():
                missing.append(f"{item_name(name)!r} (the arrays of {name!r})")
    if missing:
        info["problem"] = str(
            CheckpointError(
                path, step, f"item {', '.join(missing)}", "is missing", other_steps(steps, step)
            )
        )
    return info


def checkpoint_info(path: str | os.PathLike) -> list[dict]:
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
