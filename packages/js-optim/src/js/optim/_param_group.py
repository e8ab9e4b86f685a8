"""The host side of an optimizer: ``OptState``, the option helpers, ``ParamGroup`` (one entry
of ``param_groups``) and ``_Host`` (see ``_optimizer`` for how options live twice).
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Hashable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import js
from js._checks import check_number, sharding_of

if TYPE_CHECKING:
    from ._optimizer import Optimizer


class OptState(js.Buffer):
    """One array of optimizer state (a moment, a counter, a group's hyperparameter): threaded by
    ``js.jit``, never differentiated, saved by :meth:`Optimizer.state_dict`."""


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


class _ById:
    """A value compared by identity (a schedule: two equal-looking closures compute apart)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other) -> bool:
        return isinstance(other, _ById) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)

    def __repr__(self) -> str:
        return f"_ById({self.value!r})"


def _default_float() -> np.dtype:
    """float32, or float64 under ``jax_enable_x64``: the dtype of the group arrays."""
    return np.dtype(jnp.result_type(float))


def _put_scalars(values: list[float], like: jax.Array | None, dtype) -> list[jax.Array]:
    """Host numbers as 0-d device arrays: replicated on ``like``'s mesh when it is sharded by
    name, else uncommitted on the default device (a compiled step moves them beside the
    parameters). One transfer for the lot, nothing compiled."""
    host = [np.asarray(v, dtype) for v in values]
    sharding = sharding_of(like) if like is not None else None
    if isinstance(sharding, NamedSharding):
        return jax.device_put(host, NamedSharding(sharding.mesh, PartitionSpec()))
    return jax.device_put(host)


def _check_lr(lr) -> None:
    """A float ``lr`` >= 0 (``js._checks``' wording) or a schedule (any callable)."""
    if callable(lr):
        return
    if isinstance(lr, (bool, np.bool_)) or not isinstance(lr, numbers.Real):
        raise TypeError(
            f"lr must be a number >= 0 or a schedule (a callable of the step count), got {lr!r} "
            f"(a {type(lr).__name__}). Fix: pass a number, e.g. lr=0.001, or a schedule, e.g. "
            "lr=js.optim.cosine_schedule(0.001, total_steps)"
        )
    check_number("", "lr", lr, 0)


def _option_array(value) -> np.ndarray:
    """A numeric option as the float64 array its state-dict entry holds (betas: shape (2,))."""
    return np.array(value, np.float64, copy=True)


def _option_value(array: np.ndarray, like):
    """A state-dict entry back as the Python value of an option shaped like ``like``."""
    array = np.asarray(array, np.float64)
    if array.ndim == 0:
        return float(array)
    return tuple(float(x) for x in array.reshape(-1))


class _GroupView(Mapping):
    """The read-only group ``update`` sees: static options (and a schedule ``lr``) only."""

    __slots__ = ("_values", "_owner")

    def __init__(self, values: dict, owner: str):
        self._values = values
        self._owner = owner

    def __getitem__(self, key):
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(
                f"{self._owner}.update: group[{key!r}] is not a static option; numeric options "
                "reach update as arrays in h (from scalars()), so that writing them never "
                "recompiles. Fix: read h[...] (or add the option to the class's static)."
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class ParamGroup(MutableMapping):
    """One parameter group, as an entry of torch's ``optimizer.param_groups``.

    ``group["params"]`` lists the group's Parameters; every option of the optimizer is a key
    (``group["lr"]``, ``group["betas"]``, ...), and any other key a user or a scheduler adds
    (``"initial_lr"``) is kept on the host. Writing a numeric option checks it, recomputes the
    group's hyperparameter arrays and takes effect at the next ``step``, without compiling
    again. Static options (e.g. ``nesterov``, ``amsgrad``) and ``"params"`` cannot be written:
    build a new optimizer for those.
    """

    __slots__ = ("_owner", "_index", "_values", "_indices", "__weakref__")

    def __init__(self, owner: Optimizer, index: int, indices: tuple[int, ...], values: dict):
        self._owner = weakref.ref(owner)
        self._index = index
        self._indices = indices
        self._values = values

    def _optimizer(self) -> Optimizer:
        owner = self._owner()
        if owner is None:
            raise RuntimeError("this parameter group's optimizer no longer exists")
        return owner

    def __getitem__(self, key: str) -> Any:
        if key == "params":
            variables = self._optimizer().params.variables
            return [variables[i] for i in self._indices]
        return self._values[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._optimizer()._write_option(self._index, key, value)

    def __delitem__(self, key: str) -> None:
        if key == "params" or key in self._optimizer()._host.defaults:
            raise KeyError(
                f"param_groups[{self._index}][{key!r}] is an option of the optimizer and "
                "cannot be deleted. Fix: write another value instead."
            )
        del self._values[key]

    def __iter__(self) -> Iterator[str]:
        yield "params"
        yield from self._values

    def __len__(self) -> int:
        return 1 + len(self._values)

    @property
    def paths(self) -> tuple[str, ...]:
        """The dotted paths of this group's Parameters."""
        paths = self._optimizer().params.paths
        return tuple(paths[i] for i in self._indices)

    def __repr__(self) -> str:
        options = ", ".join(f"{key!r}: {value!r}" for key, value in self._values.items())
        return f"{{'params': <{len(self._indices)} parameters>, {options}}}"


class _Host:
    """The host side of an optimizer (its groups and defaults), held as one static attribute.

    Equality and hash see only ``key``, the structure (which parameters in which group, the
    static options, a schedule by identity): numeric option values are not part of the graph
    definition, so writing them never makes ``js.jit`` compile again.
    """

    __slots__ = ("groups", "defaults", "key", "_hash")

    def __init__(self, groups: list[ParamGroup], defaults: dict, key: Hashable):
        self.groups = groups
        self.defaults = defaults
        self.key = key
        self._hash = hash(key)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Host) and self.key == other.key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"_Host({len(self.groups)} groups)"
