"""``js.jit``: compile a function of modules, optimizers, ``Rngs`` and arrays.

Stateful arguments are *passed* into the program as arrays, donated when the function changes
them, and their new values are written back after the call (state passed is an argument; state
read from scope would be frozen, so ``_capture`` refuses it). A function that changes no state
(an evaluation, an inference forward) runs a program that neither donates nor returns it.

Speed: on the first call for a given set of objects, the object graph is flattened once into a
graph definition (static: structure, modes) and a list of Variable objects, and the call key
(which objects, which static values) is *bound* to them and to the layout's program. Later calls
build the key, read those variables' arrays, run the compiled program (a ``jax.jit`` function of
lists and arrays, dispatched on JAX's C++ path), and write the results back. Any attribute
assignment on a js object (a structural edit, ``train()``/``eval()``) moves the global structure
epoch; the next call then re-flattens, and compiles anew if the graph definition changed.
Nothing walks the object graph while the structure stays the same. Static attributes (ints,
strings, tuples, a frozen dataclass config) are part of the graph definition and select the
program by hash and equality; one that can change without such an assignment (a dataclass
config declared ``unsafe_hash=True``, whose fields a model may assign) is compared on each call
with its fields at binding, and a change binds the call anew, compiling for the new fields.

The call is laid out by ``_stateful`` (shared with ``js.grad`` and ``js.scan_steps``); each
``CallLayout`` has one :class:`Program` record (trace, kind, compiled program), so other objects
of equal structure (a new model of the same architecture, a new optimizer with the same
hyperparameters, whose transform compares by its key) run an existing program without compiling
again. State placed on several devices (``js.shard``) compiles with its current shardings as the
outputs' shardings, so it stays where it is, donated, call after call; ``js.shard`` moves the
structure epoch, so the next call lays the call out anew. ``CompiledFunction.lower`` gives
JAX's ``Lowered`` of the program a call would run.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import functools
import inspect
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, ParamSpec, TypeVar, overload

import jax
from flax import nnx

from . import _hooks, _jax
from ._capture import check_no_captured_state
from ._checks import sharding_of
from ._flax import get_raw, set_raw, static_attributes
from ._stateful import CallLayout, Static, lay_out, read, split_call
from ._stateful import is_stateful as _is_stateful
from ._variables import STRUCTURE_EPOCH, _Tracked

P = ParamSpec("P")
R = TypeVar("R")

# The lists of the open programs_run() blocks: a call appends to each while one is open.
_WATCHERS: list[list[tuple[Any, tuple, dict]]] = []

# Runs an iterator to its end in C (the write-back's map of setters): one deque, reused.
_drain = collections.deque(maxlen=0).extend


def _commit_state(variables: list, dyn_args, dyn_kwargs) -> None:
    """Place uncommitted state arrays where the call's committed inputs are, once, at binding.

    ``jax.jit`` returns committed arrays when any input is committed, and an input's being
    committed is part of the key of its compiled programs. State made on the default device
    (uncommitted) beside a batch or a weight put on a device (committed) would come back
    committed, and the second call, whose inputs differ from the first's in that alone, would
    compile the same program again. Committing that state to the same device before the first
    call makes the first call's inputs what every later call's are. State on a mesh has its
    placement (``CallLayout.placement``) and is left alone, as is a call with nothing committed.
    """
    arrays = read(variables)  # sharding_of: None for a tracer or a value that is no jax.Array
    loose = [i for i, a in enumerate(arrays) if sharding_of(a) is not None and not a.committed]
    if not loose:
        return
    inputs = (*arrays, *jax.tree.leaves((dyn_args, dyn_kwargs)))
    placed = next((a for a in inputs if sharding_of(a) is not None and a.committed), None)
    if placed is None or not isinstance(placed.sharding, jax.sharding.SingleDeviceSharding):
        return
    committed = jax.device_put([arrays[i] for i in loose], placed.sharding)
    _drain(map(set_raw, [variables[i] for i in loose], committed))


def _stateful_paths(tree) -> list[str]:
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_stateful)[0]
    return [jax.tree_util.keystr(path) for path, leaf in leaves if _is_stateful(leaf)]


def _is_dataclass_instance(value) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _unhashable_part(value, where: str) -> tuple[str, Any] | None:
    """Path and value of the first part of ``value`` that cannot be hashed, if any.

    Looks inside what hashes by its parts (tuples, and dataclasses that declare a hash), so a
    list in a frozen config is named (``'config.sizes'``), not the config.
    """
    try:
        hash(value)
    except TypeError:
        pass
    else:
        return None
    if _is_dataclass_instance(value) and type(value).__hash__ is not None:
        parts = [
            (f"{where}.{field.name}", getattr(value, field.name))
            for field in dataclasses.fields(value)
            if (field.compare if field.hash is None else field.hash)
        ]
    elif isinstance(value, tuple):
        parts = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
    else:
        parts = []
    for part_where, part in parts:
        found = _unhashable_part(part, part_where)
        if found is not None:
            return found
    return where, value


def _hashable_fix(value) -> str:
    """How to make ``value`` hashable, for the Fix: of an error."""
    name = type(value).__name__
    if _is_dataclass_instance(value) and type(value).__hash__ is None:
        return (
            f"declare {name} with @dataclass(frozen=True) (a plain @dataclass sets __hash__ to "
            "None), or with @dataclass(unsafe_hash=True) if the model assigns to its fields (a "
            "change between calls then compiles anew)"
        )
    if isinstance(value, list):
        return "use a tuple instead of a list"
    if isinstance(value, (set, dict)):
        return f"use a {'frozenset' if isinstance(value, set) else 'tuple of pairs'} instead"
    return f"give {name} a __hash__ consistent with its __eq__"


def _unhashable_attribute(objects: tuple) -> tuple[str, Any] | None:
    """Path and value of the first static attribute (or part of one) that cannot be hashed."""
    for path, node in nnx.iter_graph(objects):
        if isinstance(node, nnx.Pytree):
            for name, value in static_attributes(node).items():
                found = _unhashable_part(value, ".".join(map(str, (*path[1:], name))))
                if found is not None:
                    return found
    return None


def _unhashable_static(key: tuple) -> TypeError:
    """The error of a call whose static arguments (in its split_call key) cannot be hashed."""
    found, position, entries = None, 0, iter(key)
    for entry in entries:
        if isinstance(entry, str):  # a keyword argument's name, then its entry
            where, entry = entry, next(entries)
        else:
            where, position = f"#{position}", position + 1
        if isinstance(entry, Static):
            found = found or _unhashable_part(entry.value, where)
    assert found is not None, "only a Static entry of a key can fail to hash"
    where, value = found
    return TypeError(
        f"js.jit: a static argument is not hashable: {where!r} (a {type(value).__name__}); "
        f"static arguments select the compiled program. Fix: {_hashable_fix(value)}, or make "
        "it traced."
    )


def _changes_in_place(value) -> bool:
    """Whether ``value`` (hashable, compared by its fields) can change without an assignment
    on a js object: a dataclass that is not frozen and compares by value (``unsafe_hash=True``),
    or one that holds such a dataclass."""
    if _is_dataclass_instance(value):
        params = type(value).__dataclass_params__  # frozen, eq: as given to @dataclass
        if params.eq and not params.frozen:
            return True
        return any(_changes_in_place(getattr(value, f.name)) for f in dataclasses.fields(value))
    return isinstance(value, tuple) and any(map(_changes_in_place, value))


def _survey(objects: tuple) -> tuple[bool, tuple]:
    """One walk of the object graph at binding: ``(tracked, watched)``.

    ``tracked``: whether every graph node's structural edits move the structure epoch.
    ``watched``: ``(value, copy)`` of each static attribute that can change in place (a
    dataclass config declared ``unsafe_hash=True``): the call key holds objects by id, so a
    call compares such a value with its deep copy from binding (by its own ``__eq__``, as the
    layout compares it), and binds anew when they differ (the layout hashes the new fields,
    so a program is compiled for them). A config shared by several modules is watched once.
    """
    tracked, watched = True, {}
    for _, node in nnx.iter_graph(objects):
        if isinstance(node, nnx.Pytree):
            if not isinstance(node, (_Tracked, nnx.RngStream)):
                tracked = False
            for value in static_attributes(node).values():
                if id(value) not in watched and _changes_in_place(value):
                    watched[id(value)] = (value, copy.deepcopy(value))
    return tracked, tuple(watched.values())


def _changed(watched: tuple) -> bool:
    """Whether a watched static attribute differs from its copy (see :func:`_survey`)."""
    for value, at_binding in watched:
        if value != at_binding:
            return True
    return False


def _explain_aliasing(error, leaves, dyn_args, dyn_kwargs) -> None:
    """Raise the reason when a donating program failed on an argument that is state.

    An argument array that is the very array of a donated state Variable makes XLA refuse the
    call before anything runs (a buffer donated and read in one call); the check is by identity
    and runs only after a failure, so it costs the per-call path nothing.
    """
    state = {id(leaf) for leaf in leaves}
    if any(id(x) in state for x in jax.tree.leaves((dyn_args, dyn_kwargs))):
        raise ValueError(
            "js.jit: an argument array is also the state of a module or optimizer passed to "
            "the call (e.g. f(model, model.weight.value)); that state is donated, so the "
            "same buffer cannot also be read as an argument. Fix: pass a copy "
            "(jnp.array(x, copy=True)) or compile with js.jit(..., donate=False)."
        ) from error


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


def _pure(fn, layout: CallLayout):
    """``fn`` as a pure function of the state arrays: ``(output, new state arrays, extra)``.

    ``extra`` carries the values that forward hooks recorded while ``fn`` was traced (see
    ``_hooks``): ``()`` when no hook fired, which costs nothing per call; else a
    ``_hooks.WithRecords`` whose arrays leave the program beside its output.
    """

    def pure(leaves, dyn_args, dyn_kwargs):
        objects, args, kwargs = layout.rebuild(leaves, dyn_args, dyn_kwargs)
        nested = _stateful_paths((dyn_args, dyn_kwargs))
        if nested:
            raise TypeError(
                f"js.jit: a module, optimizer or Rngs sits inside a container argument "
                f"(at {nested[0]} of (args, kwargs)); its updates would be lost. Fix: pass "
                "each stateful object as its own top-level argument."
            )
        with _hooks.recording(args, kwargs, "js.jit") as recorder:  # hooks observe: record
            output = fn(*args, **kwargs)
        if _stateful_paths(output):
            raise TypeError(
                f"js.jit: {getattr(fn, '__qualname__', fn)} returned a module, optimizer or "
                "variable. Return arrays only: objects passed as arguments are updated in "
                "place."
            )
        return output, layout.updated(objects, "js.jit", fn), recorder.attach(())

    return pure


class Program:
    """The program record of one :class:`CallLayout`: trace, kind and compiled program.

    ``pure`` is the function as a pure function of the state arrays, wrapped in an inline
    ``jax.jit``: JAX caches its trace per input signature and inlines it into the program, so
    the function is traced once per signature whatever the kind, and a state array it leaves
    unchanged is, in the trace, the very tracer that came in.

    ``kind`` is decided by the first trace, once per layout: ``"read"`` when no state array
    changed (an evaluation, an inference forward), else ``"write"``. A writing program donates
    the state it writes (unless ``donate=False``) and returns its new arrays, placed on the
    shardings the state had (``layout.placement``), so sharded state stays where it is. State it
    only reads (the weights of a decode step that writes a key-value cache) is passed apart,
    neither donated nor returned: arrays the caller holds stay valid, and two threads may run
    programs that read the same weights. A read-only program
    neither donates nor returns the state, and costs what a hand-written ``jax.jit`` of the
    forward costs. Should a later input signature write under a read-only program (another
    branch for another shape), that signature's program returns the new arrays (not donated)
    and the layout's program is the writing kind from then on.

    ``run`` is the compiled program of the current kind: a ``jax.jit`` function of lists, dicts
    and arrays only, which JAX dispatches on its C++ path, ``(leaves, dyn_args, dyn_kwargs) ->
    (output, new leaves or None, extra)``, or a :class:`_SplitRun` when it writes only some of
    the state. A call runs it through its binding's step (:class:`_Binding`).
    """

    __slots__ = ("layout", "pure", "donate", "kind", "run")

    def __init__(self, fn, layout: CallLayout, donate: bool):
        self.layout, self.donate = layout, donate
        self.pure = jax.jit(_pure(fn, layout), inline=True)
        self.kind: str | None = None
        self.run = None

    def decide(self, leaves, dyn_args, dyn_kwargs) -> None:
        """Trace the call once and keep the program of the kind the trace needs."""
        self.kind = "read"
        read_only = self.of_kind("read")
        read_only.trace(leaves, dyn_args, dyn_kwargs)  # a write switches self.kind and self.run
        if self.kind == "read":
            self.run = read_only

    def of_kind(self, kind: str):
        """A new compiled program of ``kind`` (``"read"`` or ``"write"``) for this layout."""
        read_only = kind == "read"

        def program(leaves, dyn_args, dyn_kwargs):
            output, new_leaves, extra = self.pure(leaves, dyn_args, dyn_kwargs)
            if not read_only:
                return output, new_leaves, extra
            written = tuple(new is not old for new, old in zip(new_leaves, leaves, strict=True))
            if not any(written):
                return output, None, extra
            if self.kind == "read":  # decided at trace time, so no exception crosses a trace
                self.kind = "write"
                self.run = self.of_kind("write") if all(written) else _SplitRun(self, written)
            return output, new_leaves, extra

        donate = (0,) if self.donate and not read_only else ()
        if self.layout.placement is None or read_only:
            return jax.jit(program, donate_argnums=donate)
        shardings = (None, list(self.layout.placement), None)
        return jax.jit(program, donate_argnums=donate, out_shardings=shardings)


class _SplitRun:
    """The writing program of a layout whose function leaves some state unchanged: the
    arrays it writes are one (donated) argument, those it only reads another, returned never.

    ``step(variables)`` gives its per-call step; ``lower`` takes the arguments of a program of
    :meth:`Program.of_kind` (``leaves, dyn_args, dyn_kwargs``). Should another input signature
    write an array the first trace only read, that array comes back too (not donated).
    """

    __slots__ = ("written", "kept", "jitted")

    def __init__(self, program: Program, written: tuple[bool, ...]):
        self.written = [i for i, flag in enumerate(written) if flag]
        self.kept = [i for i, flag in enumerate(written) if not flag]

        def split_program(changed, kept, dyn_args, dyn_kwargs):
            leaves = [None] * len(written)
            for i, leaf in zip(self.written + self.kept, changed + kept, strict=True):
                leaves[i] = leaf
            output, new_leaves, extra = program.pure(leaves, dyn_args, dyn_kwargs)
            late = {
                j: new_leaves[i] for j, i in enumerate(self.kept) if new_leaves[i] is not leaves[i]
            }
            return output, [new_leaves[i] for i in self.written], late, extra

        donate = (0,) if program.donate else ()
        placement = program.layout.placement
        if placement is None:
            self.jitted = jax.jit(split_program, donate_argnums=donate)
        else:
            shardings = (None, [placement[i] for i in self.written], None, None)
            self.jitted = jax.jit(split_program, donate_argnums=donate, out_shardings=shardings)

    def _arguments(self, leaves, dyn_args, dyn_kwargs):
        changed = [leaves[i] for i in self.written]
        return changed, [leaves[i] for i in self.kept], dyn_args, dyn_kwargs

    def step(self, variables: list) -> Callable:
        """The per-call step over ``variables`` (see :class:`_Binding`): the Variables this
        program writes and those it only reads are picked once, here, not on every call."""
        written = [variables[i] for i in self.written]
        kept = [variables[i] for i in self.kept]
        jitted = self.jitted

        def call(dyn_args, dyn_kwargs):
            changed, read_only = list(map(get_raw, written)), list(map(get_raw, kept))
            output, new_leaves, late, extra = jitted(changed, read_only, dyn_args, dyn_kwargs)
            _drain(map(set_raw, written, new_leaves))
            for j, value in late.items():  # another signature wrote what the first only read
                set_raw(kept[j], value)
            return output, extra

        return call

    def lower(self, leaves, dyn_args, dyn_kwargs) -> jax.stages.Lowered:
        return self.jitted.lower(*self._arguments(leaves, dyn_args, dyn_kwargs))


def _whole_step(run, variables: list) -> Callable:
    """The per-call step of a program of :meth:`Program.of_kind`, which takes and returns the
    whole state in one list (a read-only program returns ``None`` for it)."""

    def call(dyn_args, dyn_kwargs):
        output, new_leaves, extra = run(list(map(get_raw, variables)), dyn_args, dyn_kwargs)
        if new_leaves is not None:
            _drain(map(set_raw, variables, new_leaves))
        return output, extra

    return call


class _Binding:
    """What one call key (these objects, these static values) needs on the per-call path.

    ``call(dyn_args, dyn_kwargs) -> (output, extra)`` is the step of ``run`` (the program's run
    when the binding was last called) over ``variables``: it reads their arrays, runs the
    program and writes back only the arrays it wrote. It is built once per run, so a call does
    no more than that: no list of all the leaves, no index lookups (docs/benchmarks.md, "js.jit
    per call", gives what those cost a tiny step).
    """

    __slots__ = ("refs", "epoch", "tracked", "watched", "variables", "program", "run", "call")

    def attach(self, run) -> None:
        """Build the per-call step of ``run``, the program's current run."""
        if isinstance(run, _SplitRun):
            self.call = run.step(self.variables)
        else:
            self.call = _whole_step(run, self.variables)
        self.run = run  # last: a thread that sees the new run sees its step


class CompiledFunction(Generic[P, R]):
    """The callable ``js.jit`` returns: ``fn``'s signature and result type. See :func:`jit`."""

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        static_argnums: Iterable[int] = (),
        static_argnames: Iterable[str] = (),
        donate: bool = True,
        constants: Iterable[str] = (),
    ) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        static_argnums, static_argnames = _static_both_ways(fn, static_argnums, static_argnames)
        self._static_argnums = frozenset(static_argnums)
        self._static_argnames = frozenset(static_argnames)
        self._donate = donate
        self._constants = frozenset(constants)
        self._bindings: dict[Any, _Binding] = {}  # call key -> binding to a program record
        self._programs: dict[CallLayout, Program] = {}  # one record per layout

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        # As a decorator on a method, bind like a function: `self` becomes the first argument.
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        objects, key, dyn_args, dyn_kwargs = split_call(
            args, kwargs, self._static_argnums, self._static_argnames
        )
        binding = self._binding(key, objects, dyn_args, dyn_kwargs)
        if _WATCHERS and _jax.TRACE_CTX.trace is _jax.EVAL_TRACE:  # a programs_run() block
            for watcher in _WATCHERS:
                watcher.append((self, args, kwargs))
        epoch = binding.epoch
        if binding.run is not binding.program.run:  # the first call, or a switch of kind
            binding.attach(binding.program.run)
        try:
            output, extra = binding.call(dyn_args, dyn_kwargs)  # see _pure
        except jax.errors.JaxRuntimeError as error:  # XLA refused the call (nothing ran)
            if binding.program.kind == "write" and self._donate:
                _explain_aliasing(error, read(binding.variables), dyn_args, dyn_kwargs)
            raise
        if epoch != STRUCTURE_EPOCH.value and binding.tracked:
            binding.epoch = STRUCTURE_EPOCH.value  # objects created while tracing moved it
        if extra:  # hooks fired while tracing: call them on the values that came out
            _hooks.finish(extra, args, kwargs, "js.jit")
        return output

    def lower(self, *args: P.args, **kwargs: P.kwargs) -> jax.stages.Lowered:
        """JAX's ``Lowered`` of the program a call with these arguments would run.

        The same program: same kind (a read-only function lowers to a program that neither
        donates nor returns the state), same donation, same shardings. Nothing runs and no
        state changes. ``.compile()`` on the result gives ``cost_analysis()`` and
        ``memory_analysis()``, ``.as_text()`` the StableHLO.
        """
        objects, key, dyn_args, dyn_kwargs = split_call(
            args, kwargs, self._static_argnums, self._static_argnames
        )
        binding = self._binding(key, objects, dyn_args, dyn_kwargs)
        leaves, program = read(binding.variables), binding.program
        run = program.run
        lowered = run.lower(leaves, dyn_args, dyn_kwargs)
        if program.run is not run:  # these inputs write under a read-only program: from now on
            lowered = program.run.lower(leaves, dyn_args, dyn_kwargs)  # calls run this one
        return lowered

    def _binding(self, key, objects, dyn_args, dyn_kwargs) -> _Binding:
        """The binding of a call key: the cached one while the structure epoch stands."""
        try:
            binding = self._bindings.get(key)
        except TypeError:
            raise _unhashable_static(key) from None
        if (
            binding is None
            or binding.epoch != STRUCTURE_EPOCH.value
            or (binding.watched and _changed(binding.watched))  # a config's field changed
        ):
            binding = self._bind(key, objects, dyn_args, dyn_kwargs)
        return binding

    def _bind(self, key, objects, dyn_args, dyn_kwargs) -> _Binding:
        """Flatten the objects again (first call, or after a structural edit)."""
        check_no_captured_state(self._fn, self._constants)
        layout, variables = lay_out("js.jit", objects, key)
        try:
            program = self._programs.get(layout)
        except TypeError:  # a static attribute of the objects is unhashable
            found = _unhashable_attribute(tuple(objects))
            if found is None:
                raise
            where, value = found
            arrays = " (or hold arrays in a js.Buffer)" if isinstance(value, list) else ""
            raise TypeError(
                f"js.jit: the static attribute {where!r} (a {type(value).__name__}) is not "
                "hashable, and static attributes select the compiled program. Fix: "
                f"{_hashable_fix(value)}{arrays}."
            ) from None
        if program is None:
            program = Program(self._fn, layout, self._donate)
        if layout.placement is None:
            _commit_state(variables, dyn_args, dyn_kwargs)
        if program.run is None:
            program.decide(read(variables), dyn_args, dyn_kwargs)
        self._programs[layout] = program
        binding = _Binding()
        binding.tracked, binding.watched = _survey(tuple(objects))
        binding.epoch = STRUCTURE_EPOCH.value if binding.tracked else None
        binding.variables = variables
        binding.program = program
        binding.run = None  # the first call attaches the run's step
        bindings = self._bindings

        def forget(ref):  # an object died: its id may name another object next
            if ref in getattr(bindings.get(key), "refs", ()):
                del bindings[key]

        binding.refs = tuple(weakref.ref(obj, forget) for obj in objects)
        bindings[key] = binding
        return binding


