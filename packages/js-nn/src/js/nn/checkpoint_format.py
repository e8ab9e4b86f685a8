"""The reading half of js-train's checkpoint format ``js.training/2``, on the host, with js-nn
alone: :func:`read_checkpoint` gives one entry's arrays as NumPy, verified.

Why it lives here. An inference install (js-core + js-nn, no js-train) must load what
``ModelCheckpoint`` saved, and js-train reads the same directories. js-train depends on js-nn
(never the reverse), so the one copy of what *reading* needs is here: the step list and the
choice of ``which``, the ``meta`` record and its checks, the save id and the content digest of
every array, the unpacking of packed small arrays, and :class:`CheckpointError`. js-train
imports these names and adds what needs it alone: the writer, the lock, digests computed on
devices for arrays restored onto their sharding, and the strict load of several objects.
orbax is imported only inside :func:`read_checkpoint`: ``import js.nn`` never imports it.

A step ``<dir>/<step>/`` holds a JSON item ``meta`` and one orbax item ``state_<name>`` per
stateful object: ``{"id": uint8[16] (the save id), "packed": {dtype: 1-D array} (arrays of at
most 64 KiB, concatenated), "arrays": {"<i>": array} (the others)}``; ``meta["items"][name]``
records each array's shape, dtype, digest and place (js-train's ``_ckpt_format`` says more).

Digests. Every array is read as 32-bit words ``w[j]`` (a 4-byte element is one word, an 8-byte
one two, a 1- or 2-byte one a zero-extended word), ``j`` the row-major word index; its digest
is the pair of sums modulo 2**32 ``a = sum((w[j] ^ 0x5bd1e995) * (2 j + 1))`` and
``b = sum(fmix32(w[j] + j * 0x9e3779b9))`` (MurmurHash3's finaliser): a sum, so js-train
computes the same value on devices where a sharded array lives; ``a`` catches any changed word,
``b`` moved words. A check against damage, not an adversary.
"""

from __future__ import annotations

import json
import logging
import math
import re
import warnings
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from pathlib import Path

import jax.numpy as jnp
import numpy as np

FORMAT = "js.training/2"
OLD_FORMATS = ("js.training/1",)
KINDS = ("module", "rngs", "state", "value")
EMPTY = "0" * 16
_K1, _GOLDEN, _M1, _M2 = 0x5BD1E995, 0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35
_HEX16 = re.compile(r"[0-9a-f]{16}\Z")


class CheckpointError(ValueError):
    """A checkpoint step that cannot be read or does not match what was written.

    Attributes: ``directory``, ``step`` (None when no step is concerned) and ``part`` (the
    file, item or array that failed).
    """

    def __init__(self, directory, step, part: str, what: str, fix: str):
        self.directory, self.step, self.part = str(directory), step, part
        where = f"{directory}" if step is None else f"{directory}, step {step}"
        super().__init__(f"checkpoint {where}: {part} {what}. Fix: {fix}")


def item_name(name: str) -> str:
    """The orbax item holding the arrays of the checkpoint entry ``name``."""
    return f"state_{name}"


def read_json(path):
    """A JSON file's value; OSError when unreadable, ValueError when not JSON."""
    with open(path, "rb") as file:
        return json.loads(file.read().decode("utf-8"))


# -- steps ------------------------------------------------------------------------------------


def steps_in(path: Path) -> list[int]:
    """The committed steps in ``path``: orbax renames a step's directory to its number only
    when the step is complete."""
    return sorted(int(p.name) for p in path.iterdir() if p.name.isdigit() and p.is_dir())


def other_steps(steps: list[int], step: int) -> str:
    """The fix for a damaged ``step``: the other steps present."""
    rest = [s for s in steps if s != step]
    if not rest:
        return "save it again; no other step is present"
    return f"load another step (which=...): steps {', '.join(map(str, rest))} are present"


def score(metrics) -> float:
    """How ModelCheckpoint ranks a step: its ``_score`` metric (higher is better; NaN last)."""
    value = metrics.get("_score") if isinstance(metrics, Mapping) else None
    return -math.inf if value is None or math.isnan(value) else float(value)


