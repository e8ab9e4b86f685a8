"""Reading a checkpoint step's items: onto the current devices and shardings of live objects
(:func:`read_items`, what ``load_checkpoint`` and ``load_weights`` use) or on the host as
NumPy (:func:`read_checkpoint`).

Every item read is checked before it is used: its save id against the step's ``meta``, every
array against its recorded digest (on the host, or where a restored array lives), the packed
arrays unpacked. A damaged step raises one :class:`CheckpointError` naming the directory, the
step and the part; another step still loads. orbax is imported only when an item is read.
"""

from __future__ import annotations

import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .digest import device_digests, host_digest, packed_digests
from .format import CheckpointError, item_name, locate, manager, other_steps
from .quiet import failed, quiet_orbax


def host_tree(record: dict) -> dict:
    """The abstract orbax tree that reads one entry's item into NumPy arrays."""
    tree: dict[str, Any] = {"id": np.zeros(16, np.uint8)}  # id, packed {dtype: buffer}, arrays
    for dtype, length in record["packed"].items():
        tree.setdefault("packed", {})[dtype] = np.zeros(length, jnp.dtype(dtype))
    for entry in record["entries"].values():
        if "array" in entry:
            leaf = np.empty(tuple(entry["shape"]), jnp.dtype(entry["dtype"]))
            tree.setdefault("arrays", {})[entry["array"]] = leaf
    return tree


def restore_tree(record: dict, currents: dict) -> dict:
    """The abstract orbax tree that reads one object's item onto ``currents``' shardings
    (NumPy where the current array has none)."""
    tree = host_tree(record)
    for key, entry in record["entries"].items():
        sharding = getattr(currents[key], "sharding", None)
        if "array" in entry and sharding is not None:
            shape, dtype = tuple(entry["shape"]), jnp.dtype(entry["dtype"])
            tree["arrays"][entry["array"]] = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
    return tree


def _unpack(record: dict, tree: dict) -> tuple[dict, list]:
    """``({key: array}, damaged keys)``; leaves that are not NumPy arrays (restored onto
    devices) are digested where they are, shard by shard."""
    flat, on_devices, by_group, got = {}, [], {}, {}
    for key, entry in record["entries"].items():
        if "packed" in entry:
            by_group.setdefault(entry["packed"][0], []).append(key)
            continue
        flat[key] = tree["arrays"][entry["array"]]
        if not isinstance(flat[key], np.ndarray):
            on_devices.append(key)
    for dtype, keys in by_group.items():
        buffer = np.asarray(tree["packed"][dtype])
        starts = np.array([record["entries"][k]["packed"][1] for k in keys], np.int64)
        sizes = np.array([math.prod(record["entries"][k]["shape"]) for k in keys], np.int64)
        if buffer.size < int(np.max(starts + sizes, initial=0)):
            return {}, [f"(packed {dtype})"]
        got.update(zip(keys, packed_digests(buffer, starts, sizes), strict=True))
        for key, start, size in zip(keys, starts, sizes, strict=True):
            flat[key] = buffer[start : start + size].reshape(record["entries"][key]["shape"])
    if on_devices:  # every process of a job reaches this together: the sums are collectives
        got.update(zip(on_devices, device_digests([flat[k] for k in on_devices]), strict=True))
    damaged = [
        key
        for key, value in flat.items()
        if (got[key] if key in got else host_digest(value)) != record["entries"][key]["digest"]
    ]
    return flat, damaged


