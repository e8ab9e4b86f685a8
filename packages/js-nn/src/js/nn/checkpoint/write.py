"""Writing a checkpoint step: the items of the saved objects and their ``meta`` record, all
built (digests included) before anything is written, then :func:`save_checkpoint`.

Small arrays (at most ``SMALL_BYTES``) are packed because orbax writes and reads each leaf as
its own tensorstore array: 10,000 ``Linear(2, 2)`` arrays cost seconds as leaves, milliseconds
as a few buffers. An array that is sharded and not fully replicated stays a leaf, so that
orbax writes it shard by shard from the processes that hold it (metadata by the primary
process). Nothing is pickled. A step becomes visible by an atomic rename when complete, so a
process killed during a save leaves the previous steps intact; one writer at a time holds the
directory's lock (:mod:`.lock`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from js._checks import check_int

from .digest import device_digests, host_digest, packed_digests
from .format import FORMAT, item_name, json_state, kinds_of, live_arrays, manager
from .lock import check_timeout, writer_lock
from .quiet import named_write_errors, quiet_orbax

SMALL_BYTES = 64 * 1024


class _Placement:
    """Whether a sharding is fully replicated / addressable, asked once per distinct sharding
    (10,000 small parameters each carry an equal sharding object, and jax derives these per
    object)."""

    def __init__(self):
        self._seen: dict = {}

    def __call__(self, sharding) -> tuple[bool, bool]:
        if sharding not in self._seen:
            self._seen[sharding] = (sharding.is_fully_replicated, sharding.is_fully_addressable)
        return self._seen[sharding]


def _packable(value, placement: _Placement) -> bool:
    if value.nbytes > SMALL_BYTES:
        return False
    if isinstance(value, np.ndarray):
        return True
    replicated, addressable = placement(value.sharding)
    return replicated or (jax.process_count() == 1 and addressable)


def _host(values: list, placement: _Placement) -> list[np.ndarray]:
    """NumPy copies of small arrays: one batched transfer, a local replica where the array
    spans other processes."""
    local = [
        v if isinstance(v, np.ndarray) or placement(v.sharding)[1] else v.addressable_data(0)
        for v in values
    ]
    return [np.asarray(v) for v in jax.device_get(local)]


def _pack(tree: dict, record: dict, small: list) -> None:
    """Concatenate the small ``(key, NumPy array)`` pairs by dtype into ``tree['packed']``,
    recording each one's place and digest."""
    groups: dict[str, list] = {}
    names: dict = {}  # dtype -> its name, formatted once (it costs microseconds)
    for key, value in small:
        name = names.get(value.dtype) or names.setdefault(value.dtype, str(jnp.dtype(value.dtype)))
        groups.setdefault(name, []).append((key, value))
    for dtype, members in groups.items():
        sizes = np.array([value.size for _, value in members], np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        buffer = np.concatenate([value.reshape(-1) for _, value in members])
        tree.setdefault("packed", {})[dtype] = buffer
        record["packed"][dtype] = int(buffer.size)
        hexes = packed_digests(buffer, starts, sizes)
        for (key, value), start, hexed in zip(members, starts, hexes, strict=True):
            record["entries"][key] = {
                "shape": list(value.shape),
                "dtype": dtype,
                "digest": hexed,
                "packed": [dtype, int(start)],
            }


def build_item(flat: dict, save_id: bytes) -> tuple[dict, dict]:
    """The orbax tree and the meta record of one object's flat ``{key: array}``."""
    tree: dict[str, Any] = {"id": np.frombuffer(save_id, np.uint8).copy()}
    record: dict[str, Any] = {"packed": {}, "entries": {}}
    placement = _Placement()
    small = [key for key, value in flat.items() if _packable(value, placement)]
    _pack(tree, record, list(zip(small, _host([flat[k] for k in small], placement), strict=True)))
    large = [key for key in flat if key not in record["entries"]]
    on_devices = [key for key in large if isinstance(flat[key], jax.Array)]
    hexes = dict(zip(on_devices, device_digests([flat[k] for k in on_devices]), strict=True))
    for index, key in enumerate(large):
        value = flat[key]
        tree.setdefault("arrays", {})[str(index)] = value
        record["entries"][key] = {
            "shape": list(value.shape),
            "dtype": str(jnp.dtype(value.dtype)),
            "digest": hexes[key] if key in hexes else host_digest(value),
            "array": str(index),
        }
    return tree, record


def _save_id() -> bytes:
    """16 random bytes, the same in every process of a job (the primary's)."""
    save_id = np.frombuffer(os.urandom(16), np.uint8)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        save_id = np.asarray(multihost_utils.broadcast_one_to_all(save_id))
    return bytes(save_id)


def save_args(objects: Mapping):
    """The orbax arguments (an ``ocp.args.Composite``) that save ``objects``: built, digests
    included, before anything is written, so that a refused save leaves nothing on disk."""
    import orbax.checkpoint as ocp

    kinds, save_id = kinds_of(objects), _save_id()
    meta = {"format": FORMAT, "save_id": save_id.hex(), "kinds": kinds, "values": {}, "items": {}}
    items = {}
    for name, obj in objects.items():
        if kinds[name] == "value":
            meta["values"][name] = obj
            continue
        if kinds[name] == "json":
            meta["values"][name] = json_state(name, obj)
            continue
        tree, meta["items"][name] = build_item(live_arrays(name, obj), save_id)
        items[item_name(name)] = ocp.args.PyTreeSave(tree)
    return ocp.args.Composite(meta=ocp.args.JsonSave(meta), **items)


def save_checkpoint(
    path: str | os.PathLike,
    objects: Mapping[str, Any],
    *,
    step: int | None = None,
    lock_timeout: float = 0.0,
) -> int:
    """Save ``objects`` (``{name: model | optimizer | js.Rngs | plain value}``) under ``path``.

    An object with ``get_state()``/``set_state()`` instead of ``state_dict`` (a ``json`` kind,
    e.g. a grain iterator) has its JSON state saved in the step's metadata; in a multi-process
    job that is the primary process's state, which every process gets back on load.

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
        step = check_int("save_checkpoint", "step", step, 0)
    lock_timeout = check_timeout("save_checkpoint", lock_timeout)
    args = save_args(objects)  # every check and digest before the directory exists
    path = Path(path).absolute()
    path.mkdir(parents=True, exist_ok=True)
    lock = writer_lock(path, "save_checkpoint", lock_timeout)
    try:
        steps = manager(path, ranked=False)
        try:
            if step is None:
                latest = steps.latest_step()
                step = 0 if latest is None else latest + 1
            with named_write_errors(f"save_checkpoint: step {step}", path), quiet_orbax():
                saved = steps.save(step, args=args)
                steps.wait_until_finished()
            if not saved:
                raise FileExistsError(
                    f"save_checkpoint: step {step} was not saved: {path} already holds steps "
                    f"{sorted(steps.all_steps())} and orbax only saves a step after the "
                    "latest. Fix: pass a larger step, or step=None for the next one."
                )
        finally:
            steps.close()
    finally:
        if lock is not None:
            lock.release()
    return step