@contextlib.contextmanager
def programs_run() -> Iterator[list[tuple[CompiledFunction, tuple, dict]]]:
    """Record the ``js.jit`` calls made while the block is open.

    Yields a list that each call run outside any trace appends to, in order, as
    ``(function, args, kwargs)``: the :class:`CompiledFunction` and the arguments it was called
    with (a call traced inside another program is part of that program, not recorded).
    ``function.lower(*args, **kwargs)`` after the block gives the program that call ran, from
    JAX's caches, without tracing the Python function again: ``.compile()`` on it gives
    ``cost_analysis()`` and ``memory_analysis()`` (``js.training``'s ``perf/*`` columns come
    from there). Its stateful arguments lower with their current arrays (same shapes and
    dtypes as at the call); an array argument the call donated can no longer be lowered.
    Blocks nest; each sees every call made while it is open. With no block open a call pays
    one truth test.

    Example:
        >>> import jax.numpy as jnp
        >>> import js
        >>> double = js.jit(lambda x: 2 * x)
        >>> with js.programs_run() as ran:
        ...     _ = double(jnp.ones(3))
        >>> function, args, kwargs = ran[0]
        >>> function.lower(*args, **kwargs).compile().cost_analysis()["flops"]
        3.0
    """
    ran: list[tuple[CompiledFunction, tuple, dict]] = []
    _WATCHERS.append(ran)
    try:
        yield ran
    finally:
        del _WATCHERS[next(i for i, w in enumerate(_WATCHERS) if w is ran)]  # not ==


