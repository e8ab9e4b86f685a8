"""The js checkpoint format ``js.training/2``: the layout of a step, its ``meta`` record and
its checks, the choice of a step, the kinds of the saved objects.

A checkpoint directory is an orbax ``CheckpointManager`` root; each saved step is a
subdirectory ``<dir>/<step>/``, renamed to its number only once complete, holding one orbax
item per stateful object, ``state_<name>``, a JSON item ``meta`` and, for ModelCheckpoint,
the step's ``metrics``::

    state_<name>: {"id": uint8[16],                  the save id, repeated in every item
                   "packed": {dtype: 1-D array},     small arrays, concatenated by dtype
                   "arrays": {"0": array, ...}}      large (or sharded) arrays, one leaf each
    meta: {"format": "js.training/2", "save_id": hex, "kinds": {name: kind},
           "values": {name: json value},
           "items": {name: {"packed": {dtype: length},
                            "entries": {key: {"shape": [..], "dtype": str, "digest": hex,
                                              "packed": [dtype, offset] | "array": "<i>"}}}}}

A kind is ``module`` (a ``js.Module``), ``rngs`` (``js.Rngs``), ``state`` (any object with
``state_dict``/``load_state_dict``, an optimizer among them), ``json`` (any other object with
``get_state()``/``set_state(state)`` whose state is a JSON value of any size, e.g. a grain
iterator's position: it goes into ``values`` like a plain value, and is handed to
``set_state`` on load) or ``value`` (plain JSON). The
digests are :mod:`.digest`'s, the items are built by :mod:`.write` and read by :mod:`.read`.
orbax is imported only by :func:`manager` and the readers: ``import js.nn`` never imports it.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import js
from js._checks import flatten_state, is_int

from .quiet import quiet_leftovers

FORMAT = "js.training/2"
OLD_FORMATS = ("js.training/1",)
KINDS = ("module", "rngs", "state", "json", "value")
ON_META = ("json", "value")  # kinds kept in meta's "values", with no array item
_HEX16 = re.compile(r"[0-9a-f]{16}\Z")


class CheckpointError(ValueError):
    """A checkpoint step that cannot be read or does not match what was written.

    Attributes: ``directory``, ``step`` (None when no step is concerned) and ``part`` (the
    file, item or array that failed).
    """

    def __init__(
        self, directory: str | os.PathLike, step: int | None, part: str, what: str, fix: str
    ) -> None:
        self.directory, self.step, self.part = str(directory), step, part
        where = f"{directory}" if step is None else f"{directory}, step {step}"
        super().__init__(f"checkpoint {where}: {part} {what}. Fix: {fix}")


def item_name(name: str) -> str:
    """The orbax item holding the arrays of the checkpoint entry ``name``."""
    return f"state_{name}"


def read_json(path: str | os.PathLike) -> Any:
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


def score(metrics: Any) -> float:
    """How ModelCheckpoint ranks a step: its ``_score`` metric (higher is better; NaN last)."""
    value = metrics.get("_score") if isinstance(metrics, Mapping) else None
    return -math.inf if value is None or math.isnan(value) else float(value)


def read_metrics(path: Path, step: int) -> dict | None:
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


def select_step(
    path: Path, steps: list[int], which: str | int, caller: str = "load_checkpoint"
) -> int:
    """The step ``which`` (``'best'``, ``'last'`` or a step number) names among ``steps``;
    only ``'best'`` reads anything (every step's metrics)."""
    if not steps:
        raise FileNotFoundError(f"{caller}: no complete checkpoint in {path}")
    if which == "best":
        return _best(path, steps, caller)
    if which == "last":
        return steps[-1]
    if is_int(which):
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
    placed = (
        isinstance(packed, list)
        and len(packed) == 2
        and isinstance(packed[0], str)
        and type(packed[1]) is int
        and packed[1] >= 0
    )
    if not placed and not isinstance(entry.get("array"), str):
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
    return problems or [f"{name!r}: {problem}" for problem in _packing_problems(record)]


def _packing_problems(record: Mapping) -> list[str]:
    """Where the well-formed entries of ``record`` say they are packed against the packed
    buffers it lists: each in a buffer of its own dtype, inside it, and each buffer exactly as
    long as its entries (as written), so that no claim makes a reader allocate or slice
    what the save never held."""
    sizes: dict[str, int] = {}
    problems = []
    for key, entry in record["entries"].items():
        if "packed" not in entry:
            continue
        dtype, start = entry["packed"]
        size = math.prod(entry["shape"])
        if dtype not in record["packed"]:
            problems.append(f"entry {key!r} is packed in {dtype}, a buffer the item lacks")
        elif str(jnp.dtype(entry["dtype"])) != dtype:
            problems.append(f"entry {key!r} is {entry['dtype']} but packed in the {dtype} buffer")
        elif start + size > _length(record["packed"][dtype]):
            problems.append(f"entry {key!r} lies outside the packed {dtype} buffer")
        sizes[dtype] = sizes.get(dtype, 0) + size
    for dtype, length in record["packed"].items():
        if _length(length) != sizes.get(dtype, 0):
            problems.append(
                f"the packed {dtype} buffer claims {length!r} numbers, its entries hold "
                f"{sizes.get(dtype, 0)}"
            )
    return problems


def _length(value) -> int:
    return value if type(value) is int and value >= 0 else -1


def meta_problems(meta: Any) -> list[str]:
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
        if kind in ON_META and name not in values:
            problems.append(f"has no value for {name!r}")
        elif kind not in ON_META:
            problems += _record_problems(name, items.get(name))
    return problems


def read_meta(path: Path, step: int, steps: list[int]) -> dict:
    """The step's checked ``meta`` record, or a CheckpointError naming what is wrong."""
    part = "the metadata file meta/metadata"
    try:
        meta = read_json(path / str(step) / "meta" / "metadata")
    except FileNotFoundError:
        raise CheckpointError(
            path,
            step,
            part,
            "is missing (this step holds no js checkpoint)",
            other_steps(steps, step),
        ) from None
    except (OSError, ValueError) as error:
        raise CheckpointError(
            path,
            step,
            part,
            f"cannot be read ({type(error).__name__}: {error})",
            other_steps(steps, step),
        ) from None
    problems = meta_problems(meta)
    if problems:
        fix = other_steps(steps, step)
        if isinstance(meta, Mapping) and meta.get("format") not in (None, FORMAT):
            fix = f"load it with the js release that wrote it, or {fix}"
        raise CheckpointError(path, step, part, "; ".join(problems), fix)
    return meta


def locate(
    ckpt_dir: str | os.PathLike, name: str, which: str | int, caller: str
) -> tuple[tuple, dict, dict]:
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
    if kinds.get(name, "value") in ON_META:
        held = ", ".join(f"{key} ({kind})" for key, kind in kinds.items())
        raise KeyError(
            f"{caller}: {path}, step {step} holds no array entry {name!r}; it holds "
            f"{held}. Fix: pass name= one of the entries that are not values"
        )
    return (path, step, steps), meta, meta["items"][name]


# -- objects ----------------------------------------------------------------------------------


def native(obj) -> bool:
    """Whether ``obj`` speaks js's flat protocol: ``state_dict(as_numpy=False)`` gives its live
    ``{dotted.key: jax.Array}`` (no host copy; sharded arrays stay sharded) and
    ``load_state_dict`` takes that flat dict back (js.Module, js.Rngs, js.optim optimizers)."""
    try:
        return "as_numpy" in inspect.signature(obj.state_dict).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def _kind(name: str, obj) -> str:
    if isinstance(obj, js.Module):
        return "module"
    if isinstance(obj, js.Rngs):
        return "rngs"
    if all(callable(getattr(obj, attr, None)) for attr in ("state_dict", "load_state_dict")):
        return "state"
    if all(callable(getattr(obj, attr, None)) for attr in ("get_state", "set_state")):
        return "json"
    try:
        json.dumps(obj)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"checkpoint object {name!r} is a {type(obj).__name__}: neither stateful (no "
            f"state_dict/load_state_dict, no get_state/set_state) nor a plain JSON value "
            f"({error}). Fix: save an object with state_dict/load_state_dict or "
            f"get_state/set_state, or a JSON value; for a data pipeline that a js.training.Trainer "
            f"steps through, use js.training.save_checkpoint/load_checkpoint with the Trainer in "
            f"the same dict ({{..., 'trainer': trainer, {name!r}: pipeline}})"
        ) from None
    return "value"


