"""The js checkpoint format, step by step: what is written for each object and how it is checked.

A step ``<dir>/<step>/`` holds one orbax item per stateful object, ``state_<name>``, and a JSON
item ``meta``::

    state_<name>: {"id": uint8[16],                  the save id, repeated in every item
                   "packed": {dtype: 1-D array},     small arrays, concatenated by dtype
                   "arrays": {"0": array, ...}}      large (or sharded) arrays, one leaf each
    meta: {"format": "js.training/2", "save_id": hex, "kinds": {name: kind},
           "values": {name: json value},
           "items": {name: {"packed": {dtype: length},
                            "entries": {key: {"shape": [..], "dtype": str, "digest": hex,
                                              "packed": [dtype, offset] | "array": "<i>"}}}}}

Small arrays (at most ``SMALL_BYTES``) are packed because orbax writes and reads each leaf as
its own tensorstore array: 10,000 ``Linear(2, 2)`` arrays cost seconds as leaves, milliseconds
as a few buffers. An array that is sharded and not fully replicated stays a leaf, so that
orbax writes it shard by shard from the processes that hold it. Digests: ``_ckpt_digest``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from . import _ckpt_digest as digest

FORMAT = "js.training/2"
SMALL_BYTES = 64 * 1024
KINDS = ("module", "rngs", "state", "value")


class CheckpointError(ValueError):
    """A checkpoint step that cannot be read or does not match what was written.

    Attributes: ``directory``, ``step`` (None when no step is concerned) and ``part`` (the
    file, item or array that failed).
    """

    def __init__(self, directory, step, part: str, what: str, fix: str):
        self.directory, self.step, self.part = str(directory), step, part
        where = f"{directory}" if step is None else f"{directory}, step {step}"
        super().__init__(f"checkpoint {where}: {part} {what}. Fix: {fix}")


class ForeignItemError(Exception):
    """An item whose save id is not its step's (raised by :func:`unpack`)."""


def item_name(name: str) -> str:
    return f"state_{name}"


