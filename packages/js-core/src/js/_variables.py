"""State containers: Parameter, Buffer, the structure epoch, and tracked stateful objects.

A compiled step (``js.jit``) must notice any change of structure or mode between calls without
walking the object graph on every call. Every js stateful object therefore bumps one global
*structure epoch* whenever one of its attributes is assigned or deleted; ``js.jit`` re-reads the
graph only when the epoch has moved. Array updates (``param.value = ...``) are not structural and
do not bump it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ._checks import flatten_state
from ._signature import ConstructorSignature


class _Epoch:
    """A counter that moves on every structural edit of a js object."""

    __slots__ = ("value",)

    def __init__(self):
        self.value = 0

    def bump(self) -> None:
        self.value += 1


STRUCTURE_EPOCH = _Epoch()


class _Tracked:
    """Mixin for nnx graph nodes: assigning or deleting an attribute bumps the structure epoch."""

    def __setattr__(self, name, value):
        STRUCTURE_EPOCH.bump()
        super().__setattr__(name, value)

    def __delattr__(self, name):
        STRUCTURE_EPOCH.bump()
        super().__delattr__(name)


class Object(_Tracked, nnx.Pytree):
    """Base class for stateful objects that are not modules (optimizers, metric states).

    Attributes holding ``Parameter``, ``Buffer`` or other variables are state: ``js.jit`` reads
    and writes them like a module's. Other attributes are static configuration.
    """


def _as_array(value):
    if isinstance(value, jax.Array):  # first: isinstance against nnx.Variable costs microseconds
        return value
    if isinstance(value, nnx.Variable):
        raise TypeError(
            f"expected an array, got a {type(value).__name__}: pass `variable.value` to copy its "
            "array, or assign the variable itself to share it"
        )
    if isinstance(value, (np.ndarray, np.generic)):
        # A host-to-device copy: jnp.asarray would compile a program per shape on first use.
        return jax.device_put(_private(value))
    return value if isinstance(value, jax.Array) else jnp.asarray(value)


def _private(value):
    """A NumPy value copied, so that no one else can write the buffer the array is built on.

    XLA on the CPU adopts a suitably aligned host buffer instead of copying it (PyTorch's
    tensors are aligned): without the copy, ``load_torch_state_dict`` followed by a torch
    optimizer step on the same tensors would change the js model too.
    """
    return np.array(value, copy=True) if isinstance(value, (np.ndarray, np.generic)) else value


def check_state_dict(state_dict: Any, owner: str) -> dict[str, Any]:
    """``state_dict`` as ``{key: array}``, checked before any state changes: a non-mapping is a
    TypeError naming the argument, an entry that is not an array (a ragged list, an object) a
    TypeError naming the entry, as PyTorch's ``load_state_dict`` does. ``jax.Array`` values are
    kept as they are (a sharded array spanning other processes cannot become NumPy); anything
    else becomes a NumPy array. ``owner`` names the object in the errors (``'Adam'``).

    Every ``load_state_dict`` of js calls it first (Module, Rngs, and js-optim's optimizers).
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            f"{owner}.load_state_dict: state_dict must be a mapping {{key: array}}, got "
            f"{type(state_dict).__name__}; nothing was loaded. Fix: pass the dict that "
            "state_dict() returned (dict(pairs) for a list of (key, array) pairs)."
        )
    arrays, bad = {}, []
    for key, value in state_dict.items():
        if isinstance(value, (jax.Array, np.ndarray)):
            arrays[key] = value
            continue
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as error:
            bad.append(f"{key!r}: {type(value).__name__} ({error})")
            continue
        if array.dtype == object:
            bad.append(f"{key!r}: {type(value).__name__} is not an array of numbers")
        arrays[key] = array
    if bad:
        raise TypeError(
            f"{owner}.load_state_dict: entries that are not arrays; nothing was loaded.\n  "
            + "\n  ".join(bad)
            + "\nFix: give each entry as an array of the saved shape (e.g. from state_dict())."
        )
    return arrays


# A jitted identity copies host arrays to their devices for ~4 us each (the transfer happens
# in C++), where jax.device_put spends ~30 us of Python per array; it compiles once per
# sharding, shape, dtype and chunk, a few tens of milliseconds: worth it only for many arrays
# of one shape (10,000 small layers), and only for NumPy values on devices this process holds.
_CHUNK, _MANY = 32, 1024
_COPIES: dict = {}