def read_metrics(path: Path, step: int):
    """A step's metrics, None when it has none; OSError/ValueError when unreadable."""
    if not (path / str(step) / "metrics").exists():
        return None
    return read_json(path / str(step) / "metrics" / "metrics")


def _best(path: Path, steps: list[int], caller: str) -> int:
    scores, unreadable = {}, []
    for step in steps:
        try:
            metrics = read_metrics(path, step)
        except (OSError, ValueError):
            unreadable.append(step)
            continue
        if metrics is not None:
            scores[step] = score(metrics)
    if unreadable:
        warnings.warn(
            f"{caller}({str(path)!r}): the metrics of steps {unreadable} cannot be read; "
            "they were skipped when choosing the best step",
            stacklevel=4,
        )
    if not scores:
        return steps[-1]
    return max(scores, key=lambda step: (scores[step], step))  # ties: the later step


def select_step(path: Path, steps: list[int], which, caller: str = "load_checkpoint") -> int:
    """The step ``which`` (``'best'``, ``'last'`` or a step number) names among ``steps``;
    only ``'best'`` reads anything (every step's metrics)."""
    if not steps:
        raise FileNotFoundError(f"{caller}: no complete checkpoint in {path}")
    if which == "best":
        return _best(path, steps, caller)
    if which == "last":
        return steps[-1]
    if isinstance(which, (int, np.integer)) and not isinstance(which, bool):
        if int(which) not in steps:
            raise ValueError(f"{caller}: no step {int(which)} in {path}; steps: {steps}")
        return int(which)
    raise ValueError(f"{caller} which must be 'best', 'last' or a step number, got {which!r}")


# -- meta -------------------------------------------------------------------------------------


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
    packed = entry.get("packed")
    placed = isinstance(packed, list) and len(packed) == 2 and isinstance(packed[0], str)
    if not (placed and type(packed[1]) is int and packed[1] >= 0) and not isinstance(
        entry.get("array"), str
    ):
        return f"entry {key!r} says neither where it is packed nor which array it is"
    return None


def _record_problems(name: str, record) -> list[str]:
    if not (
        isinstance(record, Mapping)
        and isinstance(record.get("entries"), Mapping)
        and isinstance(record.get("packed"), Mapping)
    ):
        return [f"has no array record for {name!r}"]
    problems = []
    for key, entry in record["entries"].items():
        if (problem := _entry_problem(key, entry)) is not None:
            problems.append(f"{name!r}: {problem}")
    return problems


def meta_problems(meta) -> list[str]:
    """What makes a decoded ``meta`` item unusable (empty when it is well-formed)."""
    if not isinstance(meta, Mapping):
        return [f"holds a {type(meta).__name__}, not a record"]
    if meta.get("format") in OLD_FORMATS:
        return [f"has the old format {meta['format']!r} (js-train 0.1), expected {FORMAT!r}"]
    if meta.get("format") != FORMAT:
        return [f"has format {meta.get('format')!r}, expected {FORMAT!r}"]
    problems = [] if isinstance(meta.get("save_id"), str) else ["has no save id"]
    kinds, values, items = meta.get("kinds"), meta.get("values"), meta.get("items")
    if not isinstance(kinds, Mapping) or not all(k in KINDS for k in kinds.values()):
        return [*problems, "has no valid 'kinds' record"]
    if not isinstance(values, Mapping) or not isinstance(items, Mapping):
        return [*problems, "lacks its 'values' or 'items' record"]
    for name, kind in kinds.items():
        if kind == "value" and name not in values:
            problems.append(f"has no value for {name!r}")
        elif kind != "value":
            problems += _record_problems(name, items.get(name))
    return problems