def flatten(tree, prefix: tuple = ()) -> dict:
    """``{dotted.key: leaf}`` of a (nested) state dict."""
    if isinstance(tree, Mapping):
        out = {}
        for key, value in tree.items():
            out.update(flatten(value, (*prefix, str(key))))
        return out
    return {".".join(prefix): tree}


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
    for key, value in small:
        groups.setdefault(str(jnp.dtype(value.dtype)), []).append((key, value))
    for dtype, members in groups.items():
        sizes = np.array([value.size for _, value in members], np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        buffer = np.concatenate([value.reshape(-1) for _, value in members])
        tree.setdefault("packed", {})[dtype] = buffer
        record["packed"][dtype] = int(buffer.size)
        hexes = digest.packed_digests(buffer, starts, sizes)
        for (key, value), start, hexed in zip(members, starts, hexes, strict=True):
            record["entries"][key] = {
                "shape": list(value.shape),
                "dtype": dtype,
                "digest": hexed,
                "packed": [dtype, int(start)],
            }


def build_item(flat: dict, save_id: bytes) -> tuple[dict, dict]:
    """The orbax tree and the meta record of one object's flat ``{key: array}``."""
    tree, record = {"id": np.frombuffer(save_id, np.uint8).copy()}, {"packed": {}, "entries": {}}
    placement = _Placement()
    small = [key for key, value in flat.items() if _packable(value, placement)]
    _pack(tree, record, list(zip(small, _host([flat[k] for k in small], placement), strict=True)))
    large = [key for key in flat if key not in record["entries"]]
    on_devices = [key for key in large if isinstance(flat[key], jax.Array)]
    hexes = dict(zip(on_devices, digest.device_digests([flat[k] for k in on_devices]), strict=True))
    for index, key in enumerate(large):
        value = flat[key]
        tree.setdefault("arrays", {})[str(index)] = value
        record["entries"][key] = {
            "shape": list(value.shape),
            "dtype": str(jnp.dtype(value.dtype)),
            "digest": hexes[key] if key in hexes else digest.host_digest(value),
            "array": str(index),
        }
    return tree, record


# -- reading ----------------------------------------------------------------------------------

_HEX16 = re.compile(r"[0-9a-f]{16}\Z")


def _entry_problem(key: str, entry) -> str | None:
    if not isinstance(entry, Mapping):
        return f"entry {key!r} is a {type(entry).__name__}, not a record"
    shape, dtype = entry.get("shape"), entry.get("dtype")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        return f"entry {key!r} has no valid shape"
    try:
        jnp.dtype(dtype)
    except TypeError:
        return f"entry {key!r} has no valid dtype ({dtype!r})"
    if not isinstance(entry.get("digest"), str) or not _HEX16.match(entry["digest"]):
        return f"entry {key!r} has no valid digest"
    packed, array = entry.get("packed"), entry.get("array")
    if not (
        (
            isinstance(packed, list)
            and len(packed) == 2
            and isinstance(packed[0], str)
            and type(packed[1]) is int
            and packed[1] >= 0
        )
        or isinstance(array, str)
    ):
        return f"entry {key!r} says neither where it is packed nor which array it is"
    return None


def meta_problems(meta) -> list[str]:
    """What makes a decoded ``meta`` item unusable (empty when it is well-formed)."""
    if not isinstance(meta, Mapping):
        return [f"holds a {type(meta).__name__}, not a record"]
    if meta.get("format") != FORMAT:
        return [f"has format {meta.get('format')!r}, expected {FORMAT!r}"]
    problems = []
    kinds, values, items = meta.get("kinds"), meta.get("values"), meta.get("items")
    if not isinstance(meta.get("save_id"), str):
        problems.append("has no save id")
    if not isinstance(kinds, Mapping) or not all(k in KINDS for k in kinds.values()):
        return [*problems, "has no valid 'kinds' record"]
    if not isinstance(values, Mapping) or not isinstance(items, Mapping):
        return [*problems, "lacks its 'values' or 'items' record"]
    for name, kind in kinds.items():
        if kind == "value" and name not in values:
            problems.append(f"has no value for {name!r}")
        record = items.get(name) if kind != "value" else {}
        if kind != "value" and not (
            isinstance(record, Mapping)
            and isinstance(record.get("entries"), Mapping)
            and isinstance(record.get("packed"), Mapping)
        ):
            problems.append(f"has no array record for {name!r}")
            continue
        for key, entry in (record.get("entries") or {}).items():
            if (problem := _entry_problem(key, entry)) is not None:
                problems.append(f"{name!r}: {problem}")
    return problems


def read_json(path):
    """A JSON file's value; OSError when unreadable, ValueError when not JSON."""
    with open(path, "rb") as file:
        return json.loads(file.read().decode("utf-8"))


def restore_tree(record: dict, currents: dict) -> dict:
    """The abstract orbax tree that reads one object's item onto ``currents``' shardings."""
    tree = {"id": np.zeros(16, np.uint8)}
    for dtype, length in record["packed"].items():
        tree.setdefault("packed", {})[dtype] = np.zeros(length, jnp.dtype(dtype))
    for key, entry in record["entries"].items():
        if "array" not in entry:
            continue
        shape, dtype, current = tuple(entry["shape"]), jnp.dtype(entry["dtype"]), currents[key]
        sharding = getattr(current, "sharding", None)
        leaf = (
            jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
            if sharding is not None
            else np.empty(shape, dtype)
        )
        tree.setdefault("arrays", {})[entry["array"]] = leaf
    return tree


def unpack(record: dict, tree: dict, save_id: str) -> tuple[dict, list[str]]:
    """``({key: array}, damaged keys)`` from a restored item, its digests checked; a
    CheckpointPartError when the item belongs to another save."""
    if bytes(np.asarray(tree["id"], np.uint8)).hex() != save_id:
        raise ForeignItemError()
    flat, problems, on_devices = {}, [], []
    by_group: dict[str, list] = {}
    for key, entry in record["entries"].items():
        if "packed" in entry:
            by_group.setdefault(entry["packed"][0], []).append(key)
            continue
        flat[key] = tree["arrays"][entry["array"]]
        if isinstance(flat[key], jax.Array):
            on_devices.append(key)
    got = {}
    for dtype, keys in by_group.items():
        buffer = np.asarray(tree["packed"][dtype])
        starts = np.array([record["entries"][k]["packed"][1] for k in keys], np.int64)
        sizes = np.array([int(np.prod(record["entries"][k]["shape"])) for k in keys], np.int64)
        if buffer.size < int(np.max(starts + sizes, initial=0)):
            return {}, [f"(packed {dtype})"]
        got.update(zip(keys, digest.packed_digests(buffer, starts, sizes), strict=True))
        for key, start, size in zip(keys, starts, sizes, strict=True):
            flat[key] = buffer[start : start + size].reshape(record["entries"][key]["shape"])
    got.update(zip(on_devices, digest.device_digests([flat[k] for k in on_devices]), strict=True))
    for key, value in flat.items():
        if key not in got:
            got[key] = digest.host_digest(value)
        if got[key] != record["entries"][key]["digest"]:
            problems.append(key)
    return flat, problems
