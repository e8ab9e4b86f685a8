"""The host side of an optimizer: ``OptState``, the option helpers, ``ParamGroup`` (one entry
of ``param_groups``) and ``Host`` (see ``_optimizer`` for how options live twice).
"""

from __future__ import annotations

import inspect
import numbers
import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import js
from js._checks import check_number, sharding_of


class GroupOwner(Protocol):
    """What a :class:`ParamGroup` needs of its optimizer (this module imports none of it)."""

    params: js.ParameterSelection

    @property
    def defaults(self) -> dict[str, Any]: ...

    def _write_option(self, index: int, key: str, value: Any) -> None: ...


class OptState(js.Buffer):
    """One array of optimizer state (a moment, a counter, a group's hyperparameter): threaded by
    ``js.jit``, never differentiated, saved by :meth:`Optimizer.state_dict`."""


def show_signature(cls: type) -> None:
    """``inspect.signature(cls)`` shows the constructor's parameters, as torch's classes do:
    flax's ``PytreeMeta.__call__`` (and ``VariableMeta``'s) stands in front of ``__init__`` and
    shows ``(*args, **kwargs)`` (notebooks, ``help()`` and config systems read the signature)."""
    init = inspect.signature(cls.__init__)
    cls.__signature__ = init.replace(parameters=list(init.parameters.values())[1:])  # pyright: ignore[reportAttributeAccessIssue]


show_signature(OptState)


def hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


