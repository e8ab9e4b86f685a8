"""Forward hooks (PyTorch's ``register_forward_pre_hook``/``register_forward_hook``).

Eagerly, and under plain ``jax.jit``/``jax.eval_shape``, ``Module.__call__`` calls a module's
hooks as PyTorch does: a pre-hook ``hook(module, args)`` may return new arguments, a forward
hook ``hook(module, args, output)`` a new output.

Inside a js transform (``js.jit``, ``js.grad``/``js.value_and_grad``, ``js.scan_steps``) a
hook *observes* by default. The transform opens a :func:`recording` around the user's function
while it is traced; a hook that fires there is not called: its ``(args, output)`` are recorded,
and :meth:`_Recorder.attach` returns them with the function's result, so the recorded arrays are
outputs of the compiled program. After each call (traced or cached) :func:`finish` calls the
hooks with the caller's real module and the concrete arrays: what eager code would see, on
every call, without running the model twice. A nested transform (a ``js.value_and_grad``
inside a ``js.jit``) hands its records up to the outer recording instead; only the outermost
calls the hooks. Under ``js.scan_steps`` the scan stacks the recorded values like any per-step
output, and the hooks are called step after step. The records travel in the static part of
the result's pytree (its treedef), so a cached program brings them back without tracing again.

Not built: a hook that fires inside a plain JAX transform nested in the js one (``jax.lax.scan``,
``jax.checkpoint``, ``jax.vmap`` in the user's function) cannot send its values out of it, and
is refused (register it with ``traced=True``). PyTorch's ``always_call`` is not offered.

A hook registered with ``traced=True`` runs inside the trace on traced values: its return
value replaces arguments or output inside the program, and its Python side effects happen
when the function is traced, not on every call.

Hooks are a static attribute of the module (a tuple, empty on the class): no hook costs one
truth test per call; adding or removing one changes the graph definition, so ``js.jit``
compiles the program with the hook once and goes back to the cached one without it.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import weakref
from collections.abc import Callable
from typing import Any

import jax
from flax import nnx

from ._jax import TRACE_CTX
from ._stateful import is_stateful

_RECORDER: contextvars.ContextVar[_Recorder | None] = contextvars.ContextVar(
    "js_hook_recorder", default=None
)
_IDS = itertools.count()


class _Hook:
    """One registered hook: immutable, compared by identity of its function (static data)."""

    __slots__ = ("id", "fn", "with_kwargs", "traced")

    def __init__(self, fn, with_kwargs: bool, traced: bool):
        self.id, self.fn = next(_IDS), fn
        self.with_kwargs, self.traced = bool(with_kwargs), bool(traced)

    def _key(self) -> tuple:
        return (self.id, id(self.fn), self.with_kwargs, self.traced)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Hook) and self._key() == other._key() and self.fn is other.fn

    def __hash__(self) -> int:
        return hash(self._key())

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):  # a copied module keeps the same hooks (and programs)
        return self

    def __repr__(self) -> str:
        return f"_Hook({self.id}, {getattr(self.fn, '__qualname__', self.fn)!r})"


class RemovableHandle:
    """What ``register_forward_hook`` returns: ``remove()`` the hook, or use it in ``with``."""

    def __init__(self, module: Hookable, attribute: str, hook: _Hook):
        self.id = hook.id
        self._module, self._attribute = weakref.ref(module), attribute

    def remove(self) -> None:
        module = self._module()
        if module is None:
            return
        hooks = getattr(module, self._attribute)
        if not any(hook.id == self.id for hook in hooks):  # no edit: the structure stays
            return
        remaining = tuple(hook for hook in hooks if hook.id != self.id)
        if remaining:
            setattr(module, self._attribute, remaining)
        else:  # back to the class's empty tuple: the graph definition the module had before
            delattr(module, self._attribute)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def register(
    module: Hookable,
    attribute: str,
    fn: Callable[..., Any],
    *,
    with_kwargs: bool,
    prepend: bool,
    traced: bool,
) -> RemovableHandle:
    """Add ``fn`` to ``module.<attribute>`` (a tuple) and return its handle."""
    if not callable(fn):
        raise TypeError(f"{attribute[1:]}: a hook must be callable, got {type(fn).__name__}")
    hook = _Hook(fn, with_kwargs, traced)
    hooks = getattr(module, attribute)
    setattr(module, attribute, (hook, *hooks) if prepend else (*hooks, hook))
    return RemovableHandle(module, attribute, hook)


class Hookable:
    """The hook registrations of ``js.Module`` (a mixin: ``Module`` derives from it)."""

    # Registered hooks (see js._hooks): static data of the graph definition, so that js.jit
    # compiles the program with them; empty here, so that a module without hooks pays one test.
    _forward_pre_hooks: tuple = ()
    _forward_hooks: tuple = ()

    def register_forward_pre_hook(
        self,
        hook: Callable[..., Any],
        *,
        with_kwargs: bool = False,
        prepend: bool = False,
        traced: bool = False,
    ) -> RemovableHandle:
        """Call ``hook(module, args)`` before each ``forward``, as PyTorch does.

        The hook may return None or new positional arguments (a non-tuple is wrapped in a
        one-tuple); with ``with_kwargs=True`` it is ``hook(module, args, kwargs)`` and returns
        None or ``(args, kwargs)``. Hooks run in registration order (``prepend=True`` puts
        this one first). Returns a handle: ``handle.remove()``, or ``with handle:``.

        Inside ``js.jit``/``js.grad``/``js.value_and_grad``/``js.scan_steps`` a hook
        observes: it is called after the compiled program ran, with this module and the
        concrete arguments, on every call (every step), and must return None. With
        ``traced=True`` it runs inside the program instead, on traced values, may replace them,
        and its Python side effects happen only when the function is traced. Registering or
        removing a hook changes the module's structure: the next ``js.jit`` call compiles (or
        reuses) the program with or without it.
        """
        return register(
            self,
            "_forward_pre_hooks",
            hook,
            with_kwargs=with_kwargs,
            prepend=prepend,
            traced=traced,
        )

    def register_forward_hook(
        self,
        hook: Callable[..., Any],
        *,
        with_kwargs: bool = False,
        prepend: bool = False,
        traced: bool = False,
    ) -> RemovableHandle:
        """Call ``hook(module, args, output)`` after each ``forward``, as PyTorch does.

        The hook may return None or a new output; with ``with_kwargs=True`` it is
        ``hook(module, args, kwargs, output)``. Order, handles, and the behaviour inside js
        transforms and with ``traced=True`` are those of :meth:`register_forward_pre_hook`.

        Example:
            >>> import jax.numpy as jnp, js
            >>> class Double(js.Module):
            ...     def forward(self, x):
            ...         return 2 * x
            >>> seen = []
            >>> layer = Double()
            >>> with layer.register_forward_hook(lambda m, args, out: seen.append(out)):
            ...     _ = layer(jnp.ones(2))
            >>> _ = layer(jnp.ones(2))  # removed: not recorded
            >>> [out.tolist() for out in seen]
            [[2.0, 2.0]]
        """
        return register(
            self,
            "_forward_hooks",
            hook,
            with_kwargs=with_kwargs,
            prepend=prepend,
            traced=traced,
        )


def call(module, args: tuple, kwargs: dict, forward):
    """``module(*args, **kwargs)`` with its hooks; ``forward(args, kwargs)`` runs the body."""
    recorder = _RECORDER.get()
    for hook in module._forward_pre_hooks:
        if recorder is not None and not hook.traced:
            recorder.record(hook, module, (args, kwargs) if hook.with_kwargs else (args,))
        elif hook.with_kwargs:
            result = hook.fn(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise TypeError(
                        f"forward pre-hook {_name(hook)} (with_kwargs=True) must return None or "
                        f"a pair (args, kwargs), got {type(result).__name__}"
                    )
                args, kwargs = tuple(result[0]), dict(result[1])
        else:
            result = hook.fn(module, args)
            if result is not None:  # as PyTorch: a single value becomes a one-tuple
                args = result if isinstance(result, tuple) else (result,)
    output = forward(args, kwargs)
    for hook in module._forward_hooks:
        inputs = (args, kwargs) if hook.with_kwargs else (args,)
        if recorder is not None and not hook.traced:
            recorder.record(hook, module, (*inputs, output))
            continue
        result = hook.fn(module, *inputs, output)
        if result is not None:
            output = result
    return output


def _name(hook: _Hook) -> str:
    return getattr(hook.fn, "__qualname__", repr(hook.fn))


def _current_trace():
    return TRACE_CTX.trace


class _Ref:
    """A graph node of the transform's objects, by its path there (resolved on each call)."""

    __slots__ = ("path",)

    def __init__(self, path: tuple):
        self.path = path


