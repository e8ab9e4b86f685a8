"""Group options on the host, written between steps, and the state dict's load.

Each group's numeric options live twice (see ``_optimizer``): as Python values in
``param_groups`` and as float32 arrays in the optimizer's state. A write here checks the new
value (the same checks as at construction), refuses what would change the compiled update's
shape (a static option, a schedule ``lr``, new state fields) with the fix, stores the value and
rewrites the group's arrays: the next step uses it without compiling again. A state dict holds
the numeric options as ``'param_groups.<i>.<option>'`` (float64) and a load writes them the
same way, after checking all of them first.

The optimizer is reached through ``OptionOwner`` and ``Saved`` (the base class provides them);
this module imports no other module of js.optim but the leaf ``_param_group``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, ClassVar, Protocol

import numpy as np

import js
from js._checks import compare_state

from ._param_group import Host, option_array, option_value, put_scalars


class OptionOwner(Protocol):
    """What writing and loading options needs of an optimizer."""

    static: ClassVar[tuple[str, ...]]
    params: js.ParameterSelection
    _host: Host
    _dtype: np.dtype
    _hyper: Any  # per group, a tuple holding the OptState of its numbers (one vector) or ()
    _scalar_names: tuple[tuple[str, ...], ...]
    _fields: tuple[tuple[str, ...], ...]

    def flags(self, group: Mapping[str, Any]) -> dict[str, Hashable]: ...

    def _check_group(self, owner: str, values: Mapping[str, Any]) -> None: ...

    def _scalars_of(self, values: Mapping[str, Any]) -> dict[str, float]: ...

    def _fields_of(self, values: Mapping[str, Any], example: Any = None) -> tuple[str, ...]: ...

    def _numeric(self, values: Mapping[str, Any]) -> list[str]: ...

    def _rekey(self) -> None: ...


def write_option(owner: OptionOwner, index: int, key: str, value: Any) -> None:
    """``param_groups[index][key] = value``: refused with the fix, or checked, stored on the
    host and mirrored into the group's arrays (a changed flag compiles the update once more)."""
    cls = type(owner).__name__
    where = f"param_groups[{index}][{key!r}]"
    group = owner._host.groups[index]
    if key == "params":
        raise ValueError(
            f"{cls}: {where} cannot be replaced (the optimizer's state is built for its "
            "parameters). Fix: build a new optimizer with the new groups."
        )
    if key not in owner._host.defaults:  # an extra key (a scheduler's "initial_lr"): host only
        group._values[key] = value
        return
    old = group._values[key]
    if key in owner.static:
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
    check_write(owner, index, candidate, structure=key != "lr")
    flags = owner.flags(group._values)
    group._values[key] = candidate[key]
    write_scalars(owner, index)
    if owner.flags(candidate) != flags:  # e.g. weight decay from 0: the program changes
        owner._rekey()


def check_write(owner: OptionOwner, index: int, values: dict, *, structure: bool) -> None:
    """A candidate group's options: the checks, then that the update keeps its shape."""
    cls = type(owner).__name__
    owner._check_group(f"{cls} param_groups[{index}]", values)
    if tuple(owner._scalars_of(values)) != owner._scalar_names[index]:
        raise ValueError(
            f"{cls}: param_groups[{index}]: these options change the numbers the update "
            "reads. Fix: build a new optimizer with them."
        )
    if structure:
        group = owner._host.groups[index]
        first = next((owner.params.variables[i].value for i in group._indices), None)
        fields = owner._fields_of(values, first)
        if fields != owner._fields[index]:
            changed = ", ".join(
                f"{k}={values[k]!r}" for k in values if values[k] is not group._values.get(k)
            )
            raise ValueError(
                f"{cls}: param_groups[{index}]: {changed} changes the state the optimizer "
                f"keeps per parameter (fields {list(owner._fields[index])} -> {list(fields)}). "
                "Fix: build a new optimizer with it."
            )


def write_scalars(owner: OptionOwner, index: int) -> None:
    """The group's arrays in the state, from its host values (one transfer, nothing compiled)."""
    scalars = owner._scalars_of(owner._host.groups[index]._values)
    variables = owner._hyper[index]
    like = variables[0].value if variables else None
    arrays = put_scalars(list(scalars.values()), like, owner._dtype)
    for variable, array in zip(variables, arrays, strict=True):
        variable.value = array


def option_arrays(owner: OptionOwner) -> dict[str, np.ndarray]:
    """``{'param_groups.<i>.<option>': float64 array}`` of every group's numeric options."""
    out = {}
    for index, group in enumerate(owner._host.groups):
        for key in owner._numeric(group._values):
            out[f"param_groups.{index}.{key}"] = option_array(group._values[key])
    return out


def loaded_options(
    owner: OptionOwner, arrays: Mapping[str, Any], options: Mapping[str, Any], problems: list
) -> list[dict]:
    """Each group's options as ``arrays`` (a state dict) sets them, checked as a write is:
    the refusals are appended to ``problems``, nothing is stored."""
    candidates = []
    for index, group in enumerate(owner._host.groups):
        values = dict(group._values)
        for key in owner._numeric(values):
            name = f"param_groups.{index}.{key}"
            if name in arrays and arrays[name].shape == options[name].shape:
                values[key] = option_value(arrays[name], values[key])
        try:
            check_write(owner, index, values, structure=True)
        except (TypeError, ValueError) as error:
            problems.append(str(error))
        candidates.append(values)
    return candidates


def store_options(owner: OptionOwner, candidates: list[dict]) -> None:
    """Store checked options (from :func:`loaded_options`) on the host and in the arrays."""
    flags = [owner.flags(group._values) for group in owner._host.groups]
    for index, (group, values) in enumerate(zip(owner._host.groups, candidates, strict=True)):
        group._values.update(values)
        write_scalars(owner, index)
    if flags != [owner.flags(group._values) for group in owner._host.groups]:
        owner._rekey()


class Saved(Protocol):
    """What a state dict reads and writes of an optimizer (the base class, from its rule)."""

    _step_count: Any  # the OptState of step_count

    def _state_items(self) -> list[tuple[str, Any]]: ...

    def _groups_owner(self) -> OptionOwner: ...


def load_state(optimizer: Saved, state_dict: Mapping[str, Any]) -> None:
    """``optimizer.load_state_dict(state_dict)``: every key, shape, dtype and option checked
    first, one error listing every problem, then the arrays placed and the options stored."""
    cls = type(optimizer).__name__
    targets = {"step_count": optimizer._step_count, **dict(optimizer._state_items())}
    options = option_arrays(optimizer._groups_owner())
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
    owner = optimizer._groups_owner()
    candidates = loaded_options(owner, arrays, options, problems)
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
    store_options(owner, candidates)