def _copy_to(sharding):
    copy = _COPIES.get(sharding)
    if copy is None:
        copy = _COPIES[sharding] = jax.jit(
            lambda *arrays: arrays, in_shardings=sharding, out_shardings=sharding
        )
    return copy


def _put_group(values: list, sharding) -> list[jax.Array]:
    """``values`` (all bound for ``sharding``) on it: NumPy arrays of a shape and dtype shared
    by at least ``_MANY`` values in chunks through a jitted copy, the rest in one device_put."""
    by_kind: dict = {}
    if sharding.is_fully_addressable:
        for index, value in enumerate(values):
            if isinstance(value, np.ndarray):
                by_kind.setdefault((value.shape, value.dtype), []).append(index)
    placed: list = [None] * len(values)
    copy = _copy_to(sharding)
    for indices in by_kind.values():
        whole = len(indices) - len(indices) % _CHUNK if len(indices) >= _MANY else 0
        for start in range(0, whole, _CHUNK):
            chunk = indices[start : start + _CHUNK]
            for index, array in zip(chunk, copy(*[values[i] for i in chunk]), strict=True):
                placed[index] = array
    rest = [index for index, array in enumerate(placed) if array is None]
    moved = jax.device_put([_private(values[i]) for i in rest], sharding)
    for index, array in zip(rest, moved, strict=True):
        placed[index] = array
    return placed


def placed_like(values: list, currents: list) -> list[jax.Array]:
    """``values`` on the devices and shardings of ``currents``, so that a load never moves
    state off its mesh: how every ``load_state_dict`` of js places what it loads.

    A ``jax.Array`` already on its sharding is kept; a NumPy value is copied (never aliased,
    although XLA:CPU could adopt the caller's aligned buffer). The transfers are batched: one
    ``jax.device_put`` per distinct sharding, and for a thousand or more NumPy arrays of one
    shape and dtype a jitted copy in chunks (10,000 small arrays in a third of the time). A
    current value without a sharding (NumPy) gives an array on the default device.

    Args:
        values: the new arrays (NumPy or ``jax.Array``), checked against ``currents`` for
            shape and dtype by the caller.
        currents: the arrays they replace, in the same order.

    Example:
        >>> import jax.numpy as jnp, numpy as np, js
        >>> current = jnp.zeros(3)
        >>> [new] = js.placed_like([np.ones(3, np.float32)], [current])
        >>> new.sharding == current.sharding, new.tolist()
        (True, [1.0, 1.0, 1.0])
    """
    shardings = [getattr(current, "sharding", None) for current in currents]
    if any(sharding is None for sharding in shardings):
        return [_as_array(value) for value in values]
    # Grouped by sharding: given a list of 10,000 shardings, jax.device_put spends a third of
    # its time matching the list to the values; given one, none.
    groups: dict = {}
    for index, sharding in enumerate(shardings):
        groups.setdefault(sharding, []).append(index)
    placed: list = [None] * len(values)
    for sharding, indices in groups.items():
        moved = _put_group([values[i] for i in indices], sharding)
        for index, array in zip(indices, moved, strict=True):
            placed[index] = array
    return placed


# The mixin only ever sits before an nnx.Variable in a class's bases; the checker is told so.
_VariableBase = nnx.Variable if TYPE_CHECKING else object