def read_meta(path: Path, step: int, steps: list[int]) -> dict:
    """The step's checked ``meta`` record, or a CheckpointError naming what is wrong."""
    part = "the metadata file meta/metadata"
    try:
        meta = read_json(path / str(step) / "meta" / "metadata")
    except FileNotFoundError:
        raise CheckpointError(
            path, step, part, "is missing (this step holds no js checkpoint)",
            other_steps(steps, step),
        ) from None  # fmt: skip
    except (OSError, ValueError) as error:
        raise CheckpointError(
            path, step, part, f"cannot be read ({type(error).__name__}: {error})",
            other_steps(steps, step),
        ) from None  # fmt: skip
    problems = meta_problems(meta)
    if problems:
        fix = other_steps(steps, step)
        if isinstance(meta, Mapping) and meta.get("format") not in (None, FORMAT):
            fix = f"load it with the js release that wrote it, or {fix}"
        raise CheckpointError(path, step, part, "; ".join(problems), fix)
    return meta


# -- digests ----------------------------------------------------------------------------------


def _fmix(h, xp):
    h = h ^ (h >> 16)
    h = h * xp.uint32(_M1)
    h = h ^ (h >> 13)
    h = h * xp.uint32(_M2)
    return h ^ (h >> 16)


def _host_words(array: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(array).reshape(-1)
    size = flat.dtype.itemsize
    if size in (4, 8):
        return flat.view(np.uint32)
    return flat.view({1: np.uint8, 2: np.uint16}[size]).astype(np.uint32)


def digest_terms(words, index, xp=np):
    """The two per-word terms whose sums modulo 2**32 are an array's digest: ``words`` its
    bytes as uint32 words, ``index`` their row-major positions (uint32), ``xp`` the array
    module (NumPy here; ``jax.numpy`` where js-train digests arrays on their devices)."""
    a = (words ^ xp.uint32(_K1)) * (index * xp.uint32(2) + xp.uint32(1))
    return a, _fmix(words + index * xp.uint32(_GOLDEN), xp)


def hex_digest(a: int, b: int) -> str:
    """The digest's text: the two sums, modulo 2**32, as 16 hex digits."""
    return f"{a & 0xFFFFFFFF:08x}{b & 0xFFFFFFFF:08x}"


def packed_digests(buffer: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> list[str]:
    """The digest of each array packed in ``buffer`` (1-D, one dtype), array ``i`` being
    ``buffer[starts[i]:starts[i] + sizes[i]]``, in one vectorised pass."""
    if len(starts) == 0:
        return []
    words = _host_words(buffer)
    per = 2 if np.dtype(buffer.dtype).itemsize == 8 else 1
    starts, sizes = np.asarray(starts, np.int64) * per, np.asarray(sizes, np.int64) * per
    owner = np.repeat(np.arange(len(starts)), sizes)
    index = (np.arange(len(words), dtype=np.int64) - starts[owner]).astype(np.uint32)
    sums = []
    for term in digest_terms(words, index):
        # Sums of at most 2**32 uint32 terms fit in uint64: exact, then reduced modulo 2**32.
        total = np.concatenate([[0], np.cumsum(term, dtype=np.uint64)])
        sums.append(total[starts + sizes] - total[starts])
    return [hex_digest(int(a), int(b)) for a, b in zip(*sums, strict=True)]


def host_digest(array: np.ndarray) -> str:
    """The digest of one NumPy array (js-train computes the same one on devices)."""
    words = _host_words(np.asarray(array))
    if words.size == 0:
        return EMPTY
    a, b = digest_terms(words, np.arange(words.size, dtype=np.uint32))
    return hex_digest(int(np.sum(a, dtype=np.uint64)), int(np.sum(b, dtype=np.uint64)))


# -- items ------------------------------------------------------------------------------------


def host_tree(record: dict) -> dict:
    """The abstract orbax tree that reads one entry's item into NumPy arrays."""
    tree = {"id": np.zeros(16, np.uint8)}
    for dtype, length in record["packed"].items():
        tree.setdefault("packed", {})[dtype] = np.zeros(length, jnp.dtype(dtype))
    for entry in record["entries"].values():
        if "array" in entry:
            leaf = np.empty(tuple(entry["shape"]), jnp.dtype(entry["dtype"]))
            tree.setdefault("arrays", {})[entry["array"]] = leaf
    return tree


def _unpack(record: dict, tree: dict, device_digests: Callable | None) -> tuple[dict, list]:
    """``({key: array}, damaged keys)``; leaves that are not NumPy arrays (restored onto
    devices) are digested by ``device_digests``."""
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
    if on_devices:  # without device_digests (js-nn's own read) every leaf is NumPy already
        digests = (device_digests or _host_digests)([flat[k] for k in on_devices])
        got.update(zip(on_devices, digests, strict=True))
    damaged = [
        key
        for key, value in flat.items()
        if (got[key] if key in got else host_digest(value)) != record["entries"][key]["digest"]
    ]
    return flat, damaged


def _host_digests(arrays: list) -> list[str]:
    return [host_digest(np.asarray(array)) for array in arrays]


def checked_item(where: tuple, name: str, record: dict, tree: dict, save_id: str,
                 device_digests: Callable | None = None) -> dict:  # fmt: skip
    """``{key: array}`` of the restored item ``tree`` of entry ``name`` once its save id and
    every digest are checked; ``where`` is ``(directory, step, steps)``."""
    path, step, steps = where
    if bytes(np.asarray(tree["id"], np.uint8)).hex() != save_id:
        raise CheckpointError(
            path, step, f"item {item_name(name)!r}", "belongs to another save (its save id is "
            "not the one in the step's meta/metadata): the step mixes two saves",
            other_steps(steps, step),
        )  # fmt: skip
    flat, damaged = _unpack(record, tree, device_digests)
    if damaged:
        listed = ", ".join(f"'{name}.{key}'" for key in damaged)
        raise CheckpointError(
            path, step, f"{'array' if len(damaged) == 1 else 'arrays'} {listed}",
            "does not match its recorded digest: the checkpoint is damaged",
            other_steps(steps, step),
        )  # fmt: skip
    return flat


@contextmanager
def quiet_orbax():
    """orbax logs (and asyncio prints) the tracebacks of a failed read before raising; the
    CheckpointError raised instead says it once, readably."""
    loggers = [logging.getLogger(name) for name in ("absl", "orbax", "asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def unreadable_item(where: tuple, name: str, error: Exception) -> CheckpointError:
    """The error for an item orbax failed to read (it raises many types for one cause)."""
    path, step, steps = where
    text = str(error).splitlines()[0][:300] if str(error) else ""
    return CheckpointError(
        path, step, f"item {item_name(name)!r} (the arrays of {name!r})",
        f"cannot be read ({type(error).__name__}: {text})", other_steps(steps, step),
    )  # fmt: skip


def locate(ckpt_dir, name: str, which, caller: str) -> tuple[tuple, dict, dict]:
    """``((directory, step, steps), meta, record of the entry name)`` for ``which``, checked."""
    path = Path(ckpt_dir).absolute()
    if not path.is_dir():
        raise FileNotFoundError(
            f"{caller}: no checkpoint directory at {path}. Fix: pass the directory given to "
            "ModelCheckpoint or save_checkpoint"
        )
    steps = steps_in(path)
    step = select_step(path, steps, which, caller)
    meta = read_meta(path, step, steps)
    kinds = meta["kinds"]
    if kinds.get(name, "value") == "value":
        held = ", ".join(f"{key} ({kind})" for key, kind in kinds.items())
        raise KeyError(
            f"{caller}: {path}, step {step} holds no array entry {name!r}; it holds "
            f"{held}. Fix: pass name= one of the entries that are not values"
        )
    return (path, step, steps), meta, meta["items"][name]


def read_checkpoint(ckpt_dir, name: str = "model", which="best") -> tuple[int, dict]:
    """The arrays of the entry ``name`` of a js-train checkpoint, as NumPy, verified.

    Reads only that entry's item and the step's ``meta`` (orbax is imported only now; js-train
    need not be installed), checks the item's save id and every array's digest, and raises
    :class:`CheckpointError` naming the directory, step and part for a damaged step.

    Args:
        ckpt_dir: a directory written by js-train's ``save_checkpoint`` or ``ModelCheckpoint``.
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
