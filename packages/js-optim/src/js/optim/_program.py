"""The compiled programs of the optimizer shell (``Program``, the update and the state's
initialisation, placed as the parameters) and the checks of parameters and groups.

A leaf: it imports no other module of js.optim; what it runs of an optimizer is the
``Programmed`` protocol.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from typing import Any, Protocol

import jax
import jax.core  # jax.core.Tracer below; pyright knows a submodule only once imported
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import js
from js._checks import sharding_of


class Programmed(Protocol):
    """What a :class:`Program` runs: an optimizer's pure update and state initialisation (the
    base ``Optimizer`` provides them, from its rule; this module needs nothing else of it)."""

    def _pure(self, params: list, grads: list, values: list, /) -> tuple[list, list]: ...

    def _init_pure(self, arrays: list, key: Any, /) -> Any: ...


class Program:
    """The static argument of the eager update: equal for optimizers of one structure, so that
    they share one compiled program; holds the optimizer weakly (a cache entry must not keep a
    model's arrays alive)."""

    __slots__ = ("key", "ref")

    def __init__(self, optimizer: Programmed, key: Hashable):
        self.key = key
        self.ref = weakref.ref(optimizer)

    def __eq__(self, other) -> bool:
        return isinstance(other, Program) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)


def run_pure(program: Program, params: list, grads: list, values: list):
    optimizer = program.ref()
    assert optimizer is not None  # the optimizer being stepped holds the only call
    return optimizer._pure(params, grads, values)


# Eagerly, one compiled program per optimizer structure (hyperparameters are arguments).
# Inside a trace (js.jit) the step is inlined instead: a nested jit would add a call to the
# program and trace it apart, for the same operations.
update_program = jax.jit(run_pure, static_argnums=0)


def run_init(program: Program, arrays: list):
    optimizer = program.ref()
    assert optimizer is not None
    key = program.key
    assert isinstance(key, tuple)  # (..., parameter indices): see _init_states
    return optimizer._init_pure(arrays, key[-1])


# One compiled init per structure, option values and parameter shapes: an eager init compiles
# one program per zeros_like shape (0.3 s for the digits CNN's Adam in a fresh process).
init_program = jax.jit(run_init, static_argnums=0)


def placed_init(program: Program, arrays: list):
    """``fn(arrays)`` (state shaped like the parameters), every array on its parameter's
    sharding.

    On one device this is one jitted call (eager under a trace). On a mesh (``js.shard``) the
    state is built under ``jax.jit`` with out-shardings: each leaf of entry ``i`` shaped like
    parameter ``i`` takes that parameter's sharding, the rest are replicated, so a sharded
    model never materialises whole moments.
    """

    def fn(arrays):
        return run_init(program, arrays)

    shardings = [sharding_of(a) for a in arrays]
    if any(s is None for s in shardings):  # traced (or not JAX) parameters
        return fn(arrays)
    named = [s for s in shardings if isinstance(s, NamedSharding)]
    if len(named) < len(shardings):
        return init_program(program, arrays)
    replicated = NamedSharding(named[0].mesh, PartitionSpec())
    abstract = jax.eval_shape(fn, arrays)
    out = [
        jax.tree.map(
            lambda leaf, i=i: named[i] if leaf.shape == arrays[i].shape else replicated, entry
        )
        for i, entry in enumerate(abstract)
    ]
    return jax.jit(fn, out_shardings=out)(arrays)


def placement_change(built, now, value) -> str | None:
    """How a parameter's placement changed since the optimizer was built (None: it did not)."""
    if built is None or now is None or now.is_equivalent_to(built, value.ndim):
        return None
    if built.device_set != now.device_set:
        return (
            f"built for {_show_devices(frozenset(built.device_set))}, now on "
            f"{_show_devices(frozenset(now.device_set))}"
        )
    return f"built for {_show_sharding(built)}, now on {_show_sharding(now)}"


def check_parameters(cls: str, built: tuple, selection: js.ParameterSelection) -> bool:
    """Refuse parameters cast, reshaped (static: free inside compiled code) or, when concrete,
    moved since the optimizer was built (``built``: its ``(path, shape, dtype, sharding)``);
    returns whether the parameters are traced. Inside compiled code the program's inputs
    decide placement, so the device check only runs eagerly."""
    changed, moved = [], []
    traced = False
    for (path, shape, dtype, sharding), p in zip(built, selection, strict=True):
        value = p.value
        traced = traced or isinstance(value, jax.core.Tracer)
        if value.shape != shape or value.dtype != dtype:
            changed.append(
                f"{path!r}: built for {list(shape)} {dtype}, now {list(value.shape)} "
                f"{np.dtype(value.dtype)}"
            )
        elif (how := placement_change(sharding, sharding_of(value), value)) is not None:
            moved.append(f"{path!r}: {how}")
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
    return traced


def flipped(cls: str, paths: tuple, was: tuple, now: tuple, traced: bool) -> list[str]:
    """The parameters whose ``requires_grad`` changed since the state was built, as
    ``"'path' (frozen)"``; refused inside compiled code (the state cannot change there)."""
    changed = [
        f"{path!r} ({'frozen' if before else 'unfrozen'})"
        for path, before, after in zip(paths, was, now, strict=True)
        if before != after
    ]
    if traced:
        raise ValueError(
            f"{cls}.step: requires_grad changed since the optimizer's state was built: "
            f"{', '.join(changed)}; inside compiled code the optimizer cannot add or "
            "drop state. Fix: take one step outside js.jit (it adapts the state), or "
            "set requires_grad before building the optimizer."
        )
    return changed


def _show_sharding(sharding) -> str:
    return str(sharding.spec) if isinstance(sharding, NamedSharding) else repr(sharding)


def _show_devices(devices: frozenset) -> str:
    shown = [repr(d) for d in sorted(devices, key=lambda d: (d.platform, d.id))]
    return shown[0] if len(shown) == 1 else f"[{', '.join(shown)}]"


def requires_grad(param) -> bool:
    return bool(getattr(param, "requires_grad", True))


OLD_FORM = (
    "{name}(params, tx, ...) was js-optim 0.1's way to wrap an optax transform; the "
    "Optimizer base class now takes (params, defaults) and subclasses define init/update. "
    "Fix: js.optim.Optax(params, tx, key=...) for a raw optax transform (same state), or "
    "subclass js.optim.Optimizer as docs/optim.md shows."
)
