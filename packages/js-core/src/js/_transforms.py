"""Graph-aware transforms: js.jit, js.grad, js.value_and_grad, and the functional boundary.

``js.jit`` compiles a function of modules, optimizers, ``Rngs`` and arrays. Stateful arguments
are *passed* into the program as donated arrays and their new values are written back after the
call (state passed is an argument; state read from scope would be frozen, so it is refused).

Speed: on the first call for a given set of objects, the object graph is flattened once into a
graph definition (static: structure, modes) and a list of Variable objects. Later calls only
read those variables' arrays, run the compiled program, and write the results back. Any
attribute assignment on a js object (a structural edit, ``train()``/``eval()``) moves the global
structure epoch; the next call then re-flattens, and compiles anew if the graph definition
changed. Nothing walks the object graph while the structure stays the same.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from typing import Any

import jax
from flax import nnx
from flax.nnx import graphlib
from flax.nnx.rnglib import RngStream

from ._variables import STRUCTURE_EPOCH, Parameter, _Tracked

_STATEFUL = (nnx.Pytree, nnx.Variable)
_set_raw = object.__setattr__

stop_gradient = jax.lax.stop_gradient
split = nnx.split
merge = nnx.merge
update = nnx.update


def apply(graphdef, state, *args, **kwargs):
    """Pure call at the split/merge boundary: ``(output, new_state)``.

    ``graphdef, state = js.split(model)`` gives a pure representation; ``js.apply`` merges it,
    calls the module, and splits the result again, so it can run under plain ``jax.jit``,
    ``jax.grad`` or ``jax.lax.scan``.
    """
    module = nnx.merge(graphdef, state)
    output = module(*args, **kwargs)
    _, new_state = nnx.split(module)
    return output, new_state


def _holds_state(value: Any) -> bool:
    if isinstance(value, _STATEFUL):
        return True
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, _STATEFUL) for v in value)
    if isinstance(value, dict):
        return any(isinstance(v, _STATEFUL) for v in value.values())
    return False


def _global_names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _global_names(const)
    return names


def _check_no_captured_state(fn: Callable, constants: frozenset[str]) -> None:
    """Refuse a function that reads modules/optimizers from its closure or module globals."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, _STATEFUL):
        raise TypeError(
            f"js.jit got a method bound to a {type(owner).__name__}: its state would be frozen "
            f"into the compiled program. Fix: compile the plain function and pass the object, "
            f"e.g. js.jit(type(obj).{fn.__name__})(obj, ...)"
        )
    if isinstance(fn, functools.partial):
        bound = [v for v in (*fn.args, *fn.keywords.values()) if _holds_state(v)]
        if bound:
            raise TypeError(
                f"js.jit got a functools.partial that binds a {type(bound[0]).__name__}: it would "
                "be frozen into the compiled program. Fix: pass it as an argument of the call."
            )
        fn = fn.func
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    captured = []
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell: not yet assigned
            continue
        if name not in constants and _holds_state(value):
            captured.append((name, value, "closure"))
    scope = getattr(fn, "__globals__", {})
    for name in sorted(_global_names(code)):
        if name in scope and name not in constants and _holds_state(scope[name]):
            captured.append((name, scope[name], "module globals"))
    if captured:
        name, value, where = captured[0]
        raise TypeError(
            f"js.jit: {fn.__qualname__} reads {name!r} (a {type(value).__name__}) from its "
            f"{where} instead of taking it as an argument. Compiled, it would be frozen as a "
            f"constant and its updates silently lost. Fix: pass {name} as an argument, or, if "
            f"freezing it is deliberate, declare it: js.jit(..., constants=({name!r},))"
        )


def _all_tracked(objects: tuple) -> bool:
    """Whether every graph node's structural edits move the structure epoch."""
    for _, node in nnx.iter_graph(objects):
        if isinstance(node, nnx.Pytree) and not isinstance(node, (_Tracked, RngStream)):
            return False
    return True


def _stateful_in(tree) -> bool:
    return any(isinstance(leaf, _STATEFUL) for leaf in jax.tree.leaves(tree, is_leaf=_holds_state))


_STATEFUL_TYPES: dict[type, bool] = {}


class _Marker:
    """A unique, hashable tag in call keys (static argument, keyword argument)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


_STATIC, _KW = _Marker("static"), _Marker("keyword")


def _is_stateful(value) -> bool:
    # isinstance against nnx.Variable goes through a metaclass hook: cache the answer per type.
    kind = type(value)
    answer = _STATEFUL_TYPES.get(kind)
    if answer is None:
        answer = _STATEFUL_TYPES[kind] = isinstance(value, _STATEFUL)
    return answer


def _without_ids(key: tuple, objects: list) -> tuple:
    """The call layout: the key with each object's id replaced by its index among the objects."""
    ids = {id(obj): index for index, obj in enumerate(objects)}
    layout = []
    for item in key:
        if isinstance(item, int):
            layout.append(ids[item])
        elif item is not None and item[0] is _KW and isinstance(item[2], int):
            layout.append((_KW, item[1], ids[item[2]]))
        else:
            layout.append(item)
    return tuple(layout)