class _Records:
    """The static side of what a trace recorded: per hook call, its hook, its module (a
    ``_Ref`` or the object itself when it is not among the transform's objects), the treedef
    of its ``(args, [kwargs,] [output])`` and their non-array leaves (None where an array is).
    Compared by identity: it is a treedef's aux data, never a cache key."""

    __slots__ = ("calls",)

    def __init__(self, calls: list):
        self.calls = calls


@jax.tree_util.register_pytree_node_class
class WithRecords:
    """A transform's result with the arrays its hooks recorded (children) and their records
    (aux data, so a cached program returns them without tracing)."""

    def __init__(self, value, arrays, records: _Records):
        self.value, self.arrays, self.records = value, arrays, records

    def tree_flatten(self):
        return (self.value, self.arrays), self.records

    @classmethod
    def tree_unflatten(cls, records, children):
        return cls(children[0], children[1], records)


class _Recorder:
    """The hook calls observed while one transform traces its function."""

    def __init__(self, args, kwargs, transform: str):
        self.objects = stateful_objects(args, kwargs)
        self.transform = transform
        self.trace = _current_trace()
        self.calls: list[tuple] = []  # (hook, module, payload)

    def record(self, hook: _Hook, module, payload: tuple) -> None:
        if self.trace is not _current_trace():
            raise NotImplementedError(
                f"{self.transform}: the hook {_name(hook)} on {type(module).__name__} fired "
                "inside a JAX transform nested in the js transform (jax.lax.scan, "
                "jax.checkpoint, jax.vmap, ...), whose values cannot leave it. Fix: register "
                "it with traced=True (it then runs while tracing, on traced values), or call "
                "the module outside that transform."
            )
        self.calls.append((hook, module, payload))

    def attach(self, value):
        """``value`` as it is when no hook fired (the program is unchanged), else a
        :class:`WithRecords` carrying the recorded arrays out of the program."""
        if not self.calls:
            return value
        where = {}
        for path, node in nnx.iter_graph(tuple(self.objects)):
            if isinstance(node, nnx.Pytree):
                where.setdefault(id(node), path)

        def ref(node):
            return _Ref(where[id(node)]) if id(node) in where else node

        arrays, calls = [], []
        for hook, module, payload in self.calls:
            leaves, treedef = jax.tree.flatten(payload, is_leaf=is_stateful)
            statics = []
            for leaf in leaves:
                if isinstance(leaf, jax.Array):
                    arrays.append(leaf)
                    statics.append(None)
                else:
                    statics.append(ref(leaf) if is_stateful(leaf) else leaf)
            calls.append((hook, ref(module), treedef, statics))
        return WithRecords(value, arrays, _Records(calls))