class _ValueMixin(_VariableBase):
    """``.value`` as js's own property (flax 0.12 deprecates nnx's ``Variable.value``)."""

    # inspect.signature(cls) shows cls.__init__'s parameters, not flax's metaclass __call__.
    __signature__ = ConstructorSignature()

    def __init__(self, value: Any, **metadata: Any) -> None:
        super().__init__(_as_array(value), **metadata)

    @property
    def value(self) -> jax.Array:
        return self.get_raw_value()

    @value.setter
    def value(self, new_value) -> None:
        # Our variables carry no set-hooks and hold no array refs, so nnx's set_value (a tree
        # copy, hook and ref checks) reduces to this; the trace-level check stays.
        self.set_raw_value(_as_array(new_value))

    @property
    def data(self) -> _ValueMixin:
        """The variable itself, so that torch's ``nn.init.normal_(m.weight.data, ...)`` ports.

        PyTorch's ``.data`` is a tensor sharing the parameter's storage, written in place. JAX
        arrays are immutable, so the in-place initialisers (``js.nn.init``) take the variable
        and replace its array; ``.data`` hands them the variable. Assigning ``v.data = array``
        sets the array, as ``v.value = array`` does.
        """
        return self

    @data.setter
    def data(self, new_value) -> None:
        self.value = new_value

    def numel(self) -> int:
        """The number of elements: torch's ``Tensor.numel()`` (JAX's ``.size``, which a
        variable also has), so that ``sum(p.numel() for p in model.parameters())`` ports."""
        return int(self.get_raw_value().size)

    def dim(self) -> int:
        """The number of axes: torch's ``Tensor.dim()`` (JAX's ``.ndim``)."""
        return int(self.get_raw_value().ndim)

    def __repr__(self) -> str:
        raw = self.get_raw_value()
        shape = list(getattr(raw, "shape", ()))
        dtype = getattr(raw, "dtype", type(raw).__name__)
        return f"{type(self).__name__}(shape={shape}, dtype={dtype})"

    __str__ = __repr__