class _Entry:
    """What one call signature (these objects, this layout) needs on the fast path."""

    __slots__ = ("refs", "epoch", "graphdef", "variables", "program", "tracked")


class CompiledFunction:
    """The callable ``js.jit`` returns. See :func:`jit`."""

    def __init__(self, fn, *, static_argnums=(), static_argnames=(), donate=True, constants=()):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._static_argnums = frozenset(static_argnums)
        self._static_argnames = frozenset(static_argnames)
        self._donate = donate
        self._constants = frozenset(constants)
        self._entries: dict[Any, _Entry] = {}
        self._programs: dict[Any, Callable] = {}

    def __get__(self, obj, objtype=None):
        # As a decorator on a method, bind like a function: `self` becomes the first argument.
        return self if obj is None else functools.partial(self, obj)

    def _layout(self, args, kwargs):
        """Split the call into stateful objects, a hashable key, and dynamic arguments.

        The key is one entry per argument: the object's id for a stateful one, the value for a
        static one, ``None`` for a traced one; keyword arguments follow, sorted by name.
        """
        objects, key = [], []
        dyn_args = list(args)
        for i, arg in enumerate(args):
            if i in self._static_argnums:
                key.append((_STATIC, arg))
                dyn_args[i] = None
            elif _is_stateful(arg):
                objects.append(arg)
                key.append(id(arg))
                dyn_args[i] = None
            else:
                key.append(None)
        dyn_kwargs = {}
        for name in sorted(kwargs):
            value = kwargs[name]
            if name in self._static_argnames:
                key.append((_KW, name, _STATIC, value))
            elif _is_stateful(value):
                objects.append(value)
                key.append((_KW, name, id(value)))
            else:
                key.append((_KW, name, None))
                dyn_kwargs[name] = value
        return objects, tuple(key), dyn_args, dyn_kwargs

    def __call__(self, *args, **kwargs):
        objects, key, dyn_args, dyn_kwargs = self._layout(args, kwargs)
        entry = self._entries.get(key)
        if entry is None or entry.epoch != STRUCTURE_EPOCH.value or not entry.tracked:
            entry = self._refresh(key, objects)
        else:
            for ref, obj in zip(entry.refs, objects, strict=False):
                if ref() is not obj:  # a new object that reuses a dead one's id
                    entry = self._refresh(key, objects)
                    break
        variables = entry.variables
        output, new_leaves = entry.program([v._raw_value for v in variables], dyn_args, dyn_kwargs)
        for variable, leaf in zip(variables, new_leaves, strict=False):
            _set_raw(variable, "_raw_value", leaf)
        if entry.epoch != STRUCTURE_EPOCH.value:  # objects created while tracing moved it
            entry.epoch = STRUCTURE_EPOCH.value
        return output

    def _refresh(self, key, objects) -> _Entry:
        """Flatten the objects again (first call, or after a structural edit)."""
        _check_no_captured_state(self._fn, self._constants)
        objects = tuple(objects)
        graphdef, flat = graphlib.flatten(objects, with_paths=True)
        variables = []
        for path, leaf in flat:
            if not isinstance(leaf, nnx.Variable):
                where = ".".join(map(str, path[1:]))
                raise TypeError(
                    f"js.jit: argument state at {where!r} is a raw {type(leaf).__name__}, not a "
                    "Parameter or Buffer. Fix: wrap it, e.g. self.x = js.Buffer(array)"
                )
            variables.append(leaf)
        layout = _without_ids(key, objects)
        program = self._programs.get((graphdef, layout))
        if program is None:
            program = self._programs[(graphdef, layout)] = self._compile(graphdef, layout)
        entry = _Entry()
        entry.refs = tuple(weakref.ref(obj) for obj in objects)
        entry.epoch = STRUCTURE_EPOCH.value
        entry.graphdef = graphdef
        entry.variables = variables
        entry.program = program
        entry.tracked = _all_tracked(objects)
        alive = {k: e for k, e in self._entries.items() if all(r() is not None for r in e.refs)}
        self._entries = alive
        self._entries[key] = entry
        return entry

    def _compile(self, graphdef, layout):
        fn = self._fn

        def pure(leaves, dyn_args, dyn_kwargs):
            objects = graphlib.unflatten(graphdef, leaves)
            args, kwargs = [], dict(dyn_kwargs)
            for i, kind in enumerate(layout):
                if isinstance(kind, int):
                    args.append(objects[kind])
                elif kind is None:
                    args.append(dyn_args[i])
                elif kind[0] is _STATIC:
                    args.append(kind[1])
                elif kind[2] is _STATIC:
                    kwargs[kind[1]] = kind[3]
                elif isinstance(kind[2], int):
                    kwargs[kind[1]] = objects[kind[2]]
            output = fn(*args, **kwargs)
            if _stateful_in(output):
                raise TypeError(
                    f"js.jit: {getattr(fn, '__qualname__', fn)} returned a module, optimizer or "
                    "variable. Return arrays only: objects passed as arguments are updated in "
                    "place."
                )
            new_graphdef, new_leaves = graphlib.flatten(objects, with_paths=False)
            if new_graphdef != graphdef:
                raise RuntimeError(
                    f"js.jit: {getattr(fn, '__qualname__', fn)} changed the structure or mode of "
                    "its arguments while compiled (a new attribute, a replaced submodule, or "
                    "train()/eval()). Fix: make such changes outside the compiled function."
                )
            return output, new_leaves

        return jax.jit(pure, donate_argnums=(0,) if self._donate else ())


