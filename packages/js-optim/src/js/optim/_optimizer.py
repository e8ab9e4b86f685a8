"""The optimizer shell: torch-style parameter groups, per-parameter state, options as arrays.

An :class:`Optimizer` subclass describes one update rule for one parameter (``init`` and
``update``) and which of its options shape the program (``static``); the shell does the rest:
parameter groups (``param_groups``, torch's list of dict-like groups), per-parameter state in
``OptState`` variables (so ``js.jit`` threads it), the step count, state dicts, freezing
(``Parameter.requires_grad``), sharding and the checks.

The numeric options of each group (``lr``, ``betas``, ``weight_decay``, ...) live twice: as
Python values on the host (``param_groups[i]["lr"]``, what users and schedulers read and write)
and as float32 0-d arrays in the optimizer's state (what the compiled update reads), computed
from the host values by the subclass's ``scalars`` in double precision. Writing an option
rewrites that group's arrays, so the next step uses it and nothing compiles again: the host
values are kept out of the optimizer's graph definition (``js.jit``'s cache key), which holds
only the structure and the static options.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, ClassVar

import jax
import jax.core  # jax.core.Tracer below; pyright knows a submodule only once imported
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

import js
from js._autodiff import gradient_owners
from js._checks import flatten_state, sharding_of

from ._options import load_state, option_arrays, write_option
from ._param_group import (
    ById,
    GroupView,
    Host,
    OptState,
    ParamGroup,
    check_lr,
    default_float,
    describe,
    frozen_value,
    parse_groups,
    put_scalars,
    show_signature,
    state_slots,
)
from ._paths import search_gradients
from ._program import (
    OLD_FORM,
    Program,
    check_parameters,
    flipped,
    placed_init,
    requires_grad,
    update_program,
)
from ._schedules import LearningRate


class Optimizer(js.Object):
    """Base class of js optimizers: torch's ``param_groups``, ``step(grads)``, ``step_count``,
    state dicts, freezing.

    A subclass defines one update rule for one parameter, as ``torch.optim.Optimizer``'s
    subclasses do, and calls ``super().__init__(params, defaults)``:

    - ``name``: the state-key prefix (``'adam'`` gives ``'adam.mu.<path>'``).
    - ``static``: the options that shape the program (bools, ints, strings): writing them in
      ``param_groups`` is refused. Every other option is numeric (a float or a tuple of
      floats) and may be written at any time; ``lr`` may also be a schedule (a callable of the
      step count, traced in the step; such a group's ``lr`` is then static).
    - ``check(group)``: raise ValueError/TypeError naming the option and value (the message
      starts with the option's name; the shell prefixes the class and group). Called per
      group at build and on every write. ``lr`` is checked by the shell.
    - ``scalars(group) -> {name: float}``: on the host, in double precision, the numbers the
      update reads; they become 0-d float32 arrays (``h`` below). ``h["lr"]`` is added by
      the shell (a float ``lr``, or the schedule evaluated at the step count).
    - ``init(param, group) -> {field: array}``: the per-parameter state (``{}`` for none).
    - ``flags(group) -> {name: hashable}`` (optional): static facts of numeric options
      (``weight_decay != 0``), readable in ``update``'s ``group``; changing them recompiles.
    - ``update(param, grad, state, h, step, group) -> (new_param, new_state)``: pure jnp.
      ``step`` is the int32 number of this update counting from 1; ``group`` holds the static
      options only (numbers come through ``h``). Results are cast back to the dtypes of the
      parameter and state.

    Below these per-parameter hooks, the whole step is one :class:`Rule` object, from
    :meth:`rule` (the default runs ``init``/``update`` per parameter): an optimizer whose update
    is not per parameter (``Optax``, ``Accumulate``) returns its own rule there and overrides
    no private method of this class.

    Args:
        params: ``model.parameters()``, or a list of groups ``{"params": <selection or list
            of (path, Parameter) pairs>, **options}``; a group's missing options come from
            ``defaults``.
        defaults: every option of the optimizer with its default value.

    Parameters with ``requires_grad=False`` get no state and are never changed; gradients
    for them are not expected (and ignored if given). See docs/optim.md.
    """

    name: ClassVar[str] = "optimizer"
    static: ClassVar[tuple[str, ...]] = ()
    # The state ``rule().build()`` makes: one OptState per leaf, its state-dict key, its slot
    # (``(parameter index, field)`` for the per-parameter rule).
    _state: Any
    _keys: tuple[str, ...]
    _slots: tuple

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        show_signature(cls)

    def __init__(self, params: Any, defaults: Any, *old_args: Any, **old_kwargs: Any) -> None:
        cls = type(self).__name__
        if (
            old_args
            or old_kwargs
            or isinstance(defaults, optax.GradientTransformation)
            or (hasattr(defaults, "init") and hasattr(defaults, "update"))
        ):
            raise TypeError(OLD_FORM.format(name=cls))
        if type(self).update is Optimizer.update and type(self).rule is Optimizer.rule:
            raise TypeError(
                f"{cls}: the Optimizer base class has no update rule. Fix: use SGD, Adam, "
                "AdamW, ..., subclass it with init/update, or js.optim.Optax(params, tx)."
            )
        if not isinstance(defaults, Mapping) or "params" in defaults:
            raise TypeError(f"{cls}: defaults must be a dict of options (without 'params')")
        defaults = dict(defaults)
        selection, groups, self._sources, self._search = parse_groups(
            cls, params, defaults, self.static, self._check_group
        )
        self.params = selection
        self._dtype = default_float()
        arrays = [param.value for param in selection]
        # (path, shape, dtype, sharding) at construction: step refuses parameters cast, reshaped
        # or moved since (sharding is None for a parameter that was traced).
        self._built = tuple(
            (path, tuple(a.shape), np.dtype(a.dtype), sharding_of(a))
            for path, a in zip(selection.paths, arrays, strict=True)
        )
        host_groups = [
            ParamGroup(self, index, indices, values)
            for index, (indices, values) in enumerate(groups)
        ]
        self._group_of = tuple(
            index for _, index in sorted((i, g) for g, (idx, _) in enumerate(groups) for i in idx)
        )
        self._host = Host(host_groups, defaults, None)
        self._trainable = tuple(requires_grad(p) for p in selection)
        self._set_scalars(arrays[0] if arrays else None)
        self.rule().build()
        self._rekey()
        # int32; `+ 1` keeps the dtype, so a compiled step never recompiles. On a mesh it is
        # replicated there, beside the moments.
        count = jax.device_put(np.zeros((), np.int32))  # host-made: nothing to compile
        if arrays and isinstance(sharding := sharding_of(arrays[0]), NamedSharding):
            count = jax.device_put(count, NamedSharding(sharding.mesh, PartitionSpec()))
        self._step_count = OptState(count)

    # -- the subclass protocol -------------------------------------------------------------------

    def check(self, group: Mapping[str, Any]) -> None:
        """Validate one group's options (the shell checks ``lr``); raise naming option and
        value. Subclasses override it."""

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The float numbers ``update`` reads, from the group's Python values, in double
        precision (``h`` in :meth:`update`, less ``"lr"``). Subclasses override it."""
        return {}

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> dict[str, jax.Array]:
        """The per-parameter state fields, e.g. ``{"mu": jnp.zeros_like(param)}``."""
        return {}

    def flags(self, group: Mapping[str, Any]) -> dict[str, Hashable]:
        """Optional: static facts derived from numeric options, e.g. ``{"decay":
        weight_decay != 0}`` to leave a term out of the program, as torch skips it. ``update``
        reads them from ``group``; a write that changes them compiles once more."""
        return {}

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: dict[str, jax.Array],
        h: dict[str, jax.Array],
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """One update of one parameter: ``(new_param, new_state)``. Subclasses override it."""
        raise NotImplementedError

    def rule(self) -> Rule:
        """How a step updates every parameter at once: the one extension point below the
        per-parameter hooks above. The default, :class:`PerParameter`, runs ``init`` and
        ``update`` on each parameter; an optimizer whose update is not per parameter returns
        its own :class:`Rule` (``Optax`` one holding an optax transform, ``Accumulate`` one
        holding its wrapped optimizer's rule, as ``optax.MultiSteps`` wraps a transform)."""
        return PerParameter(self)

    # -- construction ----------------------------------------------------------------------------

    def _numeric(self, values: Mapping[str, Any]) -> list[str]:
        """The group's numeric options: every default that is not static nor a schedule."""
        return [
            key
            for key in self._host_defaults(values)
            if key not in self.static and not (key == "lr" and callable(values.get("lr")))
        ]

    def _host_defaults(self, values: Mapping[str, Any]) -> Iterable[str]:
        host = getattr(self, "_host", None)
        return host.defaults if host is not None else values

    def _check_group(self, owner: str, values: Mapping[str, Any]) -> None:
        """The shell's checks and the subclass's, each error prefixed with ``owner``."""
        try:
            if "lr" in values:
                check_lr(values["lr"])
            self.check(values)
            for key in self._numeric(values):
                try:
                    array = np.asarray(values[key], np.float64)
                except (TypeError, ValueError):
                    array = None
                if array is None or array.ndim > 1:
                    raise TypeError(
                        f"{key} must be a number or a tuple of numbers, got {values[key]!r}"
                    )
        except (TypeError, ValueError) as error:
            raise type(error)(f"{owner}: {error}") from None

    def _group_key(self, index: int) -> tuple:
        group = self._host.groups[index]
        values = group._values
        statics = tuple((key, values[key]) for key in self.static if key in values)
        lr = values.get("lr")
        return (
            group._indices,
            statics,
            tuple(self.flags(values).items()),
            ById(lr) if callable(lr) else None,
            self._scalar_names[index],
            self._fields[index],
        )

    def _rekey(self) -> None:
        """Recompute the structure key after a structural change (build, freezing)."""
        groups = tuple(self._group_key(i) for i in range(len(self._host.groups)))
        self._host = Host(self._host.groups, self._host.defaults, (groups, self._trainable))

    def _fields_of(self, values: Mapping[str, Any], example=None) -> tuple[str, ...]:
        example = jax.ShapeDtypeStruct((1,), self._dtype) if example is None else example
        shapes = jax.eval_shape(lambda p: self.init(p, values), example)
        return tuple(shapes)

    def _set_scalars(self, like) -> None:
        """Each group's numbers (scalars + a float lr) as one vector OptState (put_scalars)."""
        names, variables, fields = [], [], []
        for group in self._host.groups:
            values = group._values
            scalars = self._scalars_of(values)
            names.append(tuple(scalars))
            arrays = put_scalars(list(scalars.values()), like, self._dtype)
            variables.append(tuple(OptState(a) for a in arrays))
            first = next((self.params.variables[i].value for i in group._indices), None)
            fields.append(self._fields_of(values, first))
        self._scalar_names = tuple(names)
        self._fields = tuple(fields)
        self._hyper = nnx.data(tuple(variables))

    def _scalars_of(self, values: Mapping[str, Any]) -> dict[str, float]:
        scalars = {k: float(v) for k, v in self.scalars(values).items()}
        lr = values.get("lr")
        if lr is not None and not callable(lr):
            scalars["lr"] = float(lr)
        return scalars

    def _init_states(self, indices: list[int]) -> list[dict]:
        variables = self.params.variables
        arrays = [variables[i].value for i in indices]
        numbers = tuple(
            tuple((k, frozen_value(g._values.get(k))) for k in self._host.defaults)
            for g in self._host.groups
        )
        if not indices:
            return []
        program = Program(self, (type(self), self._host.key, numbers, tuple(indices)))
        return placed_init(program, arrays)

    def _init_pure(self, arrays: list, key: Any) -> Any:
        """The pure state initialisation a :class:`Program` compiles: the rule's ``init``."""
        return self.rule().init(arrays, key)

    # -- properties ------------------------------------------------------------------------------

    @property
    def param_groups(self) -> list[ParamGroup]:
        """torch's ``param_groups``: one dict-like :class:`ParamGroup` per group. Write a
        numeric option (``opt.param_groups[0]["lr"] = 1e-4``) and the next step uses it,
        without compiling again."""
        return self._host.groups

    @property
    def defaults(self) -> dict[str, Any]:
        """torch's ``defaults``: every option with the value groups fall back to."""
        return self._host.defaults

    @property
    def lr(self) -> LearningRate | None:
        """The first group's learning rate: a float, a schedule ``step -> lr`` (then
        ``lr(step_count)`` is the next step's rate), or None for an optimizer without one."""
        groups = self.param_groups
        return groups[0].get("lr") if groups else None

    @property
    def frozen(self) -> list[str]:
        """Paths of the parameters with ``requires_grad=False``: no state, never updated."""
        return [path for path, p in self.params.named() if not requires_grad(p)]

    @property
    def step_count(self) -> jax.Array:
        """How many times :meth:`step` ran: an int32 scalar (traced inside ``js.jit``)."""
        return self._step_count.value

    # -- writing options -------------------------------------------------------------------------

    def _write_option(self, index: int, key: str, value: Any) -> None:
        write_option(self, index, key, value)  # ParamGroup.__setitem__ (see _options)

    # -- stepping --------------------------------------------------------------------------------

    def step(self, grads: nnx.State | Mapping[str, jax.Array]) -> None:
        """Update every trainable parameter once, in place, from ``grads``.

        ``grads`` is the state ``js.value_and_grad(loss_fn)(model, ...)`` returns for the model
        this optimizer was built from (or a ``{path: array}`` dict). Works eagerly and inside
        ``js.jit`` when the optimizer is passed as an argument.
        """
        traced = self._check_params()
        matched = self._match(grads)
        variables = self.params.variables
        trainable = [i for i, t in enumerate(self._trainable) if t]
        params = [variables[i].value for i in trainable]
        rule = self.rule()
        state = rule.variables()  # every state variable the update reads and writes, in order
        values = [variable.value for variable in state]
        if traced:
            new_params, new_values = rule.update(params, matched, values)
        else:
            new_params, new_values = update_program(
                Program(self, rule.key()), params, matched, values
            )
        for i, value in zip(trainable, new_params, strict=True):
            variables[i].value = value
        for variable, value in zip(state, new_values, strict=True):
            variable.value = value

    def _hyper_values(self, values: list, count) -> tuple[list[dict], list]:
        """The group dicts ``h`` from the flat values (a schedule evaluated at ``count``),
        and the rest of the values."""
        hypers, at = [], 0
        for index, group in enumerate(self._host.groups):
            names = self._scalar_names[index]
            h = {}
            if names:  # the group's numbers, one vector (put_scalars)
                vector = values[at]
                h = {name: vector[i] for i, name in enumerate(names)}
                at += 1
            lr = group._values.get("lr")
            if callable(lr):
                h["lr"] = jnp.asarray(lr(count), self._dtype)
            hypers.append(h)
        return hypers, values[at:]

    def _pure(self, params: list, grads: list, values: list) -> tuple[list, list]:
        """One update, pure (what a :class:`Program` compiles): the rule's ``update``."""
        return self.rule().update(params, grads, values)

    def _view(self, group: ParamGroup) -> GroupView:
        values = group._values
        shown = {k: values[k] for k in self.static if k in values}
        shown.update(self.flags(values))
        if callable(values.get("lr")):
            shown["lr"] = values["lr"]
        return GroupView(shown, type(self).__name__)

    def _match(self, grads: nnx.State | Mapping[str, Any]) -> list[jax.Array]:
        """Gradient arrays of the trainable parameters in order, after checking that ``grads``
        fits them (gradients of frozen parameters may be present and are ignored). Where the
        paths given do not find them (a submodule's selection, a list of Parameters), the
        gradients' paths and shapes do (``_paths``). Gradients from ``js.value_and_grad`` know
        their Parameters: when they hold exactly this optimizer's trainable ones, each is found
        by identity, whatever name its group gave it (a tied one, a list of Parameters)."""
        found = self._owned(grads)
        if found is not None:
            return found
        if not self._search:
            try:
                return self.params.match(grads, expect=self._trainable)
            except ValueError as error:
                failed = str(error)
        else:
            failed = None
        groups = [group._indices for group in self.param_groups]
        return search_gradients(
            type(self).__name__, grads, groups, self._sources, self._built, self._trainable, failed
        )

    def _owned(self, grads) -> list[jax.Array] | None:
        """The trainable Parameters' gradients by identity (None: ``grads`` do not say whose
        they are, or do not hold exactly these Parameters: the paths decide, as before)."""
        owners = gradient_owners(grads)
        if owners is None:
            return None
        variables = self.params.variables
        keys = [owners.get(id(variables[i])) for i, t in enumerate(self._trainable) if t]
        if None in keys or set(keys) != set(owners.values()) or len(set(keys)) != len(keys):
            return None
        flat = flatten_state(grads)
        return [flat[str(key)] for key in keys]

    def _check_params(self) -> bool:
        """Shapes and dtypes (static: free inside compiled code), then the devices of concrete
        parameters, then ``requires_grad``. Returns whether the parameters are traced. Inside
        compiled code the program's inputs decide placement, so the device check only runs
        eagerly."""
        cls = type(self).__name__
        traced = check_parameters(cls, self._built, self.params)
        now = tuple(requires_grad(p) for p in self.params)
        if now != self._trainable:
            self.rule().adapt(now, flipped(cls, self.params.paths, self._trainable, now, traced))
        return traced

    # -- state dicts -----------------------------------------------------------------------------

    def _state_items(self) -> list[tuple[str, OptState]]:
        """``(key, variable)`` of the state besides ``step_count`` and the group options."""
        return self.rule().items()

    def _groups_owner(self) -> Optimizer:
        """The optimizer whose ``param_groups`` the state dict saves (``Accumulate``'s inner)."""
        return self.rule().groups

    def state_dict(self, *, as_numpy: bool = True) -> dict[str, np.ndarray] | dict[str, Any]:
        """Independent NumPy copies of the optimizer state, keyed by stable names.

        Keys: ``'step_count'``; ``'<name>.<field>.<path>'`` per trainable parameter (e.g.
        ``'adam.mu.encoder.weight'``, ``'momentum.trace.w'``); and each group's numeric options
        ``'param_groups.<i>.<option>'`` (float64; ``betas`` of shape (2,)). Parameters
        themselves are not included (``model.state_dict()``). With ``as_numpy=False``, the
        live ``jax.Array``s (no copy, on their shardings; the options stay NumPy).
        """
        state: dict[str, Any] = {"step_count": self._step_count.value}
        for key, variable in self._state_items():
            state[key] = variable.value
        if as_numpy:
            state = {key: np.array(value, copy=True) for key, value in state.items()}
        state.update(option_arrays(self._groups_owner()))
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (the group options too), all or nothing: keys, shapes,
        dtypes and option values are checked first and one error lists every problem.

        A state dict saved by js-optim 0.1 (keys ``'adam.count'``, ``'lr.count'``, no
        ``'param_groups.*'``) loads too: its counters repeat ``'step_count'`` and are dropped,
        and the groups keep the options this optimizer was built with.
        """
        load_state(self, state_dict)

    def __repr__(self) -> str:
        return describe(type(self).__name__, len(self.params), self.param_groups)


show_signature(Optimizer)


class Rule(ABC):
    """How an optimizer steps, as one object: what the base class compiles and saves.

    An :class:`Optimizer` builds its update from ``self.rule()`` (made afresh at each use, so
    it holds nothing a compiled program keys on but through ``key``). The state lives in the
    optimizer's ``OptState`` variables; a rule says which, in what order, and how a step
    changes them:

    - ``key()``: hashable; equal keys share one compiled update (structure and static
      options, never option values).
    - ``build()``: make the optimizer's state at construction (``Optimizer.__init__``).
    - ``variables()``: every state variable a step reads and writes, in ``update``'s order.
    - ``items()``: the state dict's ``(key, variable)`` pairs besides ``step_count`` and the
      group options.
    - ``init(arrays, key)``: pure, the state of the parameters ``arrays`` (compiled as a
      :class:`Program` whose key ends with ``key``).
    - ``update(params, grads, values)``: pure, one step: trainable parameters, their
      gradients and the values of ``variables()`` in, their new values out.
    - ``adapt(now, flipped)``: eagerly, after ``requires_grad`` changed (``flipped`` names
      the parameters).
    - ``groups``: the optimizer whose ``param_groups`` the state dict saves.

    The defaults here are the shell's layout: ``step_count``, the group arrays, then the
    per-parameter variables ``optimizer._state`` keyed ``optimizer._keys``.
    """

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = optimizer
        self.groups: Optimizer = optimizer

    @abstractmethod
    def key(self) -> Hashable: ...

    @abstractmethod
    def build(self) -> None: ...

    @abstractmethod
    def init(self, arrays: list, key: Any) -> Any: ...

    @abstractmethod
    def update(self, params: list, grads: list, values: list) -> tuple[list, list]: ...

    @abstractmethod
    def adapt(self, now: tuple[bool, ...], flipped: list[str]) -> None: ...

    def variables(self) -> list[OptState]:
        o = self.optimizer
        return [o._step_count, *(v for group in o._hyper for v in group), *o._state]

    def items(self) -> list[tuple[str, OptState]]:
        o = self.optimizer
        return list(zip(o._keys, o._state, strict=True))


class PerParameter(Rule):
    """The default rule: the optimizer's ``init`` and ``update`` on each trainable parameter,
    its state one ``OptState`` per field and parameter (``'<name>.<field>.<path>'``)."""

    def key(self) -> Hashable:
        o = self.optimizer
        return (type(o), o._host, o._slots)

    def build(self) -> None:
        """Per-parameter state of every trainable parameter, on its parameter's sharding."""
        o = self.optimizer
        indices = [i for i, t in enumerate(o._trainable) if t]
        fresh = dict(zip(indices, o._init_states(indices), strict=True))
        o._slots, o._keys, state = state_slots(o.name, o.params.paths, fresh, {})
        o._state = nnx.data(state)

    def init(self, arrays: list, key: tuple[int, ...]) -> list[dict]:
        o = self.optimizer
        groups = [o._host.groups[o._group_of[i]]._values for i in key]
        return [dict(o.init(a, g)) for a, g in zip(arrays, groups, strict=True)]

    def update(self, params: list, grads: list, values: list) -> tuple[list, list]:
        o = self.optimizer
        count, *rest = values
        hypers, state = o._hyper_values(rest, count)
        step = count + 1
        per_param: dict[int, dict] = {}
        for (i, field), value in zip(o._slots, state, strict=True):
            per_param.setdefault(i, {})[field] = value
        views = [o._view(group) for group in o._host.groups]
        trainable = [i for i, t in enumerate(o._trainable) if t]
        new_params, new_state = [], {}
        for i, param, grad in zip(trainable, params, grads, strict=True):
            group = o._group_of[i]
            old = per_param.get(i, {})
            new, fields = o.update(param, grad, dict(old), hypers[group], step, views[group])
            new_params.append(jnp.asarray(new).astype(param.dtype))
            for field, value in old.items():
                new_state[i, field] = jnp.asarray(fields[field]).astype(value.dtype)
        flat = [new_state[slot] for slot in o._slots]
        return new_params, [step, *rest[: len(rest) - len(state)], *flat]

    def adapt(self, now: tuple[bool, ...], flipped: list[str]) -> None:
        """Zero state for newly trainable parameters, state dropped for newly frozen ones (a
        structure change: the next compiled step traces anew)."""
        o = self.optimizer
        kept = zip(o._slots, zip(o._keys, o._state, strict=True), strict=True)
        new = [i for i, t in enumerate(now) if t and not o._trainable[i]]
        o._trainable = now
        fresh = dict(zip(new, o._init_states(new), strict=True))
        kept = {slot: held for slot, held in kept if now[slot[0]]}
        o._slots, o._keys, state = state_slots(o.name, o.params.paths, fresh, kept)
        o._state = nnx.data(state)
        o._rekey()
