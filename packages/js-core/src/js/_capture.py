"""Refusing state that a compiled function would freeze: reads from closures, globals, defaults.

A compiled program receives its arguments anew on every call, but whatever it reads from
elsewhere is captured once, at trace time, as a constant. A module read that way keeps the
weights it had then, and its updates are lost without an error. ``js.jit`` therefore refuses a
function that reaches a module, optimizer, ``Rngs`` or variable other than through its
arguments, following the plain Python functions it calls a few levels deep.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

from ._stateful import STATEFUL

# Library code reads no user state; stop following calls there.
_LIBRARIES = ("jax", "jaxlib", "flax", "optax", "orbax", "numpy", "js.", "torch", "functools")
_DEPTH = 4


def holds_state(value: Any) -> bool:
    """A stateful object, or a list/tuple/dict holding one (one level deep)."""
    if isinstance(value, STATEFUL):
        return True
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, STATEFUL) for v in value)
    if isinstance(value, dict):
        return any(isinstance(v, STATEFUL) for v in value.values())
    return False


def _global_names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _global_names(const)
    return names


def _is_user_function(value) -> bool:
    module = getattr(value, "__module__", None) or ""
    return isinstance(value, types.FunctionType) and not module.startswith(_LIBRARIES)


def _reads(fn) -> list[tuple[str, Any, str]]:
    """What ``fn`` reads besides its arguments: ``(name, value, where)``."""
    code = fn.__code__
    reads = []
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
        try:
            reads.append((name, cell.cell_contents, "closure"))
        except ValueError:  # an empty cell: not assigned yet
            continue
    scope = fn.__globals__
    reads += [(n, scope[n], "module globals") for n in _global_names(code) if n in scope]
    defaults = enumerate(fn.__defaults__ or ())
    reads += [(f"default #{i}", value, "default arguments") for i, value in defaults]
    reads += [(n, value, "default arguments") for n, value in (fn.__kwdefaults__ or {}).items()]
    return reads


def _find_captured(fn, constants, seen: set[int], depth: int):
    """The first stateful read of ``fn`` or of a user function it calls.

    Returns ``(reader, name, value, where)`` or None.
    """
    if id(fn) in seen or depth > _DEPTH:
        return None
    seen.add(id(fn))
    reads = sorted(_reads(fn), key=lambda read: read[0])
    for name, value, where in reads:
        if name not in constants and holds_state(value):
            return fn, name, value, where
    for _, value, _ in reads:
        if _is_user_function(value):
            found = _find_captured(value, constants, seen, depth + 1)
            if found:
                return found
    return None


def check_no_captured_state(fn, constants: frozenset[str]) -> None:
    """Raise TypeError if ``fn`` would freeze a module, optimizer or ``Rngs`` as a constant."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, STATEFUL):
        raise TypeError(
            f"js.jit got a method bound to a {type(owner).__name__}: its state would be frozen "
            f"into the compiled program. Fix: compile the plain function and pass the object, "
            f"e.g. js.jit(type(obj).{fn.__name__})(obj, ...)"
        )
    if isinstance(fn, functools.partial):
        bound = [v for v in (*fn.args, *fn.keywords.values()) if holds_state(v)]
        if bound:
            raise TypeError(
                f"js.jit got a functools.partial that binds a {type(bound[0]).__name__}: it would "
                "be frozen into the compiled program. Fix: pass it as an argument of the call."
            )
        fn = fn.func
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    if not isinstance(fn, types.FunctionType):
        return
    found = _find_captured(fn, constants, set(), 0)
    if found:
        reader, name, value, where = found
        via = "" if reader is fn else f" (through {reader.__qualname__}, which it calls)"
        raise TypeError(
            f"js.jit: {fn.__qualname__}{via} reads {name!r} (a {type(value).__name__}) from its "
            f"{where} instead of taking it as an argument. Compiled, it would be frozen as a "
            f"constant and its updates silently lost. Fix: pass {name} as an argument, or, if "
            f"freezing it is deliberate, declare it: js.jit(..., constants=({name!r},))"
        )
