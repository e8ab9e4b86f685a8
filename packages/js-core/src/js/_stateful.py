"""One call layout for every state-threading transform.

``js.jit``, ``js.value_and_grad``/``js.grad`` and ``js.scan_steps`` all take modules,
optimizers and ``Rngs`` among ordinary arguments. Each splits the call once
(:func:`split_call`), flattens the stateful objects together (a variable shared between them
once) into a :class:`CallLayout` and the list of their Variables, runs a pure function of the
arrays that rebuilds the objects and the call around them (:meth:`CallLayout.rebuild`), and
writes the new arrays back (:func:`write_back`).

The layout is static and hashable: where each object sits among the arguments, the objects'
graph definition, and, per state array, its path and its sharding. ``js.jit`` keys its compiled
programs on it, so a model placed on a mesh (``js.shard``) compiles a program whose outputs stay
on the shardings its inputs had; on one device the shardings play no part (the fast path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import jax
import jax.core  # jax.core.Tracer below; pyright knows a submodule only once imported
from flax import nnx
from jax.sharding import SingleDeviceSharding

from ._checks import sharding_of

STATEFUL = (nnx.Pytree, nnx.Variable)


def instance_test(types: tuple[type, ...]):
    """``isinstance(value, types)``, cached per type. isinstance against ``nnx.Variable`` goes
    through a metaclass hook that costs microseconds on every plain value (ints, strings,
    arrays); the answer depends on the type alone, except for a tracer (on what it traces),
    which is never cached."""
    answers: dict[type, bool] = {}

    def test(value) -> bool:
        answer = answers.get(type(value))
        if answer is None:
            answer = isinstance(value, types)
            if not isinstance(value, jax.core.Tracer):
                answers[type(value)] = answer
        return answer

    test.answers = answers  # for a caller's inlined lookup (split_call, once per argument)
    return test


is_stateful = instance_test(STATEFUL)
is_stateful.__doc__ = "A module, optimizer, ``Rngs`` or variable (cached per type)."
_STATEFUL_TYPES = is_stateful.answers


def state_variables(flat, transform: str) -> list[nnx.Variable]:
    """The Variables of a flattened graph, refusing raw arrays held as state."""
    variables = []
    for path, leaf in flat:
        if not isinstance(leaf, nnx.Variable):
            where = ".".join(map(str, path[1:]))
            raise TypeError(
                f"{transform}: argument state at {where!r} is a raw {type(leaf).__name__}, not a "
                "Parameter or Buffer. Fix: wrap it, e.g. self.x = js.Buffer(array)"
            )
        variables.append(leaf)
    return variables


@dataclass(frozen=True, slots=True)
class Static:
    """A static argument: its value selects the program (hashed, compared by value)."""

    value: Any

    def take(self, objects, given):
        return self.value


@dataclass(frozen=True, slots=True)
class _Traced:
    """An argument traced into the program (an array, a pytree of arrays): ``TRACED``."""

    def take(self, objects, given):
        return given


TRACED = _Traced()


@dataclass(frozen=True, slots=True)
class Stateful:
    """A module, optimizer or ``Rngs``: the call's stateful object number ``index``."""

    index: int

    def take(self, objects, given):
        return objects[self.index]


@dataclass(frozen=True, slots=True)
class Keyword:
    """A keyword argument ``name``, and what it holds (one of the slots above)."""

    name: str
    slot: Static | _Traced | Stateful


def split_call(args, kwargs, static_argnums=frozenset(), static_argnames=frozenset()):
    """Split a call into stateful objects, a hashable key, and the dynamic arguments.

    The key identifies the call on js.jit's per-call path: one entry per positional argument
    (the object's ``id`` for a stateful one, :class:`Static` for a static one, ``None`` for a
    traced one), then, per keyword argument sorted by name, its name (a ``str``: nothing else in
    a key is one) and its entry. :func:`lay_out` turns a key into the layout's :class:`Static`,
    :class:`Stateful`, ``TRACED`` and :class:`Keyword` slots. ``dyn_args`` holds ``None`` where
    an object or a static argument was; ``dyn_kwargs`` the traced keyword arguments only.
    """
    objects, key, dyn_args = [], [], []
    known = _STATEFUL_TYPES.get  # is_stateful, inlined: this runs on every js.jit call
    for i, arg in enumerate(args):
        stateful = known(type(arg))
        if stateful is None:
            stateful = is_stateful(arg)
        if static_argnums and i in static_argnums:
            key.append(Static(arg))
            dyn_args.append(None)
        elif stateful:
            objects.append(arg)
            key.append(id(arg))
            dyn_args.append(None)
        else:
            key.append(None)
            dyn_args.append(arg)
    dyn_kwargs = {}
    if kwargs:
        for name in sorted(kwargs):
            value = kwargs[name]
            key.append(name)
            if name in static_argnames:
                key.append(Static(value))
            elif is_stateful(value):
                objects.append(value)
                key.append(id(value))
            else:
                key.append(None)
                dyn_kwargs[name] = value
    return objects, tuple(key), dyn_args, dyn_kwargs