class ById:
    """A value compared by identity (a schedule: two equal-looking closures compute apart)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other) -> bool:
        return isinstance(other, ById) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)

    def __repr__(self) -> str:
        return f"ById({self.value!r})"


def default_float() -> np.dtype:
    """float32, or float64 under ``jax_enable_x64``: the dtype of the group arrays."""
    return np.dtype(jnp.result_type(float))


def put_scalars(values: list[float], like: jax.Array | None, dtype) -> list[jax.Array]:
    """A group's host numbers as one device vector, in a list (empty when there are none):
    replicated on ``like``'s mesh when it is sharded by name, else uncommitted on the default
    device (a compiled step moves it beside the parameters). One transfer, nothing compiled.

    One vector, not one 0-d array per number: each array is one more argument for every
    compiled step to pass (Adam's 8 numbers cost the tiny-MLP step about 6 us a call as 8
    arrays; docs/benchmarks.md, "js.jit per call")."""
    if not values:
        return []
    host = np.asarray(values, dtype)
    sharding = sharding_of(like) if like is not None else None
    if isinstance(sharding, NamedSharding):
        return [jax.device_put(host, NamedSharding(sharding.mesh, PartitionSpec()))]
    return [jax.device_put(host)]


def check_lr(lr) -> None:
    """A float ``lr`` >= 0 (``js._checks``' wording) or a schedule (any callable)."""
    if callable(lr):
        return
    if isinstance(lr, (bool, np.bool_)) or not isinstance(lr, numbers.Real):
        raise TypeError(
            f"lr must be a number >= 0 or a schedule (a callable of the step count), got {lr!r} "
            f"(a {type(lr).__name__}). Fix: pass a number, e.g. lr=0.001, or a schedule, e.g. "
            "lr=js.optim.cosine_schedule(0.001, total_steps)"
        )
    check_number("", "lr", lr, 0)


def option_array(value) -> np.ndarray:
    """A numeric option as the float64 array its state-dict entry holds (betas: shape (2,))."""
    return np.array(value, np.float64, copy=True)


def option_value(array: np.ndarray, like):
    """A state-dict entry back as the Python value of an option shaped like ``like``."""
    array = np.asarray(array, np.float64)
    if array.ndim == 0:
        return float(array)
    return tuple(float(x) for x in array.reshape(-1))


class GroupView(Mapping):
    """The read-only group ``update`` sees: static options (and a schedule ``lr``) only."""

    __slots__ = ("_values", "_owner")

    def __init__(self, values: dict, owner: str):
        self._values = values
        self._owner = owner

    def __getitem__(self, key):
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(
                f"{self._owner}.update: group[{key!r}] is not a static option; numeric options "
                "reach update as arrays in h (from scalars()), so that writing them never "
                "recompiles. Fix: read h[...] (or add the option to the class's static)."
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class ParamGroup(MutableMapping):
    """One parameter group, as an entry of torch's ``optimizer.param_groups``.

    ``group["params"]`` lists the group's Parameters; every option of the optimizer is a key
    (``group["lr"]``, ``group["betas"]``, ...), and any other key a user or a scheduler adds
    (``"initial_lr"``) is kept on the host. Writing a numeric option checks it, recomputes the
    group's hyperparameter arrays and takes effect at the next ``step``, without compiling
    again. Static options (e.g. ``nesterov``, ``amsgrad``) and ``"params"`` cannot be written:
    build a new optimizer for those.
    """

    __slots__ = ("_owner", "_index", "_values", "_indices", "__weakref__")

    def __init__(self, owner: GroupOwner, index: int, indices: tuple[int, ...], values: dict):
        self._owner = weakref.ref(owner)
        self._index = index
        self._indices = indices
        self._values = values

    def _optimizer(self) -> GroupOwner:
        owner = self._owner()
        if owner is None:
            raise RuntimeError("this parameter group's optimizer no longer exists")
        return owner

    def __getitem__(self, key: str) -> Any:
        if key == "params":
            variables = self._optimizer().params.variables
            return [variables[i] for i in self._indices]
        return self._values[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._optimizer()._write_option(self._index, key, value)

    def __delitem__(self, key: str) -> None:
        if key == "params" or key in self._optimizer().defaults:
            raise KeyError(
                f"param_groups[{self._index}][{key!r}] is an option of the optimizer and "
                "cannot be deleted. Fix: write another value instead."
            )
        del self._values[key]

    def __iter__(self) -> Iterator[str]:
        yield "params"
        yield from self._values

    def __len__(self) -> int:
        return 1 + len(self._values)

    @property
    def paths(self) -> tuple[str, ...]:
        """The dotted paths of this group's Parameters."""
        paths = self._optimizer().params.paths
        return tuple(paths[i] for i in self._indices)

    def __repr__(self) -> str:
        options = ", ".join(f"{key!r}: {value!r}" for key, value in self._values.items())
        return f"{{'params': <{len(self._indices)} parameters>, {options}}}"


class Host:
    """The host side of an optimizer (its groups and defaults), held as one static attribute.

    Equality and hash see only ``key``, the structure (which parameters in which group, the
    static options, a schedule by identity): numeric option values are not part of the graph
    definition, so writing them never makes ``js.jit`` compile again.
    """

    __slots__ = ("groups", "defaults", "key", "_hash")

    def __init__(self, groups: list[ParamGroup], defaults: dict, key: Hashable):
        self.groups = groups
        self.defaults = defaults
        self.key = key
        self._hash = hash(key)

    def __eq__(self, other) -> bool:
        return isinstance(other, Host) and self.key == other.key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Host({len(self.groups)} groups)"


def named_pairs(owner: str, where: str, params) -> tuple[list, tuple]:
    """``(named, grad_paths)`` of one group's ``params``: a ParameterSelection (of the model or
    of a submodule), ``(path, Parameter)`` pairs, or Parameters (path None: found at the step)."""
    if isinstance(params, js.ParameterSelection):
        return params.named(), params.grad_paths
    if isinstance(params, (str, bytes, Mapping)) or not isinstance(params, Iterable):
        items = None
    else:
        items = list(params)
    if items is not None and all(isinstance(item, js.Parameter) for item in items):
        return [(None, item) for item in items], tuple(None for _ in items)
    if items is None or not all(
        isinstance(item, tuple)
        and len(item) == 2
        and isinstance(item[0], str)
        and isinstance(item[1], js.Parameter)
        for item in items
    ):
        raise TypeError(
            f"{owner}: {where} must be the selection model.parameters() returns (of the model or "
            "a submodule), a list of Parameters, or a list of (path, Parameter) pairs (as "
            f"model.named_parameters() yields), got {type(params).__name__}. Fix: "
            f"{owner}(model.parameters(), ...) or [{{'params': model.parameters(), ...}}]"
        )
    return items, tuple(path for path, _ in items)


def parse_groups(
    cls: str, params, defaults: dict, static: tuple[str, ...], check_group: Callable
) -> tuple[js.ParameterSelection, list, tuple, bool]:
    """``(selection over every group, [(indices, options), ...], sources, search)``, checked
    (``check_group(owner, values)`` checks one group's options).

    ``sources`` holds per Parameter the path its gradient has in its group's terms (None for a
    Parameter given without one); ``search`` says whether the step must find the gradients by
    those paths and shapes (``_paths``) from the start."""
    if isinstance(params, js.ParameterSelection):
        raw = [{"params": params}]
    elif (
        isinstance(params, (list, tuple)) and params and all(isinstance(g, Mapping) for g in params)
    ):
        raw = list(params)
    elif isinstance(params, (list, tuple)) and not params:
        raise ValueError(f"{cls}: got an empty list of parameter groups; nothing to optimize")
    else:
        raise TypeError(
            f"{cls}: params must be the selection model.parameters() returns, or a list of "
            f"parameter groups {{'params': ..., **options}}, got {type(params).__name__}. "
            f"Fix: {cls}(model.parameters(), ...)"
        )
    many = len(raw) > 1
    entries: list = []  # (group, path or None, grad path, Parameter)
    seen: dict[int, int] = {}
    groups = []
    for index, group in enumerate(raw):
        where = f"param_groups[{index}]"
        owner = f"{cls} {where}" if many else cls
        if "params" not in group:
            raise ValueError(
                f"{cls}: {where} has no 'params'. Fix: {{'params': model.parameters(), ...}}"
            )
        unknown = [key for key in group if key != "params" and key not in defaults]
        if unknown:
            raise ValueError(
                f"{cls}: unknown option {unknown[0]!r} in {where}; {cls}'s options are "
                f"{', '.join(defaults)}. Fix: spell it as one of them, or drop it."
            )
        named, gpaths = named_pairs(
            cls, f"{where}['params']" if many else "params", group["params"]
        )
        if not named:
            what = f"{where} is empty" if many else "got an empty parameter selection"
            raise ValueError(f"{cls}: {what}; nothing to optimize")
        indices = []
        for (path, param), gpath in zip(named, gpaths, strict=True):
            if id(param) in seen:
                shown = f"parameter {path!r}" if path is not None else "a parameter"
                raise ValueError(
                    f"{cls}: {shown} is in param_groups[{seen[id(param)]}] and "
                    f"{where}; a parameter belongs to one group. Fix: list it once."
                )
            seen[id(param)] = index
            indices.append(len(entries))
            entries.append((index, path, gpath, param))
        values = {key: group.get(key, default) for key, default in defaults.items()}
        values.update({k: v for k, v in group.items() if k != "params" and k not in values})
        for key in static:
            if key in values and not hashable(values[key]):
                raise TypeError(f"{owner}: the static option {key} must be hashable")
        check_group(owner, values)
        groups.append((tuple(indices), values))
    # Gradients are found under these paths, or else at each step by _paths.resolve: a
    # Parameter given without a path, or two under one path (submodule selections), make
    # the step search from the start. State-dict keys: the path, or with the group's
    # index when two share it ('param_groups.1.weight'), or its place ('param_groups.0.2').
    counts = Counter(path for _, path, _, _ in entries)
    sources = tuple(None if path is None else gpath for _, path, gpath, _ in entries)
    search = any(path is None or counts[path] > 1 for _, path, _, _ in entries)
    named_all, grad_paths, place = [], [], Counter()
    for g, path, gpath, param in entries:
        if path is None or counts[path] > 1:
            gpath = f"param_groups.{g}.{place[g] if path is None else path}"
        named_all.append((gpath if path is None or counts[path] > 1 else path, param))
        grad_paths.append(gpath)
        place[g] += 1
    if len(raw) == 1 and isinstance(raw[0]["params"], js.ParameterSelection):
        selection = raw[0]["params"]
    else:
        selection = js.ParameterSelection(named_all, tuple(grad_paths))
    return selection, groups, sources, search


def frozen_value(value):
    """A hashable stand-in for an option value (a schedule by identity)."""
    if callable(value):
        return ById(value)
    if isinstance(value, list):
        return tuple(value)
    return value if hashable(value) else repr(value)


def describe(cls: str, count: int, groups: list[ParamGroup]) -> str:
    """An optimizer's repr: its class, parameter count and each group's options."""

    def shown(group: ParamGroup) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in group._values.items())

    if len(groups) == 1:
        return f"{cls}({count} parameters, {shown(groups[0])})"
    inner = "; ".join(f"[{len(g._indices)}: {shown(g)}]" for g in groups)
    return f"{cls}({count} parameters in {len(groups)} groups: {inner})"


def state_slots(name: str, paths: tuple[str, ...], fresh: dict[int, dict], kept: dict) -> tuple:
    """``(slots, keys, variables)`` of the per-parameter state, in parameter order: new
    ``OptState``s of ``fresh`` ``{index: {field: array}}`` (keyed ``'<name>.<field>.<path>'``)
    and the ``kept`` ``{(index, field): (key, OptState)}``."""
    entries = [
        ((i, f), (f"{name}.{f}.{paths[i]}", OptState(v)))
        for i in fresh
        for f, v in fresh[i].items()
    ]
    entries = sorted(
        [*entries, *kept.items()], key=lambda entry: entry[0][0]
    )  # stable: field order kept
    slots = tuple(slot for slot, _ in entries)
    return slots, tuple(key for _, (key, _) in entries), tuple(v for _, (_, v) in entries)