def kinds_of(objects: Mapping) -> dict[str, str]:
    """``{name: kind}`` of ``objects``, after checking the names (no state is read)."""
    if not isinstance(objects, Mapping) or not objects:
        raise TypeError("checkpoint objects must be a non-empty {name: object} dict")
    kinds = {}
    for name, obj in objects.items():
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(
                f"checkpoint object names must be non-empty strings without '.', got {name!r}"
            )
        kinds[name] = _kind(name, obj)
    return kinds


def json_state(name: str, obj) -> Any:
    """The JSON value ``obj.get_state()`` of a ``json`` object, checked to encode as JSON."""
    state = obj.get_state()
    try:
        json.dumps(state, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"checkpoint object {name!r}: get_state() returned a {type(state).__name__} that is "
            f"not a plain JSON value ({error}). Fix: return dicts, lists, strings and numbers "
            "(bytes decoded to str)"
        ) from None
    return state


def live_arrays(name: str, obj) -> dict:
    """``{dotted.key: array}`` of a stateful object: the live ``jax.Array``s of a
    :func:`native` one, the (flattened) ``state_dict()`` of others."""
    state = obj.state_dict(as_numpy=False) if native(obj) else obj.state_dict()
    if not isinstance(state, Mapping):
        raise TypeError(
            f"checkpoint object {name!r}: state_dict() returned a "
            f"{type(state).__name__}, not a {{key: array}} dict"
        )
    flat = flatten_state(state)
    for key, value in flat.items():
        if not isinstance(value, (jax.Array, np.ndarray)):
            array = np.asarray(value) if np.ndim(value) >= 0 else None
            if array is None or array.dtype == object:
                raise TypeError(
                    f"checkpoint object {name!r}: state_dict entry {key!r} is a "
                    f"{type(value).__name__}, not an array"
                )
            flat[key] = array
    return flat