def _slots(key: tuple, objects) -> tuple:
    """The layout's slots of a :func:`split_call` key: object ids become :class:`Stateful`."""
    index = {id(obj): i for i, obj in enumerate(objects)}

    def slot(entry):
        if entry is None:
            return TRACED
        return entry if isinstance(entry, Static) else Stateful(index[entry])

    slots, entries = [], iter(key)
    for entry in entries:
        slots.append(Keyword(entry, slot(next(entries))) if isinstance(entry, str) else slot(entry))
    return tuple(slots)


class CallLayout:
    """The static side of one call: argument slots, graph definition, state paths, shardings.

    Built from the stateful objects of a call and its :func:`split_call` key. Hashable: equal
    layouts run the same program. ``paths[i]`` is the nnx path of state array ``i`` (its first
    entry the object's index), ``shardings[i]`` its sharding when the call was laid out;
    ``placement`` is the shardings when any array spans several devices, else None.
    """

    __slots__ = ("slots", "graphdef", "paths", "shardings", "placement", "_hash")

    def __init__(self, slots: tuple, graphdef, paths: tuple, shardings: tuple):
        self.slots, self.graphdef, self.paths, self.shardings = slots, graphdef, paths, shardings
        spread = any(s is not None and not isinstance(s, SingleDeviceSharding) for s in shardings)
        self.placement = shardings if spread else None
        self._hash = None

    def _identity(self) -> tuple:
        return (self.graphdef, self.slots, self.placement)

    def __hash__(self) -> int:
        if self._hash is None:  # unhashable static attributes raise TypeError here
            self._hash = hash(self._identity())
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, CallLayout) and self._identity() == other._identity()

    def rebuild(self, leaves, dyn_args, dyn_kwargs):
        """``(objects, args, kwargs)``: new objects from ``leaves``, the call around them."""
        objects = nnx.unflatten(self.graphdef, leaves)
        n = len(dyn_args)  # positional slots first, keyword slots after
        args = [s.take(objects, given) for s, given in zip(self.slots[:n], dyn_args, strict=True)]
        kwargs = dict(dyn_kwargs)
        for keyword in self.slots[n:]:
            kwargs[keyword.name] = keyword.slot.take(objects, dyn_kwargs.get(keyword.name))
        return objects, args, kwargs

    def updated(self, objects, transform: str, fn) -> list:
        """The arrays of rebuilt ``objects`` after ``fn`` ran, refusing a changed structure."""
        graphdef, leaves = nnx.flatten(objects, with_paths=False)
        if graphdef != self.graphdef:
            raise RuntimeError(
                f"{transform}: {getattr(fn, '__qualname__', fn)} changed the structure or mode "
                "of its arguments while traced (a new attribute, a replaced submodule, or "
                "train()/eval()). Fix: make such changes outside the transformed function."
            )
        return cast(list, leaves)  # with_paths=False: a plain list


def lay_out(transform: str, objects, key: tuple) -> tuple[CallLayout, list[nnx.Variable]]:
    """Flatten the call's stateful ``objects``: its :class:`CallLayout` and their Variables."""
    objects = tuple(objects)
    graphdef, flat = nnx.flatten(objects, with_paths=True)
    variables = state_variables(flat, transform)
    paths = tuple(path for path, _ in flat)
    shardings = tuple(sharding_of(variable.get_raw_value()) for variable in variables)
    layout = CallLayout(_slots(key, objects), graphdef, paths, shardings)
    if layout.placement is not None:
        _check_one_placement(transform, layout)
    return layout, variables


def _check_one_placement(transform: str, layout: CallLayout) -> None:
    """Refuse state on one device next to state on a mesh: one program runs on one mesh."""
    alone = [
        f"{'.'.join(map(str, path[1:]))!r} of stateful argument {path[0]} on "
        f"{next(iter(sharding.device_set))}"
        for path, sharding in zip(layout.paths, layout.shardings, strict=True)
        if isinstance(sharding, SingleDeviceSharding)
    ]
    if alone:
        raise ValueError(
            f"{transform}: some state is on a mesh (js.shard) and some on a single device: "
            f"{'; '.join(alone[:4])}{' ...' if len(alone) > 4 else ''}. Fix: js.shard(obj, "
            "mesh) every module and js.Rngs passed to the step (and build optimizers after)."
        )


def lay_out_call(transform: str, args, kwargs):
    """``(layout, variables, dyn_args, dyn_kwargs)`` of a call without static arguments."""
    objects, key, dyn_args, dyn_kwargs = split_call(args, kwargs)
    layout, variables = lay_out(transform, objects, key)
    return layout, variables, dyn_args, dyn_kwargs


def read(variables) -> list:
    """The arrays of ``variables``, in layout order."""
    return [variable.get_raw_value() for variable in variables]


def write_back(variables, new_leaves, keep=None) -> None:
    """Store ``new_leaves`` in ``variables`` (all, or where ``keep`` is False)."""
    for index, (variable, leaf) in enumerate(zip(variables, new_leaves, strict=True)):
        if keep is None or not keep[index]:
            variable.set_raw_value(leaf)