def _check_requires_grad(value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(
            f"requires_grad must be True or False, got {type(value).__name__} {value!r}"
        )
    return bool(value)


class Parameter(_ValueMixin, nnx.Param):
    """A differentiable array owned by a module.

    ``js.value_and_grad`` differentiates a module's trainable Parameters (and nothing else);
    optimizers update them. Read and write the array through ``.value``.

    ``requires_grad`` (PyTorch's name, default True) freezes a Parameter when False:
    ``js.value_and_grad``/``js.grad`` then compute no gradient for it (the compiled step has no
    backward pass into it, and the gradient state no entry), and js's optimizers keep no state
    for it. It stays module state: ``state_dict``, checkpoints and weight files carry it. The
    flag is variable metadata, so it survives ``js.jit``'s copies; changing it is a structure
    change: the next ``js.jit`` call traces again.

    Args:
        value: the array.
        requires_grad: whether gradients are computed for it.

    Example:
        >>> import jax.numpy as jnp, js
        >>> w = js.Parameter(jnp.zeros((2, 3)))
        >>> w.value.shape, w.requires_grad
        ((2, 3), True)
        >>> w.requires_grad = False
        >>> w
        Parameter(shape=[2, 3], dtype=float32, requires_grad=False)
    """

    def __init__(self, value: Any, requires_grad: bool = True, **metadata: Any) -> None:
        super().__init__(value, requires_grad=_check_requires_grad(requires_grad), **metadata)

    @property
    def requires_grad(self) -> bool:
        """Whether ``js.value_and_grad`` differentiates this Parameter (False: frozen)."""
        return bool(self.get_metadata("requires_grad", True))

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        value = _check_requires_grad(value)
        if value != self.requires_grad:
            self.set_metadata("requires_grad", value)
            STRUCTURE_EPOCH.bump()  # compiled steps must trace again: what they differentiate moved

    def requires_grad_(self, requires_grad: bool = True) -> Parameter:
        """Set :attr:`requires_grad` in place and return this Parameter, as PyTorch's
        ``Tensor.requires_grad_``."""
        self.requires_grad = requires_grad
        return self

    def __repr__(self) -> str:
        shown = super().__repr__()
        return shown if self.requires_grad else f"{shown[:-1]}, requires_grad=False)"

    __str__ = __repr__


class Buffer(_ValueMixin, nnx.Variable):
    """A non-differentiable array owned by a module (running statistics, counters).

    Buffers are updated in place by compiled steps, but never differentiated or touched by an
    optimizer. A persistent buffer (the default) is saved in ``state_dict``, weight files and
    checkpoints. With ``persistent=False`` (PyTorch's ``register_buffer(..., persistent=False)``)
    it is still module state (``js.jit`` threads it, ``named_buffers`` lists it) but it is
    neither saved nor expected by ``load_state_dict``: for arrays the constructor recomputes,
    such as rotary frequencies or a causal mask.

    Args:
        value: the array.
        persistent: whether ``state_dict`` (and so weight files and checkpoints) holds it.

    Example:
        >>> import jax.numpy as jnp, js
        >>> class Rope(js.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.inv_freq = js.Buffer(jnp.ones(4), persistent=False)
        ...         self.steps = js.Buffer(jnp.zeros((), jnp.int32))
        >>> list(Rope().state_dict()), [name for name, _ in Rope().named_buffers()]
        (['steps'], ['inv_freq', 'steps'])
    """

    def __init__(self, value: Any, persistent: bool = True, **metadata: Any) -> None:
        if not isinstance(persistent, (bool, np.bool_)):
            raise TypeError(
                f"Buffer persistent must be True or False, got {type(persistent).__name__} "
                f"{persistent!r}"
            )
        # Kept as variable metadata, so that it survives nnx.split/merge (js.jit's copies).
        super().__init__(value, persistent=bool(persistent), **metadata)

    @property
    def persistent(self) -> bool:
        """Whether ``state_dict`` holds this buffer (``False``: module state only)."""
        return bool(self.get_metadata("persistent", True))


class TrackedList(_Tracked, nnx.List):
    """An ``nnx.List`` whose edits bump the structure epoch."""


class ParameterSelection(Object):
    """A live, ordered selection of a module's Parameters, as ``module.parameters()`` returns.

    It holds the Parameter objects themselves, not copies: an optimizer built from it updates
    the module's arrays. Iterating yields Parameters (like PyTorch's ``parameters()``);
    :meth:`named` yields ``(path, Parameter)`` pairs.
    """

    def __init__(
        self, named: list[tuple[str, Parameter]], grad_paths: tuple[str, ...] | None = None
    ):
        self.paths = tuple(path for path, _ in named)
        # Where each Parameter sits in the gradient state of ``js.value_and_grad`` (NNX's
        # canonical path; it differs from ``paths`` only for a Parameter shared by two owners).
        self.grad_paths = self.paths if grad_paths is None else tuple(grad_paths)
        self.variables = TrackedList([param for _, param in named])

    def __iter__(self):
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.paths)

    def named(self) -> list[tuple[str, Parameter]]:
        return list(zip(self.paths, self.variables, strict=False))

    def match(
        self, grads: nnx.State | Mapping[str, Any], expect: Sequence[bool] | None = None
    ) -> list[jax.Array]:
        """Gradient arrays in this selection's order, after checking that ``grads`` fits it.

        ``grads`` is the state ``js.value_and_grad`` returns (or a ``{path: array}`` dict). Any
        missing, unexpected or misshapen entry is refused with a ValueError naming the first
        differing path. ``expect`` (one flag per Parameter; default all) says which Parameters
        need a gradient: the others (frozen ones) get no entry in the result, and a gradient
        given for one is ignored.
        """
        if not isinstance(grads, (nnx.State, Mapping)):
            raise TypeError(
                "expected gradients as the state js.value_and_grad returns or a dict, got "
                f"{type(grads).__name__}"
            )
        flat = flatten_state(grads)
        # A Parameter is found under NNX's gradient path or under its js path (they differ only
        # for a Parameter shared by two owners).
        keys = [g if g in flat else p for g, p in zip(self.grad_paths, self.paths, strict=True)]
        expect = [True] * len(keys) if expect is None else list(expect)
        out = []
        for key, path, param, wanted in zip(keys, self.paths, self.variables, expect, strict=True):
            if not wanted:
                continue
            if key not in flat:
                raise ValueError(
                    f"gradients do not match the parameters: no gradient for {path!r}. Fix: "
                    "differentiate the same module this optimizer was built from."
                )
            want, got = param.get_raw_value().shape, getattr(flat[key], "shape", ())
            if tuple(want) != tuple(got):
                raise ValueError(
                    f"gradients do not match the parameters: {path!r} expected shape "
                    f"{list(want)}, got {list(got)}"
                )
            out.append(flat[key])
        known = set(keys)
        extra = [key for key in flat if key not in known]
        if extra:
            raise ValueError(
                f"gradients do not match the parameters: unexpected gradient {extra[0]!r} "
                "(not among the parameters this optimizer was built from). Fix: differentiate "
                "the same module this optimizer was built from."
            )
        return out

    def __repr__(self) -> str:
        return f"ParameterSelection({list(self.paths)})"