# -- the orbax manager ------------------------------------------------------------------------


class _Unranked:
    """An orbax preservation policy keeping the steps without metrics: those ModelCheckpoint
    did not write (``save_checkpoint``'s), which it never ranks and so never deletes."""

    def should_preserve(self, checkpoints, *, context) -> list[bool]:
        return [info.metrics is None for info in checkpoints]


def manager(path, *, ranked=True, keep_best=None, asynchronous=False):
    """An orbax CheckpointManager on ``path``; ``ranked`` ranks steps by their ``_score``
    metric (reading every step's metrics when it opens; unranked it reads none).

    ``keep_best=k`` (ModelCheckpoint's ``save_top_k``; ranked only) keeps, after each save,
    the latest step, the ``k`` best by ``score`` (ties: the later step; NaN ranks last; the
    steps already in ``path`` compete too) and the steps without metrics, and deletes every
    other step once the new one is complete; ``k=0`` keeps only the latest (and those without
    metrics). ``None`` deletes nothing."""
    import orbax.checkpoint as ocp

    keep = ocp.checkpoint_managers
    policy = None
    if keep_best is not None:
        if not ranked or not is_int(keep_best) or keep_best < 0:
            raise ValueError(
                f"manager: keep_best must be an int >= 0 on a ranked manager, got "
                f"{keep_best!r} (ranked={ranked})"
            )
        # BestN sorts the ranked steps by score, stably in step order, and keeps the last k:
        # the k best, ties going to the later step, as select_step's 'best' chooses.
        policy = keep.AnyPreservationPolicy(
            [keep.LatestN(n=1), keep.BestN(get_metric_fn=score, n=int(keep_best)), _Unranked()]
        )
    options = ocp.CheckpointManagerOptions(
        best_fn=score if ranked else None,
        best_mode="max",
        preservation_policy=policy,
        enable_async_checkpointing=asynchronous,
        lightweight_initialize=not ranked,
    )
    # Array items are written without zstd: weights compress to ~0.92 of their size at best,
    # and the compressor's buffers and CPU time made a 200 MB save need 1.2x the model in
    # extra host memory and take 3-5x as long (uncompressed: 0.3x). Readers need no option:
    # each array's metadata says how it is stored, so compressed steps still load.
    quiet_leftovers()  # orbax's reports of a failure js raises itself: to DEBUG
    registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
    registry.add(None, ocp.args.PyTreeSave, ocp.PyTreeCheckpointHandler(use_compression=False))
    return ocp.CheckpointManager(Path(path).absolute(), options=options, handler_registry=registry)
