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

import inspect
from collections import Counter
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
from js._checks import compare_state, flatten_state, sharding_of

from ._param_group import (
    OptState,
    ParamGroup,
    _ById,
    _check_lr,
    _default_float,
    _GroupView,
    _hashable,
    _Host,
    _option_array,
    _option_value,
    _put_scalars,
)
from ._paths import resolve
from ._program import (
    _OLD_FORM,
    _apply,
    _moved,
    _named_pairs,
    _placed_init,
    _Program,
    _requires_grad,
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _show_signature(cls)

    def __init__(self, params: Any, defaults: Any, *old_args: Any, **old_kwargs: Any) -> None:
        cls = type(self).__name__
        if (
            old_args
            or old_kwargs
            or isinstance(defaults, optax.GradientTransformation)
            or (hasattr(defaults, "init") and hasattr(defaults, "update"))
        ):
            raise TypeError(_OLD_FORM.format(name=cls))
        if type(self).update is Optimizer.update and not isinstance(self, _Custom):
            raise TypeError(
                f"{cls}: the Optimizer base class has no update rule. Fix: use SGD, Adam, "
                "AdamW, ..., subclass it with init/update, or js.optim.Optax(params, tx)."
            )
        if not isinstance(defaults, Mapping) or "params" in defaults:
            raise TypeError(f"{cls}: defaults must be a dict of options (without 'params')")
        defaults = dict(defaults)
        selection, groups = self._parse_groups(cls, params, defaults)
        self.params = selection
        self._dtype = _default_float()
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
            index
            for i in range(len(selection))
            for index, (idx, _) in enumerate(groups)
            if i in idx
        )
        self._host = _Host(host_groups, defaults, None)
        self._trainable = tuple(_requires_grad(p) for p in selection)
        self._set_scalars(arrays[0] if arrays else None)
        self._build_state()
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

    # -- construction ----------------------------------------------------------------------------

    def _parse_groups(self, cls: str, params, defaults: dict):
        """``(selection over every group, [(indices, options), ...])``, checked."""
        if isinstance(params, js.ParameterSelection):
            raw = [{"params": params}]
        elif (
            isinstance(params, (list, tuple))
            and params
            and all(isinstance(g, Mapping) for g in params)
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
            named, gpaths = _named_pairs(
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
            for key in self.static:
                if key in values and not _hashable(values[key]):
                    raise TypeError(f"{owner}: the static option {key} must be hashable")
            self._check_group(owner, values)
            groups.append((tuple(indices), values))
        # Gradients are found under these paths, or else at each step by _paths.resolve: a
        # Parameter given without a path, or two under one path (submodule selections), make
        # the step search from the start. State-dict keys: the path, or with the group's
        # index when two share it ('param_groups.1.weight'), or its place ('param_groups.0.2').
        counts = Counter(path for _, path, _, _ in entries)
        self._sources = tuple(None if path is None else gpath for _, path, gpath, _ in entries)
        self._search = any(path is None or counts[path] > 1 for _, path, _, _ in entries)
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
        return selection, groups

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
                _check_lr(values["lr"])
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
            _ById(lr) if callable(lr) else None,
            self._scalar_names[index],
            self._fields[index],
        )

    def _rekey(self) -> None:
        """Recompute the structure key after a structural change (build, freezing)."""
        groups = tuple(self._group_key(i) for i in range(len(self._host.groups)))
        self._host = _Host(self._host.groups, self._host.defaults, (groups, self._trainable))

    def _fields_of(self, values: Mapping[str, Any], example=None) -> tuple[str, ...]:
        example = jax.ShapeDtypeStruct((1,), self._dtype) if example is None else example
        shapes = jax.eval_shape(lambda p: self.init(p, values), example)
        return tuple(shapes)

    def _set_scalars(self, like) -> None:
        """The group arrays (scalars + a float lr), made from the host values."""
        names, variables, fields = [], [], []
        for group in self._host.groups:
            values = group._values
            scalars = self._scalars_of(values)
            names.append(tuple(scalars))
            arrays = _put_scalars(list(scalars.values()), like, self._dtype)
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

    def _build_state(self) -> None:
        """Per-parameter state of every trainable parameter, on its parameter's sharding."""
        indices = [i for i, t in enumerate(self._trainable) if t]
        states = self._init_states(indices)
        keys, slots, variables = [], [], []
        for i, state in zip(indices, states, strict=True):
            for field, value in state.items():
                keys.append(f"{self.name}.{field}.{self.params.paths[i]}")
                slots.append((i, field))
                variables.append(OptState(value))
        self._keys = tuple(keys)
        self._slots = tuple(slots)
        self._state = nnx.data(tuple(variables))

    def _init_states(self, indices: list[int]) -> list[dict]:
        variables = self.params.variables
        arrays = [variables[i].value for i in indices]
        numbers = tuple(
            tuple((k, _freeze(g._values.get(k))) for k in self._host.defaults)
            for g in self._host.groups
        )
        if not indices:
            return []
        program = _Program(self, (type(self), self._host.key, numbers, tuple(indices)))
        return _placed_init(program, arrays)

    def _init_pure(self, arrays: list, indices: tuple[int, ...]) -> list[dict]:
        groups = [self._host.groups[self._group_of[i]]._values for i in indices]
        return [dict(self.init(a, g)) for a, g in zip(arrays, groups, strict=True)]

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
        return [path for path, p in self.params.named() if not _requires_grad(p)]

    @property
    def step_count(self) -> jax.Array:
        """How many times :meth:`step` ran: an int32 scalar (traced inside ``js.jit``)."""
        return self._step_count.value

    # -- writing options -------------------------------------------------------------------------

    def _write_option(self, index: int, key: str, value: Any) -> None:
        cls = type(self).__name__
        where = f"param_groups[{index}][{key!r}]"
        group = self._host.groups[index]
        if key == "params":
            raise ValueError(
                f"{cls}: {where} cannot be replaced (the optimizer's state is built for its "
                "parameters). Fix: build a new optimizer with the new groups."
            )
        if key not in self._host.defaults:  # an extra key (a scheduler's "initial_lr"): host only
            group._values[key] = value
            return
        old = group._values[key]
        if key in self.static:
            if value == old and type(value) is type(old):
                return
            raise ValueError(
                f"{cls}: {where} is a static option (it shapes the compiled update), fixed "
                f"at {old!r} when the optimizer was built. Fix: build a new optimizer with "
                f"{key}={value!r}."
            )
        if key == "lr" and (callable(old) or callable(value)):
            if value is old:
                return
            raise ValueError(
                f"{cls}: {where} = {value!r} refused: the group was built with "
                f"{'a schedule' if callable(old) else 'a float'} lr, and a schedule is part of "
                "the compiled update. Fix: build the optimizer with a float lr to write rates "
                "from the host (a torch-style scheduler), or with the schedule to trace it."
            )
        candidate = dict(group._values)
        candidate[key] = tuple(value) if isinstance(value, list) else value
        self._check_write(index, candidate, structure=key != "lr")
        flags = self.flags(group._values)
        group._values[key] = candidate[key]
        self._write_scalars(index)
        if self.flags(candidate) != flags:  # e.g. weight decay from 0: the program changes
            self._rekey()

    def _check_write(self, index: int, values: dict, *, structure: bool) -> None:
        """A candidate group's options: the checks, then that the update keeps its shape."""
        cls = type(self).__name__
        self._check_group(f"{cls} param_groups[{index}]", values)
        if tuple(self._scalars_of(values)) != self._scalar_names[index]:
            raise ValueError(
                f"{cls}: param_groups[{index}]: these options change the numbers the update "
                "reads. Fix: build a new optimizer with them."
            )
        if structure:
            group = self._host.groups[index]
            first = next((self.params.variables[i].value for i in group._indices), None)
            fields = self._fields_of(values, first)
            if fields != self._fields[index]:
                changed = ", ".join(
                    f"{k}={values[k]!r}" for k in values if values[k] is not group._values.get(k)
                )
                raise ValueError(
                    f"{cls}: param_groups[{index}]: {changed} changes the state the optimizer "
                    f"keeps per parameter (fields {list(self._fields[index])} -> {list(fields)}). "
                    "Fix: build a new optimizer with it."
                )

    def _write_scalars(self, index: int) -> None:
        scalars = self._scalars_of(self._host.groups[index]._values)
        variables = self._hyper[index]
        like = variables[0].value if variables else None
        arrays = _put_scalars(list(scalars.values()), like, self._dtype)
        for variable, array in zip(variables, arrays, strict=True):
            variable.value = array

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
        state = self._variables()
        values = [variable.value for variable in state]
        if traced:
            new_params, new_values = self._pure(params, matched, values)
        else:
            new_params, new_values = _apply(
                _Program(self, self._program_key()), params, matched, values
            )
        for i, value in zip(trainable, new_params, strict=True):
            variables[i].value = value
        for variable, value in zip(state, new_values, strict=True):
            variable.value = value

    def _program_key(self) -> Hashable:
        return (type(self), self._host, self._slots)

    def _variables(self) -> list[OptState]:
        """Every state variable a step reads and writes, in the order of :meth:`_pure`."""
        return [self._step_count, *(v for group in self._hyper for v in group), *self._state]

    def _hyper_values(self, values: list, count) -> tuple[list[dict], list]:
        """The group dicts ``h`` from the flat values (a schedule evaluated at ``count``),
        and the rest of the values."""
        hypers, at = [], 0
        for index, group in enumerate(self._host.groups):
            names = self._scalar_names[index]
            h = dict(zip(names, values[at : at + len(names)], strict=True))
            at += len(names)
            lr = group._values.get("lr")
            if callable(lr):
                h["lr"] = jnp.asarray(lr(count), self._dtype)
            hypers.append(h)
        return hypers, values[at:]

    def _pure(self, params: list, grads: list, values: list) -> tuple[list, list]:
        """One update, pure: trainable parameters and gradients, the state values of
        :meth:`_variables`; returns their new values."""
        count, *rest = values
        hypers, state = self._hyper_values(rest, count)
        step = count + 1
        per_param: dict[int, dict] = {}
        for (i, field), value in zip(self._slots, state, strict=True):
            per_param.setdefault(i, {})[field] = value
        views = [self._view(group) for group in self._host.groups]
        trainable = [i for i, t in enumerate(self._trainable) if t]
        new_params, new_state = [], {}
        for i, param, grad in zip(trainable, params, grads, strict=True):
            group = self._group_of[i]
            old = per_param.get(i, {})
            new, fields = self.update(param, grad, dict(old), hypers[group], step, views[group])
            new_params.append(jnp.asarray(new).astype(param.dtype))
            for field, value in old.items():
                new_state[i, field] = jnp.asarray(fields[field]).astype(value.dtype)
        flat = [new_state[slot] for slot in self._slots]
        return new_params, [step, *rest[: len(rest) - len(state)], *flat]

    def _view(self, group: ParamGroup) -> _GroupView:
        values = group._values
        shown = {k: values[k] for k in self.static if k in values}
        shown.update(self.flags(values))
        if callable(values.get("lr")):
            shown["lr"] = values["lr"]
        return _GroupView(shown, type(self).__name__)

    def _match(self, grads: nnx.State | Mapping[str, Any]) -> list[jax.Array]:
        """Gradient arrays of the trainable parameters in order, after checking that ``grads``
        fits them (gradients of frozen parameters may be present and are ignored). Where the
        paths given do not find them (a submodule's selection, a list of Parameters), the
        gradients' paths and shapes do (``_paths``)."""
        if not self._search:
            try:
                return self.params.match(grads, expect=self._trainable)
            except ValueError as error:
                failed = str(error)
        else:
            failed = None
        flat = flatten_state(grads)
        shapes = [shape for _, shape, _, _ in self._built]
        groups = tuple(
            tuple((self._sources[i], shapes[i], self._trainable[i]) for i in group._indices)
            for group in self._host.groups
        )
        available = tuple((key, tuple(getattr(v, "shape", ()))) for key, v in flat.items())
        found = resolve(groups, available)
        if isinstance(found, str):
            cls = type(self).__name__
            raise ValueError(
                f"{cls}.step: {failed or 'gradients do not match the parameters'}; nor do the "
                f"gradients' paths place the groups: {found}. Fix: differentiate the model the "
                "groups' parameters come from, or give each group (path, Parameter) pairs of "
                "that model: [(n, p) for n, p in model.named_parameters() if "
                "n.startswith('base.')]."
            )
        keys: dict[int, str | None] = {}
        for group, group_keys in zip(self._host.groups, found, strict=True):
            keys.update(zip(group._indices, group_keys, strict=True))
        return [flat[keys[i]] for i, t in enumerate(self._trainable) if t]  # type: ignore[index]

    def _check_params(self) -> bool:
        """Shapes and dtypes (static: free inside compiled code), then the devices of concrete
        parameters, then ``requires_grad``. Returns whether the parameters are traced. Inside
        compiled code the program's inputs decide placement, so the device check only runs
        eagerly."""
        changed, moved = [], []
        traced = False
        for (path, shape, dtype, built), p in zip(self._built, self.params, strict=True):
            value = p.value
            traced = traced or isinstance(value, jax.core.Tracer)
            if value.shape != shape or value.dtype != dtype:
                changed.append(
                    f"{path!r}: built for {list(shape)} {dtype}, now {list(value.shape)} "
                    f"{np.dtype(value.dtype)}"
                )
            elif (how := _moved(built, sharding_of(value), value)) is not None:
                moved.append(f"{path!r}: {how}")
        cls = type(self).__name__
        if changed:
            raise ValueError(
                f"{cls}.step: parameters changed shape or dtype after the "
                f"optimizer was built: {'; '.join(changed)}. Fix: cast or reshape the model "
                "first, then build the optimizer from model.parameters()."
            )
        if moved:
            raise ValueError(
                f"{cls}.step: parameters moved to another device after the "
                f"optimizer was built (its state stays where they were): {'; '.join(moved)}. "
                "Fix: move the model first, then build the optimizer from model.parameters(), "
                "or put each parameter back with jax.device_put(value, device)."
            )
        now = tuple(_requires_grad(p) for p in self.params)
        if now != self._trainable:
            flipped = [
                f"{path!r} ({'frozen' if was else 'unfrozen'})"
                for path, was, is_ in zip(self.params.paths, self._trainable, now, strict=True)
                if was != is_
            ]
            if traced:
                raise ValueError(
                    f"{cls}.step: requires_grad changed since the optimizer's state was built: "
                    f"{', '.join(flipped)}; inside compiled code the optimizer cannot add or "
                    "drop state. Fix: take one step outside js.jit (it adapts the state), or "
                    "set requires_grad before building the optimizer."
                )
            self._adapt(now, flipped)
        return traced

    def _adapt(self, now: tuple[bool, ...], flipped: list[str]) -> None:
        """Eagerly, after requires_grad changed: zero state for newly trainable parameters,
        state dropped for newly frozen ones (a structure change: the next compiled step
        traces anew)."""
        kept = {slot: variable for slot, variable in zip(self._slots, self._state, strict=True)}
        keys = dict(zip(self._slots, self._keys, strict=True))
        new = [i for i, t in enumerate(now) if t and not self._trainable[i]]
        self._trainable = now
        fresh = dict(zip(new, self._init_states(new), strict=True))
        slots, names, variables = [], [], []
        for i, trainable in enumerate(now):
            if not trainable:
                continue
            if i in fresh:
                for field, value in fresh[i].items():
                    slots.append((i, field))
                    names.append(f"{self.name}.{field}.{self.params.paths[i]}")
                    variables.append(OptState(value))
            else:
                for slot in [s for s in self._slots if s[0] == i]:
                    slots.append(slot)
                    names.append(keys[slot])
                    variables.append(kept[slot])
        self._slots = tuple(slots)
        self._keys = tuple(names)
        self._state = nnx.data(tuple(variables))
        self._rekey()

    # -- state dicts -----------------------------------------------------------------------------

    def _state_items(self) -> list[tuple[str, OptState]]:
        """``(key, variable)`` of the state besides ``step_count`` and the group options."""
        return list(zip(self._keys, self._state, strict=True))

    def _groups_owner(self) -> Optimizer:
        """The optimizer whose ``param_groups`` the state dict saves (``Accumulate``'s inner)."""
        return self

    def _option_arrays(self) -> dict[str, np.ndarray]:
        owner = self._groups_owner()
        out = {}
        for index, group in enumerate(owner._host.groups):
            for key in owner._numeric(group._values):
                out[f"param_groups.{index}.{key}"] = _option_array(group._values[key])
        return out

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
        state.update(self._option_arrays())
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (the group options too), all or nothing: keys, shapes,
        dtypes and option values are checked first and one error lists every problem.

        A state dict saved by js-optim 0.1 (keys ``'adam.count'``, ``'lr.count'``, no
        ``'param_groups.*'``) loads too: its counters repeat ``'step_count'`` and are dropped,
        and the groups keep the options this optimizer was built with.
        """
        cls = type(self).__name__
        targets = {"step_count": self._step_count, **dict(self._state_items())}
        options = self._option_arrays()
        arrays = js.check_state_dict(state_dict, cls)
        if not any(key.startswith("param_groups.") for key in arrays) and any(
            key.endswith(".count") and key not in targets for key in arrays
        ):  # js-optim 0.1: its optax counters equal step_count; options as built
            arrays = {
                k: v for k, v in arrays.items() if not (k.endswith(".count") and k not in targets)
            }
            arrays.update(options)
        current: dict[str, Any] = {key: variable.value for key, variable in targets.items()}
        current.update(options)
        missing, unexpected, mismatched = compare_state(current, arrays)
        problems = [f"missing key {key!r}" for key in missing]
        problems += [f"unexpected key {key!r}" for key in unexpected] + mismatched
        owner = self._groups_owner()
        candidates = []
        for index, group in enumerate(owner._host.groups):
            values = dict(group._values)
            for key in owner._numeric(values):
                name = f"param_groups.{index}.{key}"
                if name in arrays and arrays[name].shape == options[name].shape:
                    values[key] = _option_value(arrays[name], values[key])
            try:
                owner._check_write(index, values, structure=True)
            except (TypeError, ValueError) as error:
                problems.append(str(error))
            candidates.append(values)
        if problems:
            raise ValueError(
                f"{cls}.load_state_dict failed; nothing was loaded.\n  "
                + "\n  ".join(problems)
                + "\nFix: load a state saved by the same optimizer over the same parameters."
            )
        # Each array goes where the optimizer's state lives (with its parameters), in a few
        # batched transfers (js.placed_like: one per sharding; NumPy values are copied).
        keys = list(targets)
        values = js.placed_like([arrays[k] for k in keys], [targets[k].value for k in keys])
        for key, value in zip(keys, values, strict=True):
            targets[key].value = value
        flags = [owner.flags(group._values) for group in owner._host.groups]
        for index, (group, values) in enumerate(zip(owner._host.groups, candidates, strict=True)):
            group._values.update(values)
            owner._write_scalars(index)
        if flags != [owner.flags(group._values) for group in owner._host.groups]:
            owner._rekey()

    def __repr__(self) -> str:
        groups = self.param_groups
        cls = type(self).__name__

        def shown(group: ParamGroup) -> str:
            return ", ".join(f"{k}={v!r}" for k, v in group._values.items())

        if len(groups) == 1:
            return f"{cls}({len(self.params)} parameters, {shown(groups[0])})"
        inner = "; ".join(f"[{len(g._indices)}: {shown(g)}]" for g in groups)
        return f"{cls}({len(self.params)} parameters in {len(groups)} groups: {inner})"


def _show_signature(cls: type) -> None:
    """``inspect.signature(cls)`` shows the constructor's parameters, as torch's classes do:
    flax's ``PytreeMeta.__call__`` stands in front of ``__init__`` and shows
    ``(*args, **kwargs)`` (notebooks, ``help()`` and config systems read the signature)."""
    init = inspect.signature(cls.__init__)
    cls.__signature__ = init.replace(parameters=list(init.parameters.values())[1:])


_show_signature(Optimizer)


def _freeze(value):
    """A hashable stand-in for an option value (a schedule by identity)."""
    if callable(value):
        return _ById(value)
    if isinstance(value, list):
        return tuple(value)
    return value if _hashable(value) else repr(value)


class _Custom:
    """Marks shell subclasses with their own stepping (Optax, Accumulate)."""
