"""``js.jit``: compile a function of modules, optimizers, ``Rngs`` and arrays.

Stateful arguments are *passed* into the program as arrays, donated when the function changes
them, and their new values are written back after the call (state passed is an argument; state
read from scope would be frozen, so ``_capture`` refuses it). A function that changes no state
(an evaluation, an inference forward) runs a program that neither donates nor returns it.

Speed: on the first call for a given set of objects, the object graph is flattened once into a
graph definition (static: structure, modes) and a list of Variable objects. Later calls only
read those variables' arrays, run the compiled program, and write the results back. Any
attribute assignment on a js object (a structural edit, ``train()``/``eval()``) moves the global
structure epoch; the next call then re-flattens, and compiles anew if the graph definition
changed. Nothing walks the object graph while the structure stays the same.

The call is laid out by ``_stateful`` (shared with ``js.grad`` and ``js.scan_steps``); programs
are keyed on that ``CallLayout``, so other objects of equal structure (a new model of the same
architecture, a new optimizer with the same hyperparameters, whose transform compares by its
key) run an existing program without compiling again. State placed on several devices
(``js.shard``) compiles with its current shardings as the outputs' shardings, so it stays where
it is, donated, call after call; ``js.shard`` moves the structure epoch, so the next call lays
the call out anew.
"""

from __future__ import annotations

import collections
import functools
import inspect
import operator
import weakref
from collections.abc import Callable
from typing import Any

import jax
from flax import nnx
from flax.nnx.rnglib import RngStream

from . import _hooks
from ._capture import check_no_captured_state
from ._hooks import WithRecords as _WithRecords
from ._stateful import STATIC, CallLayout, lay_out, split_call
from ._stateful import is_stateful as _is_stateful
from ._variables import STRUCTURE_EPOCH, _Tracked

# The fast path reads and writes Variables' arrays through their slot directly.
_get_raw = operator.attrgetter("_raw_value")
_set_raw = nnx.Variable.__dict__["_raw_value"].__set__


def _all_tracked(objects: tuple) -> bool:
    """Whether every graph node's structural edits move the structure epoch."""
    for _, node in nnx.iter_graph(objects):
        if isinstance(node, nnx.Pytree) and not isinstance(node, (_Tracked, RngStream)):
            return False
    return True


def _stateful_paths(tree) -> list[str]:
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_stateful)[0]
    return [jax.tree_util.keystr(path) for path, leaf in leaves if _is_stateful(leaf)]


def _unhashable_attribute(objects: tuple) -> str | None:
    """Path and type of the first static attribute that cannot be hashed, if any."""
    for path, node in nnx.iter_graph(objects):
        if isinstance(node, nnx.Pytree):
            for name, value in vars(node).items():
                if name.startswith("_pytree__") or node._pytree__nodes.get(name, False):
                    continue
                try:
                    hash(value)
                except TypeError:
                    where = ".".join(map(str, (*path[1:], name)))
                    return f"{where!r} (a {type(value).__name__})"
    return None