def jit(fn=None, *, static_argnums=(), static_argnames=(), donate=True, constants=()):
    """Compile ``fn``; modules, optimizers and ``Rngs`` passed to it are updated in place.

    Args:
        fn: the function. Stateful objects must be arguments (top-level positional or keyword);
            arrays and pytrees of arrays are traced; ``static_argnums``/``static_argnames`` name
            hashable arguments that select a program (a new value compiles anew).
        donate: donate the state arrays to the program (default), so that XLA updates them in
            place. An array read earlier from ``param.value`` is invalid after the call; copy it
            (``np.array(param.value)``) to keep it.
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


def _check_module(transform: str, module) -> None:
    if not isinstance(module, nnx.Module):
        raise TypeError(
            f"js.{transform}(fn)(module, ...) differentiates the Parameters of its first argument, "
            f"which must be a Module; got {type(module).__name__}. Fix: pass the module first."
        )


def _differentiate(fn, has_aux: bool, transform: str):
    """``(module, *args) -> ((loss, aux), grads)``: differentiate the module's Parameters.

    The module and every stateful argument are flattened together (shared variables once), the
    module's Parameters become the differentiated input of a pure function, everything else
    (buffers, RNG counters, other modules) a passed-through input whose new values are written
    back afterwards. Attribute order is left as it was, so ``named_parameters`` keeps its order.
    """

    def run(module, *args, **kwargs):
        _check_module(transform, module)
        slots = [i for i, a in enumerate(args) if isinstance(a, _STATEFUL)]
        names = [k for k, v in kwargs.items() if isinstance(v, _STATEFUL)]
        objects = (module, *(args[i] for i in slots), *(kwargs[k] for k in names))
        graphdef, flat = graphlib.flatten(objects, with_paths=True)
        variables = [leaf for _, leaf in flat]
        wrt = [p[0] == 0 and isinstance(v, Parameter) for p, v in flat]
        leaves = [v.get_raw_value() for v in variables]

        def pure(diff, rest):
            diff_it, rest_it = iter(diff), iter(rest)
            ordered = [next(diff_it) if w else next(rest_it) for w in wrt]
            merged = graphlib.unflatten(graphdef, ordered)
            call_args = list(args)
            for j, i in enumerate(slots):
                call_args[i] = merged[1 + j]
            call_kwargs = {**kwargs, **{k: merged[1 + len(slots) + j] for j, k in enumerate(names)}}
            out = fn(merged[0], *call_args, **call_kwargs)
            loss, aux = out if has_aux else (out, None)
            return loss, (aux, graphlib.flatten(merged, with_paths=False)[1])

        diff = [x for x, w in zip(leaves, wrt, strict=False) if w]
        rest = [x for x, w in zip(leaves, wrt, strict=False) if not w]
        (loss, (aux, new_leaves)), grads = jax.value_and_grad(pure, has_aux=True)(diff, rest)
        for variable, leaf, w in zip(variables, new_leaves, wrt, strict=False):
            if not w:
                variable.set_raw_value(leaf)
        paths = [p[1:] for p, w in zip((p for p, _ in flat), wrt, strict=False) if w]
        return (loss, aux), nnx.from_flat_state(list(zip(paths, grads, strict=False)))

    return run


def value_and_grad(fn=None, *, has_aux=False):
    """``js.value_and_grad(fn)(module, *args)`` -> ``(loss, grads)``.

    Differentiates the Parameters of the first argument only (not its Buffers, not RNG
    counters); later arguments, a ``js.Rngs`` or another module among them, pass through and
    are updated in place. ``grads`` is an NNX state of arrays keyed by the module's Parameter
    paths. With ``has_aux=True`` ``fn`` returns ``(loss, aux)`` and the result is
    ``((loss, aux), grads)``.
    """
    if fn is None:
        return functools.partial(value_and_grad, has_aux=has_aux)
    run = _differentiate(fn, has_aux, "value_and_grad")

    @functools.wraps(fn)
    def wrapped(module, *args, **kwargs):
        (loss, aux), grads = run(module, *args, **kwargs)
        return ((loss, aux), grads) if has_aux else (loss, grads)

    return wrapped


def grad(fn=None, *, has_aux=False):
    """``js.grad(fn)(module, *args)`` -> grads (``(grads, aux)`` with ``has_aux``), as
    :func:`value_and_grad` without the value."""
    if fn is None:
        return functools.partial(grad, has_aux=has_aux)
    run = _differentiate(fn, has_aux, "grad")

    @functools.wraps(fn)
    def wrapped(module, *args, **kwargs):
        (_, aux), grads = run(module, *args, **kwargs)
        return (grads, aux) if has_aux else grads

    return wrapped