def checked_item(where: tuple, name: str, record: dict, tree: dict, save_id: str) -> dict:
    """``{key: array}`` of the restored item ``tree`` of entry ``name`` once its save id and
    every digest are checked; ``where`` is ``(directory, step, steps)``."""
    path, step, steps = where
    if bytes(np.asarray(tree["id"], np.uint8)).hex() != save_id:
        raise CheckpointError(
            path,
            step,
            f"item {item_name(name)!r}",
            "belongs to another save (its save id is "
            "not the one in the step's meta/metadata): the step mixes two saves",
            other_steps(steps, step),
        )
    flat, damaged = _unpack(record, tree)
    if damaged:
        listed = ", ".join(f"'{name}.{key}'" for key in damaged)
        raise CheckpointError(
            path,
            step,
            f"{'array' if len(damaged) == 1 else 'arrays'} {listed}",
            "does not match its recorded digest: the checkpoint is damaged",
            other_steps(steps, step),
        )
    return flat


def unreadable_item(where: tuple, name: str, error: Exception) -> CheckpointError:
    """The error for an item orbax failed to read (it raises many types for one cause)."""
    failed()
    path, step, steps = where
    text = str(error).splitlines()[0][:300] if str(error) else ""
    return CheckpointError(
        path,
        step,
        f"item {item_name(name)!r} (the arrays of {name!r})",
        f"cannot be read ({type(error).__name__}: {text})",
        other_steps(steps, step),
    )


def read_checkpoint(
    ckpt_dir: str | os.PathLike, name: str = "model", which: str | int = "best"
) -> tuple[int, dict]:
    """The arrays of the entry ``name`` of a js-train checkpoint, as NumPy, verified.

    Reads only that entry's item and the step's ``meta`` (orbax is imported only now),
    checks the item's save id and every array's digest, and raises :class:`CheckpointError`
    naming the directory, step and part for a damaged step.

    Args:
        ckpt_dir: a directory written by ``save_checkpoint`` or js-train's ``ModelCheckpoint``.
        name: the entry to read (``'model'`` for a ``Task``'s model).
        which: ``'best'`` (ModelCheckpoint's best monitored step; the latest when no step was
            ranked), ``'last'`` or a step number.

    Returns:
        ``(step, {dotted.key: np.ndarray})``: the ``state_dict()`` the entry saved, e.g. for
        ``model.load_state_dict`` (what ``js.nn.load_weights`` does).

    Example:
        >>> import tempfile, js.nn as nn
        >>> step, arrays = nn.read_checkpoint("runs/digits/checkpoints")  # doctest: +SKIP
        >>> sorted(arrays)[:2]  # doctest: +SKIP
        ['bn1.bias', 'bn1.running_mean']
        >>> nn.read_checkpoint(tempfile.mkdtemp())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        FileNotFoundError: read_checkpoint: no complete checkpoint in ...
    """
    where, meta, record = locate(ckpt_dir, name, which, "read_checkpoint")
    import orbax.checkpoint as ocp

    path, step = where[:2]
    item = path / str(step) / item_name(name)
    try:
        with quiet_orbax(), ocp.StandardCheckpointer() as checkpointer:
            tree = checkpointer.restore(item, host_tree(record))
    except Exception as error:  # orbax/tensorstore raise many types for one cause
        raise unreadable_item(where, name, error) from None
    return step, checked_item(where, name, record, tree, meta["save_id"])


def read_items(where: tuple, meta: dict, current: dict) -> dict:
    """``{name: {key: array}}`` for the objects whose live arrays are ``current``
    (``{name: {key: array}}``), each read onto the current array's devices and sharding,
    id-checked and digest-checked; ``where`` is ``(directory, step, steps)``."""
    import orbax.checkpoint as ocp

    flat, (path, step, _) = {}, where
    steps = manager(path, ranked=False)
    try:
        for name, currents in current.items():
            record, item = meta["items"][name], item_name(name)
            tree = ocp.args.StandardRestore(restore_tree(record, currents))
            try:
                with quiet_orbax():
                    restored = steps.restore(step, args=ocp.args.Composite(**{item: tree}))[item]
            except Exception as error:  # orbax/tensorstore raise many types for one cause
                raise unreadable_item(where, name, error) from None
            flat[name] = checked_item(where, name, record, restored, meta["save_id"])
    finally:
        steps.close()
    return flat