def _static_both_ways(fn, argnums, argnames):
    """Static arguments by position and by name, as jax.jit maps them through the signature."""
    argnums, argnames = set(argnums), set(argnames)
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature (a builtin): keep what was given
        return argnums, argnames
    positional = [
        p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    argnums |= {i for i, name in enumerate(positional) if name in argnames}
    argnames |= {positional[i] for i in argnums if 0 <= i < len(positional)}
    return argnums, argnames


class _Entry:
    """What one call signature (these objects, this layout) needs on the fast path."""

    __slots__ = ("refs", "epoch", "variables", "program", "tracked", "layout")


class _OtherKind(Exception):
    """Raised while tracing: the call needs another kind of program (see ``_compile``)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


class CompiledFunction:
    """The callable ``js.jit`` returns. See :func:`jit`."""

    def __init__(self, fn, *, static_argnums=(), static_argnames=(), donate=True, constants=()):
        functools.update_wrapper(self, fn)
        self._fn = fn
        static_argnums, static_argnames = _static_both_ways(fn, static_argnums, static_argnames)
        self._static_argnums = frozenset(static_argnums)
        self._static_argnames = frozenset(static_argnames)
        self._donate = donate
        self._constants = frozenset(constants)
        self._entries: dict[Any, _Entry] = {}
        self._programs: dict[Any, Callable] = {}
        self._pure: dict[CallLayout, Callable] = {}

    def __get__(self, obj, objtype=None):
        # As a decorator on a method, bind like a function: `self` becomes the first argument.
        return self if obj is None else functools.partial(self, obj)

    def _layout(self, args, kwargs):
        """``(objects, key, dyn_args, dyn_kwargs)`` of a call (see ``split_call``)."""
        return split_call(args, kwargs, self._static_argnums, self._static_argnames)

    def __call__(self, *args, **kwargs):
        if kwargs or self._static_argnums:
            objects, key, dyn_args, dyn_kwargs = self._layout(args, kwargs)
        else:  # the common case, inlined: positional arguments, none static
            objects, ids, dyn_args, dyn_kwargs = [], [], [], {}
            for arg in args:
                if _is_stateful(arg):
                    objects.append(arg)
                    ids.append(id(arg))
                    dyn_args.append(None)
                else:
                    ids.append(None)
                    dyn_args.append(arg)
            key = tuple(ids)
        try:
            entry = self._entries.get(key)
        except TypeError:
            statics = [k for k in key if isinstance(k, tuple) and STATIC in k]
            raise TypeError(
                f"js.jit: a static argument is not hashable ({statics}); static arguments select "
                "the compiled program. Fix: pass a tuple instead of a list, or make it traced."
            ) from None
        if entry is None or entry.epoch != STRUCTURE_EPOCH.value or not entry.tracked:
            entry = self._refresh(key, objects)
        else:
            for ref, obj in zip(entry.refs, objects, strict=False):
                if ref() is not obj:  # a new object that reuses a dead one's id
                    entry = self._refresh(key, objects)
                    break
        variables = entry.variables
        try:
            output, new_leaves = entry.program(list(map(_get_raw, variables)), dyn_args, dyn_kwargs)
        except _OtherKind as other:  # raised by a trace, before anything ran
            entry.program = self._programs[entry.layout] = self._compile(entry.layout, other.kind)
            output, new_leaves = entry.program(list(map(_get_raw, variables)), dyn_args, dyn_kwargs)
        except (ValueError, RuntimeError) as error:
            if "donat" not in str(error):
                raise
            raise ValueError(
                "js.jit: an argument array is also the state of a module or optimizer passed to "
                "the call (e.g. f(model, model.weight.value)); that state is donated, so the "
                "same buffer cannot also be read as an argument. Fix: pass a copy "
                "(jnp.array(x, copy=True)) or compile with js.jit(..., donate=False)."
            ) from error
        collections.deque(map(_set_raw, variables, new_leaves), maxlen=0)
        if entry.epoch != STRUCTURE_EPOCH.value:  # objects created while tracing moved it
            entry.epoch = STRUCTURE_EPOCH.value
        if type(output) is _WithRecords:  # hooks fired while tracing: call them on the values
            return _hooks.finish(output, args, kwargs, "js.jit")
        return output

    def _refresh(self, key, objects) -> _Entry:
        """Flatten the objects again (first call, or after a structural edit)."""
        check_no_captured_state(self._fn, self._constants)
        layout, variables = lay_out("js.jit", objects, key)
        try:
            program = self._programs.get(layout)
        except TypeError:  # a static attribute of the objects is unhashable
            where = _unhashable_attribute(tuple(objects))
            if where is None:
                raise
            raise TypeError(
                f"js.jit: the static attribute {where} is not hashable, and static attributes "
                "select the compiled program. Fix: store a tuple instead of a list (or hold "
                "arrays in a js.Buffer)."
            ) from None
        if program is None:
            program = self._programs[layout] = self._compile(layout)
        entry = _Entry()
        entry.refs = tuple(weakref.ref(obj) for obj in objects)
        entry.epoch = STRUCTURE_EPOCH.value
        entry.variables = variables
        entry.program = program
        entry.layout = layout
        entry.tracked = _all_tracked(tuple(objects))
        alive = {k: e for k, e in self._entries.items() if all(r() is not None for r in e.refs)}
        self._entries = alive
        self._entries[key] = entry
        return entry

    def _compile(self, layout: CallLayout, kind: str = "first"):
        """The program of ``layout``. The ``"first"`` kind donates the state and returns its new
        arrays; a trace of it that finds no state array changed (an evaluation, an inference
        forward) stops before lowering and asks for the ``"read"`` kind, which neither donates
        nor returns the state, so the call costs what a hand-written ``jax.jit`` of the forward
        costs. Should a read-only trace find a change (a new input shape taking another
        branch), the layout keeps the ``"write"`` kind from then on: the first kind without the
        question. The function itself is traced once per input signature, whatever the kind:
        ``_traced`` caches its trace, and inlines it, so an unchanged array is the very tracer
        that came in."""
        traced = self._traced(layout)
        read_only = kind == "read"

        def program(leaves, dyn_args, dyn_kwargs):
            output, new_leaves = traced(leaves, dyn_args, dyn_kwargs)
            if kind != "write":
                writes = any(new is not old for new, old in zip(new_leaves, leaves, strict=True))
                if writes == read_only:
                    raise _OtherKind("write" if writes else "read")
            return output, ([] if read_only else new_leaves)

        # State stays where it is: on a mesh, each new array leaves on its input's sharding
        # (inputs are committed arrays, so jit already reads theirs). One device: jit's default.
        donate = (0,) if self._donate and not read_only else ()
        if layout.placement is None or read_only:
            return jax.jit(program, donate_argnums=donate)
        return jax.jit(program, donate_argnums=donate, out_shardings=(None, list(layout.placement)))

    def _traced(self, layout: CallLayout):
        """``fn`` as a pure function of the state arrays, one per layout (``inline``: its trace
        is cached by JAX and inlined into each kind of program)."""
        traced = self._pure.get(layout)
        if traced is not None:
            return traced
        fn = self._fn

        def pure(leaves, dyn_args, dyn_kwargs):
            objects, args, kwargs = layout.rebuild(leaves, dyn_args, dyn_kwargs)
            nested = _stateful_paths((dyn_args, dyn_kwargs))
            if nested:
                raise TypeError(
                    f"js.jit: a module, optimizer or Rngs sits inside a container argument "
                    f"(at {nested[0]} of (args, kwargs)); its updates would be lost. Fix: pass "
                    "each stateful object as its own top-level argument."
                )
            with _hooks.recording(args, kwargs, "js.jit") as recorder:  # hooks: observe
                output = fn(*args, **kwargs)
            if _stateful_paths(output):
                raise TypeError(
                    f"js.jit: {getattr(fn, '__qualname__', fn)} returned a module, optimizer or "
                    "variable. Return arrays only: objects passed as arguments are updated in "
                    "place."
                )
            # hooks: the output as it is when no hook fired, else with the recorded values
            return recorder.attach(output), layout.updated(objects, "js.jit", fn)

        traced = self._pure[layout] = jax.jit(pure, inline=True)
        return traced


def jit(fn=None, *, static_argnums=(), static_argnames=(), donate=True, constants=()):
    """Compile ``fn``; modules, optimizers and ``Rngs`` passed to it are updated in place.

    Args:
        fn: the function. Stateful objects must be arguments (top-level positional or keyword);
            arrays and pytrees of arrays are traced; ``static_argnums``/``static_argnames`` name
            hashable arguments that select a program (a new value compiles anew).
        donate: donate the state arrays to the program (default) when ``fn`` changes them, so
            that XLA updates them in place. An array read earlier from ``param.value`` is then
            invalid after the call; copy it (``np.array(param.value)``) to keep it. A function
            that changes no state donates nothing.
        constants: names of globals or closure variables holding modules or optimizers that are
            deliberately frozen into the program. Any other such read is refused with an error.

    Returns a callable with ``fn``'s signature. A change of structure or of train/eval mode
    between calls compiles a new program on the next call.

    Example:
        >>> import jax.numpy as jnp, js
        >>> class Affine(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        ...     def forward(self, x):
        ...         return x * self.w.value
        >>> @js.jit
        ... def shrink(model, x):
        ...     model.w.value = model.w.value * 0.5
        ...     return model(x)
        >>> model = Affine()
        >>> shrink(model, jnp.ones(2)).tolist(), model.w.value.tolist()
        ([0.5, 0.5], [0.5, 0.5])
    """
    if fn is None:
        return functools.partial(
            jit,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            donate=donate,
            constants=constants,
        )
    return CompiledFunction(
        fn,
        static_argnums=(static_argnums,) if isinstance(static_argnums, int) else static_argnums,
        static_argnames=(static_argnames,) if isinstance(static_argnames, str) else static_argnames,
        donate=donate,
        constants=(constants,) if isinstance(constants, str) else constants,
    )
