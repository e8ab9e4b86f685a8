"""Which arguments of a call are state, and how a pure function threads them.

``js.jit``, ``js.value_and_grad``/``js.grad`` and ``js.scan_steps`` all take modules,
optimizers and ``Rngs`` among ordinary arguments. Each flattens those objects together (a
variable shared between them once), runs a pure function of their arrays that rebuilds the
objects and the call around them, and writes the new arrays back.
"""

from __future__ import annotations

from flax import nnx
from flax.nnx import graphlib

STATEFUL = (nnx.Pytree, nnx.Variable)

_STATEFUL_TYPES: dict[type, bool] = {}


def is_stateful(value) -> bool:
    """A module, optimizer, ``Rngs`` or variable (cached per type)."""
    # isinstance against nnx.Variable goes through a metaclass hook: cache the answer per type.
    kind = type(value)
    answer = _STATEFUL_TYPES.get(kind)
    if answer is None:
        answer = _STATEFUL_TYPES[kind] = isinstance(value, STATEFUL)
    return answer


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


class StatefulCall:
    """The stateful arguments of one call, flattened once, and the call rebuilt around copies.

    ``leading`` objects (the differentiated module) come first in ``objects``; then the
    stateful positional arguments, then the stateful keyword arguments.
    """

    def __init__(self, transform: str, args: tuple, kwargs: dict, leading: tuple = ()):
        self.slots = [i for i, arg in enumerate(args) if is_stateful(arg)]
        self.names = [k for k, v in kwargs.items() if is_stateful(v)]
        self.leading = len(leading)
        objects = (*leading, *(args[i] for i in self.slots), *(kwargs[k] for k in self.names))
        self.graphdef, self.flat = graphlib.flatten(objects, with_paths=True)
        self.variables = state_variables(self.flat, transform)

    def leaves(self) -> list:
        return [variable.get_raw_value() for variable in self.variables]

    def rebuild(self, leaves, args, kwargs):
        """New objects from ``leaves``, and ``args``/``kwargs`` with them in place."""
        merged = graphlib.unflatten(self.graphdef, leaves)
        call_args, call_kwargs = list(args), dict(kwargs)
        offset = self.leading
        for j, i in enumerate(self.slots):
            call_args[i] = merged[offset + j]
        offset += len(self.slots)
        for j, k in enumerate(self.names):
            call_kwargs[k] = merged[offset + j]
        return merged, call_args, call_kwargs

    def write_back(self, new_leaves, keep=None) -> None:
        """Store ``new_leaves`` in the original variables (all, or where ``keep`` is False)."""
        for index, (variable, leaf) in enumerate(zip(self.variables, new_leaves, strict=True)):
            if keep is None or not keep[index]:
                variable.set_raw_value(leaf)


def new_leaves(merged) -> list:
    """The arrays of rebuilt objects, in the order ``StatefulCall.leaves`` gave them."""
    return graphlib.flatten(merged, with_paths=False)[1]