@overload
def jit(
    fn: Callable[P, R],
    *,
    static_argnums: int | Iterable[int] = (),
    static_argnames: str | Iterable[str] = (),
    donate: bool = True,
    constants: str | Iterable[str] = (),
) -> CompiledFunction[P, R]: ...


@overload
def jit(
    fn: None = None,
    *,
    static_argnums: int | Iterable[int] = (),
    static_argnames: str | Iterable[str] = (),
    donate: bool = True,
    constants: str | Iterable[str] = (),
) -> Callable[[Callable[P, R]], CompiledFunction[P, R]]: ...


def jit(
    fn: Callable[P, R] | None = None,
    *,
    static_argnums: int | Iterable[int] = (),
    static_argnames: str | Iterable[str] = (),
    donate: bool = True,
    constants: str | Iterable[str] = (),
) -> CompiledFunction[P, R] | Callable[[Callable[P, R]], CompiledFunction[P, R]]:
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
    between calls compiles a new program on the next call, as does a new value of a static
    attribute (a dataclass config must be hashable: ``@dataclass(frozen=True)``, or
    ``unsafe_hash=True`` when its fields are assigned). Its ``.lower(*args, **kwargs)``
    returns JAX's ``jax.stages.Lowered`` of the program such a call would run, without running
    it (``.compile().cost_analysis()``, ``.memory_analysis()``).

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
