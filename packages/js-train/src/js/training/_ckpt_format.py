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
Reading (meta checks, save ids, digests, unpacking) is js-nn's ``js.nn.checkpoint_format``,
shared with ``js.nn.read_checkpoint``; what is here builds the items and reads them onto shardings.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from js.nn.checkpoint_format import FORMAT as FORMAT
from js.nn.checkpoint_format import CheckpointError as CheckpointError
from js.nn.checkpoint_format import host_tree
from js.nn.checkpoint_format import item_name as item_name

from . import _ckpt_digest as digest

SMALL_BYTES = 64 * 1024


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


# -- reading ---------------------------------------------------------------------------------


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
