"""The compiled programs of the optimizer shell (``_Program``, the update and the state's
initialisation, placed as the parameters) and the checks of parameters and groups.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING

import jax
from jax.sharding import NamedSharding, PartitionSpec

import js
from js._checks import sharding_of

if TYPE_CHECKING:
    from ._optimizer import Optimizer


class _Program:
    """The static argument of the eager update: equal for optimizers of one structure, so that
    they share one compiled program; holds the optimizer weakly (a cache entry must not keep a
    model's arrays alive)."""

    __slots__ = ("key", "ref")

    def __init__(self, optimizer: Optimizer, key: Hashable):
        self.key = key
        self.ref = weakref.ref(optimizer)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Program) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)


def _run_pure(program: _Program, params: list, grads: list, values: list):
    optimizer = program.ref()
    assert optimizer is not None  # the optimizer being stepped holds the only call
    return optimizer._pure(params, grads, values)


# Eagerly, one compiled program per optimizer structure (hyperparameters are arguments).
# Inside a trace (js.jit) the step is inlined instead: a nested jit would add a call to the
# program and trace it apart, for the same operations.
_apply = jax.jit(_run_pure, static_argnums=0)


def _run_init(program: _Program, arrays: list):
    optimizer = program.ref()
    assert optimizer is not None
    key = program.key
    assert isinstance(key, tuple)  # (..., parameter indices): see _init_states
    return optimizer._init_pure(arrays, key[-1])


# One compiled init per structure, option values and parameter shapes: an eager init compiles
# one program per zeros_like shape (0.3 s for the digits CNN's Adam in a fresh process).
_init = jax.jit(_run_init, static_argnums=0)


def _placed_init(program: _Program, arrays: list):
    """``fn(arrays)`` (state shaped like the parameters), every array on its parameter's
    sharding.

    On one device this is one jitted call (eager under a trace). On a mesh (``js.shard``) the
    state is built under ``jax.jit`` with out-shardings: each leaf of entry ``i`` shaped like
    parameter ``i`` takes that parameter's sharding, the rest are replicated, so a sharded
    model never materialises whole moments.
    """

    def fn(arrays):
        return _run_init(program, arrays)

    shardings = [sharding_of(a) for a in arrays]
    if any(s is None for s in shardings):  # traced (or not JAX) parameters
        return fn(arrays)
    named = [s for s in shardings if isinstance(s, NamedSharding)]
    if len(named) < len(shardings):
        return _init(program, arrays)
    replicated = NamedSharding(named[0].mesh, PartitionSpec())
    abstract = jax.eval_shape(fn, arrays)
    out = [
        jax.tree.map(
            lambda leaf, i=i: named[i] if leaf.shape == arrays[i].shape else replicated, entry
        )
        for i, entry in enumerate(abstract)
    ]
    return jax.jit(fn, out_shardings=out)(arrays)


def _moved(built, now, value) -> str | None:
    """How a parameter's placement changed since the optimizer was built (None: it did not)."""
    if built is None or now is None or now.is_equivalent_to(built, value.ndim):
        return None
    if built.device_set != now.device_set:
        return (
            f"built for {_show_devices(frozenset(built.device_set))}, now on "
            f"{_show_devices(frozenset(now.device_set))}"
        )
    return f"built for {_show_sharding(built)}, now on {_show_sharding(now)}"


def _show_sharding(sharding) -> str:
    return str(sharding.spec) if isinstance(sharding, NamedSharding) else repr(sharding)


def _show_devices(devices: frozenset) -> str:
    shown = [repr(d) for d in sorted(devices, key=lambda d: (d.platform, d.id))]
    return shown[0] if len(shown) == 1 else f"[{', '.join(shown)}]"


def _requires_grad(param) -> bool:
    return bool(getattr(param, "requires_grad", True))


_OLD_FORM = (
    "{name}(params, tx, ...) was js-optim 0.1's way to wrap an optax transform; the "
    "Optimizer base class now takes (params, defaults) and subclasses define init/update. "
    "Fix: js.optim.Optax(params, tx, key=...) for a raw optax transform (same state), or "
    "subclass js.optim.Optimizer as docs/optim.md shows."
)


def _named_pairs(owner: str, where: str, params) -> tuple[list, tuple]:
    """``(named, grad_paths)`` of one group's ``params``: a ParameterSelection (of the model or
    of a submodule), ``(path, Parameter)`` pairs, or Parameters (path None: found at the step)."""
    if isinstance(params, js.ParameterSelection):
        return params.named(), params.grad_paths
    if isinstance(params, (str, bytes, Mapping)) or not isinstance(params, Iterable):
        items = None
    else:
        items = list(params)
    if items is not None and all(isinstance(item, js.Parameter) for item in items):
        return [(None, item) for item in items], tuple(None for _ in items)
    if items is None or not all(
        isinstance(item, tuple)
        and len(item) == 2
        and isinstance(item[0], str)
        and isinstance(item[1], js.Parameter)
        for item in items
    ):
        raise TypeError(
            f"{owner}: {where} must be the selection model.parameters() returns (of the model or "
            "a submodule), a list of Parameters, or a list of (path, Parameter) pairs (as "
            f"model.named_parameters() yields), got {type(params).__name__}. Fix: "
            f"{owner}(model.parameters(), ...) or [{{'params': model.parameters(), ...}}]"
        )
    return items, tuple(path for path, _ in items)
