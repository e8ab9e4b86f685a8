"""Placing state and batches on a device mesh: ``js.shard`` and ``js.shard_batch``.

Built on JAX's own machinery: a ``jax.sharding.Mesh``, one ``NamedSharding`` per array, and
XLA's SPMD partitioner inside ``js.jit`` (which keeps every state array on the sharding it has,
see ``_stateful``). Nothing here is a scheme of js's own: a rule is a ``PartitionSpec``, and a
sharded parameter is an ordinary global ``jax.Array``.

Meshes need ``AxisType.Auto`` axes (the SPMD partitioner decides how each operation is split).
``jax.make_mesh`` makes ``Explicit`` axes by default since jax 0.10; with them some reshapes of
a batch-sharded array are refused by JAX (a max-pool's window reshape), so js refuses such a mesh
up front with the fix.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._checks import MeshAxisError, check_mesh
from ._module import Module
from ._rngs import Rngs
from ._variables import STRUCTURE_EPOCH, Buffer, Parameter

Rule = tuple[str, PartitionSpec]
# what js.shard places and returns (the same object)
_Placed = TypeVar("_Placed", bound=nnx.Module | Rngs)


def _state_of(obj) -> list[tuple[str, nnx.Variable, bool]]:
    """``(path, variable, ruled)`` for every array of ``obj``; ``ruled`` for those rules match.

    Parameters and Buffers carry their canonical dotted path (as ``named_parameters`` prints
    it); other variables (RNG keys and counters) their nnx path, always replicated."""
    named = {}
    if isinstance(obj, Module):
        named = {id(v): path for path, v in obj._named_variables((Parameter, Buffer))}
    state, seen = [], set()
    for path, variable in nnx.flatten(obj, with_paths=True)[1]:
        if isinstance(variable, nnx.Variable) and id(variable) not in seen:
            seen.add(id(variable))
            canonical = named.get(id(variable))
            state.append((canonical or ".".join(map(str, path)), variable, canonical is not None))
    return state


def _spec_problems(path: str, shape: tuple, spec: PartitionSpec, mesh: Mesh) -> list[str]:
    """What keeps ``spec`` from sharding an array of ``shape`` on ``mesh`` (axis names aside)."""
    if len(spec) > len(shape):
        return [
            f"{path!r} {list(shape)}: {spec} names {len(spec)} dimensions, the array has "
            f"{len(shape)}"
        ]
    problems = []
    for dim, (size, axes) in enumerate(zip(shape, spec, strict=False)):
        axes = () if axes is None else axes if isinstance(axes, tuple) else (axes,)
        parts = int(np.prod([mesh.shape[a] for a in axes]))
        if size % parts:
            problems.append(
                f"{path!r} {list(shape)}: dimension {dim} ({size}) is not divisible by "
                f"{'x'.join(map(repr, axes))} ({parts} devices)"
            )
    return problems


def _check_rule_axes(rules: Sequence[Rule], mesh: Mesh) -> None:
    unknown = []
    for pattern, spec in rules:
        unknown += [f"{pattern!r}: {a!r}" for a in _spec_axes(spec) if a not in mesh.axis_names]
    if unknown:
        raise MeshAxisError(
            f"js.shard: rules name axes that are not axes of the mesh ({list(mesh.axis_names)}): "
            f"{'; '.join(unknown)}. Fix: use the mesh's axis names in the PartitionSpecs."
        )
    repeated = []
    for pattern, spec in rules:
        axes = list(_spec_axes(spec))
        twice = sorted({a for a in axes if axes.count(a) > 1})
        if twice:
            repeated.append(f"{pattern!r}: {spec} uses {twice} more than once")
    if repeated:
        raise ValueError(
            f"js.shard: nothing was moved. A mesh axis can split only one dimension of an array: "
            f"{'; '.join(repeated)}. Fix: name each axis once per PartitionSpec, e.g. "
            "PartitionSpec('data', None)."
        )


def plan_placement(
    obj: Any, mesh: Mesh, rules: Sequence[Rule]
) -> list[tuple[nnx.Variable, PartitionSpec]]:
    """Every variable's spec, after checking every rule against every array (nothing moves).

    js.shard's planner; js-models' ``from_pretrained`` plans an abstract model with it before
    reading any tensor (part of js-core's interface to its siblings, see docs/versioning.md).
    """
    _check_rule_axes(rules, mesh)
    state = _state_of(obj)
    used, plan, problems = set(), [], []
    for path, variable, ruled in state:
        spec = PartitionSpec()
        for index, (pattern, rule_spec) in enumerate(rules if ruled else ()):
            if fnmatch.fnmatchcase(path, pattern):  # the first match wins
                used.add(index)
                spec = rule_spec
                break
        problems += _spec_problems(path, np.shape(variable.get_raw_value()), spec, mesh)
        plan.append((variable, spec))
    problems += [
        f"rule {p!r} matches no parameter or buffer"
        for i, (p, _) in enumerate(rules)
        if i not in used
    ]
    if problems:
        names = [path for path, _, ruled in state if ruled]
        raise ValueError(
            "js.shard: nothing was moved.\n  " + "\n  ".join(problems) + f"\nPaths: {names}. "
            "Fix: match the canonical paths (model.named_parameters()) with each rule, and "
            "shard only dimensions the mesh axes divide."
        )
    return plan


def _spec_axes(spec: PartitionSpec):
    for axes in spec:
        yield from (() if axes is None else axes if isinstance(axes, tuple) else (axes,))


def check_rules(rules: Sequence[Rule]) -> tuple[Rule, ...]:
    """``rules`` as a tuple, each checked to be a ``(pattern, PartitionSpec)`` pair."""
    rules = tuple(rules)
    for rule in rules:
        if not (
            isinstance(rule, tuple)
            and len(rule) == 2
            and isinstance(rule[0], str)
            and isinstance(rule[1], PartitionSpec)
        ):
            raise TypeError(
                f"js.shard: each rule is a (pattern, PartitionSpec) pair, got {rule!r}. Fix: "
                'rules=[("*.weight", PartitionSpec("data", None))]'
            )
    return rules


def place(value, sharding: NamedSharding):
    """``value`` as a global array on ``sharding`` (every process holds the whole ``value``)."""
    if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):  # a typed key: place its data
        impl = jax.random.key_impl(value)
        return jax.random.wrap_key_data(place(jax.random.key_data(value), sharding), impl=impl)
    if sharding.is_fully_addressable or not getattr(value, "is_fully_addressable", True):
        return jax.device_put(value, sharding)
    host = np.asarray(value)  # several processes: each builds its own shards from its copy
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def shard(
    obj: _Placed, mesh: Mesh, rules: Sequence[Rule] = (), *, batch_axis: str | None = None
) -> _Placed:
    """Place every array of a Module (or ``js.Rngs``) on ``mesh``, in place; returns ``obj``.

    ``rules`` are ``(pattern, PartitionSpec)`` pairs matched in order against each Parameter's
    and Buffer's canonical dotted path (``fnmatch``, as ``named_parameters()`` prints it); the
    first match wins, and unmatched arrays (RNG keys and counters too) are replicated. With no
    rules this is data-parallel placement. Every rule is checked first: a rule that matches
    nothing, an axis the mesh lacks, or a dimension the axis size does not divide is an error,
    and nothing moves. Shard the model before building its optimizer (the moments then live on
    their parameters' shardings); ``js.jit`` keeps every array where this put it.

    Args:
        obj: a ``js.Module`` (or any nnx Module) or ``js.Rngs``.
        mesh: a ``jax.sharding.Mesh`` whose axes are ``AxisType.Auto``.
        rules: e.g. ``[("*.weight", PartitionSpec("data", None))]`` (ZeRO-3/FSDP style) or
            ``[("*.up.weight", PartitionSpec("model", None))]`` (Megatron style).
        batch_axis: the mesh axis batches will be split over (``js.shard_batch``), checked
            here so that a misspelt name fails before anything moves.

    Example:
        >>> import jax, js
        >>> from jax.sharding import AxisType, PartitionSpec as P
        >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,))
        >>> model = js.shard(js.Module(), mesh, batch_axis="data")
    """
    if not isinstance(obj, (nnx.Module, Rngs)):
        hint = " (shard the model, then build the optimizer)" if not isinstance(obj, Module) else ""
        raise TypeError(
            f"js.shard places a Module or js.Rngs, got {type(obj).__name__}. Fix: pass the "
            f"model{hint}."
        )
    check_mesh("js.shard", mesh, batch_axis, name="batch_axis")
    plan = plan_placement(obj, mesh, check_rules(rules))
    for variable, spec in plan:
        variable.set_raw_value(place(variable.get_raw_value(), NamedSharding(mesh, spec)))
    STRUCTURE_EPOCH.bump()  # compiled steps lay their calls out anew, with the new shardings
    return obj


def shard_batch(batch: Any, mesh: Mesh, axis: str = "data") -> Any:
    """A pytree of host arrays as global arrays split over ``axis`` on their leading dimension.

    In a job of several processes each process passes its own slice of the global batch (its
    rows, in process order), as ``jax.make_array_from_process_local_data`` expects; the global
    leading size is then the local one times the number of processes.

    Args:
        batch: a pytree (tuple, dict) of arrays with a leading batch dimension.
        mesh: the mesh the model was placed on (``js.shard``).
        axis: the mesh axis the batch is split over.

    Shape:
        every leaf ``[B, ...]`` (``B`` local rows) -> a global ``[B * processes, ...]``.

    Example:
        >>> import jax, numpy as np, js
        >>> from jax.sharding import AxisType
        >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,))
        >>> x, y = js.shard_batch((np.zeros((4, 2)), np.zeros(4)), mesh)
        >>> x.sharding.spec
        P('data',)
    """
    check_mesh("js.shard_batch", mesh, axis)
    size, processes = mesh.shape[axis], jax.process_count()
    leaves, treedef = jax.tree_util.tree_flatten_with_path(batch)
    problems = []
    for path, leaf in leaves:
        shape = np.shape(leaf)
        if not shape or (shape[0] * processes) % size:
            rows = f"{shape[0] * processes} rows" if shape else "no leading dimension"
            problems.append(f"{jax.tree_util.keystr(path) or 'batch'} {list(shape)}: {rows}")
    if problems:
        raise ValueError(
            f"js.shard_batch: axis {axis!r} splits the batch over {size} devices, but "
            f"{'; '.join(problems)}. Fix: use a global batch size divisible by {size} (drop or "
            "pad the last batch)."
        )
    sharding = NamedSharding(mesh, PartitionSpec(axis))
    arrays = [_place_rows(leaf, sharding, processes) for _, leaf in leaves]
    return jax.tree_util.tree_unflatten(treedef, arrays)


def _place_rows(leaf, sharding: NamedSharding, processes: int):
    if isinstance(leaf, jax.Array) and leaf.sharding == sharding:  # already placed
        return leaf
    if processes == 1:
        return jax.device_put(leaf, sharding)
    return jax.make_array_from_process_local_data(sharding, np.asarray(leaf))