def stateful_objects(args, kwargs) -> list:
    """The stateful arguments of a call, in ``split_call``'s order (positional, then keyword
    arguments sorted by name): the transform's objects, inside the trace and out."""
    found = [arg for arg in args if is_stateful(arg)]
    found += [kwargs[name] for name in sorted(kwargs) if is_stateful(kwargs[name])]
    return found


@contextlib.contextmanager
def recording(args, kwargs, transform: str):
    """Record the observing hooks that fire while a transform's function is traced with
    ``(args, kwargs)`` (the rebuilt call); ``attach`` the records to its result."""
    recorder = _Recorder(args, kwargs, transform)
    token = _RECORDER.set(recorder)
    try:
        yield recorder
    finally:
        _RECORDER.reset(token)


def finish(value, args, kwargs, transform: str, *, stacked=None):
    """A transform's result without its records; their hooks called on the caller's objects
    (``args``/``kwargs`` of the call), or handed to the enclosing recording if there is one.
    With ``stacked`` (the scanned inputs of ``js.scan_steps``) the recorded arrays are stacked
    per step: the calls are made step after step, each with its slice."""
    if type(value) is not WithRecords:
        return value
    steps = None if stacked is None else len(jax.tree.leaves(stacked)[0])
    resolved = _resolve(value, stateful_objects(args, kwargs), steps)
    outer = _RECORDER.get()
    if outer is not None:
        for hook, module, payload in resolved:
            outer.record(hook, module, payload)
        return value.value
    for hook, module, payload in resolved:
        if hook.fn(module, *payload) is not None:
            raise NotImplementedError(
                f"{transform}: the hook {_name(hook)} on {type(module).__name__} returned a "
                "value. Inside a js transform a hook observes: it is called after the "
                "compiled program ran, on its values, and cannot change them (the call "
                "has run and its state is updated). Fix: register it with traced=True, "
                "so that it runs inside the program, on traced values."
            )
    return value.value


def _resolve(value: WithRecords, objects: list, steps: int | None) -> list[tuple]:
    """``(hook, module, payload)`` per recorded call (per step), on the caller's objects."""
    nodes: dict = {}

    def real(item):
        if not isinstance(item, _Ref):
            return item
        if not nodes:  # one walk of the caller's objects, only when a hook fired
            nodes.update(nnx.iter_graph(tuple(objects)))
        return nodes[item.path]

    resolved = []
    for step in range(steps) if steps is not None else (None,):
        arrays = iter(value.arrays if step is None else [a[step] for a in value.arrays])
        for hook, module, treedef, statics in value.records.calls:
            leaves = [next(arrays) if s is None else real(s) for s in statics]
            resolved.append((hook, real(module), jax.tree.unflatten(treedef, leaves)))
    return resolved
