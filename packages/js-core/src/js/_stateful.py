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

import jax
from flax import nnx
from flax.nnx import graphlib
from jax.sharding import SingleDeviceSharding

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

    return test


is_stateful = instance_test(STATEFUL)
is_stateful.__doc__ = "A module, optimizer, ``Rngs`` or variable (cached per type)."


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


class _Marker:
    """A unique, hashable tag in call keys (static argument, keyword argument)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


STATIC, KEYWORD = _Marker("static"), _Marker("keyword")


def split_call(args, kwargs, static_argnums=frozenset(), static_argnames=frozenset()):
    """Split a call into stateful objects, a hashable key, and the dynamic arguments.

    The key has one entry per argument: the object's id for a stateful one, ``(STATIC, value)``
    for a static one, ``None`` for a traced one; keyword arguments follow, sorted by name, as
    ``(KEYWORD, name, id | None | STATIC, [value])``. ``dyn_args`` holds ``None`` where an
    object or a static argument was.
    """
    objects, key = [], []
    dyn_args = list(args)
    for i, arg in enumerate(args):
        if i in static_argnums:
            key.append((STATIC, arg))
            dyn_args[i] = None
        elif is_stateful(arg):
            objects.append(arg)
            key.append(id(arg))
            dyn_args[i] = None
        else:
            key.append(None)
    dyn_kwargs = {}
    for name in sorted(kwargs):
        value = kwargs[name]
        if name in static_argnames:
            key.append((KEYWORD, name, STATIC, value))
        elif is_stateful(value):
            objects.append(value)
            key.append((KEYWORD, name, id(value)))
        else:
            key.append((KEYWORD, name, None))
            dyn_kwargs[name] = value
    return objects, tuple(key), dyn_args, dyn_kwargs


def _without_ids(key: tuple, objects) -> tuple:
    """The key with each object's id replaced by its index among the objects."""
    ids = {id(obj): index for index, obj in enumerate(objects)}
    kinds = []
    for item in key:
        if isinstance(item, int):
            kinds.append(ids[item])
        elif item is not None and item[0] is KEYWORD and isinstance(item[2], int):
            kinds.append((KEYWORD, item[1], ids[item[2]]))
        else:
            kinds.append(item)
    return tuple(kinds)


def _sharding(value):
    """The sharding of a concrete array; None for a tracer (a call inside another trace)."""
    if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
        return value.sharding
    return None


class CallLayout:
    """The static side of one call: argument kinds, graph definition, state paths, shardings.

    Built from the stateful objects of a call and its :func:`split_call` key. Hashable: equal
    layouts run the same program. ``paths[i]`` is the nnx path of state array ``i`` (its first
    entry the object's index), ``shardings[i]`` its sharding when the call was laid out;
    ``placement`` is the shardings when any array spans several devices, else None.
    """

    __slots__ = ("kinds", "graphdef", "paths", "shardings", "placement", "_hash")

    def __init__(self, kinds: tuple, graphdef, paths: tuple, shardings: tuple):
        self.kinds, self.graphdef, self.paths, self.shardings = kinds, graphdef, paths, shardings
        spread = any(s is not None and not isinstance(s, SingleDeviceSharding) for s in shardings)
        self.placement = shardings if spread else None
        self._hash = None

    def _identity(self) -> tuple:
        return (self.graphdef, self.kinds, self.placement)

    def __hash__(self) -> int:
        if self._hash is None:  # unhashable static attributes raise TypeError here
            self._hash = hash(self._identity())
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, CallLayout) and self._identity() == other._identity()

    def rebuild(self, leaves, dyn_args, dyn_kwargs):
        """``(objects, args, kwargs)``: new objects from ``leaves``, the call around them."""
        objects = graphlib.unflatten(self.graphdef, leaves)
        args, kwargs = [], dict(dyn_kwargs)
        for i, kind in enumerate(self.kinds):
            if isinstance(kind, int):
                args.append(objects[kind])
            elif kind is None:
                args.append(dyn_args[i])
            elif kind[0] is STATIC:
                args.append(kind[1])
            elif kind[2] is STATIC:
                kwargs[kind[1]] = kind[3]
            elif isinstance(kind[2], int):
                kwargs[kind[1]] = objects[kind[2]]
        return objects, args, kwargs

    def updated(self, objects, transform: str, fn) -> list:
        """The arrays of rebuilt ``objects`` after ``fn`` ran, refusing a changed structure."""
        graphdef, leaves = graphlib.flatten(objects, with_paths=False)
        if graphdef != self.graphdef:
            raise RuntimeError(
                f"{transform}: {getattr(fn, '__qualname__', fn)} changed the structure or mode "
                "of its arguments while traced (a new attribute, a replaced submodule, or "
                "train()/eval()). Fix: make such changes outside the transformed function."
            )
        return leaves


def lay_out(transform: str, objects, key: tuple) -> tuple[CallLayout, list[nnx.Variable]]:
    """Flatten the call's stateful ``objects``: its :class:`CallLayout` and their Variables."""
    objects = tuple(objects)
    graphdef, flat = graphlib.flatten(objects, with_paths=True)
    variables = state_variables(flat, transform)
    paths = tuple(path for path, _ in flat)
    shardings = tuple(_sharding(variable.get_raw_value()) for variable in variables)
    layout = CallLayout(_without_ids(key, objects), graphdef, paths, shardings)
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
