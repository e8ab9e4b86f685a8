"""``Optax``: an optimizer from a raw optax transform, on the optimizer shell."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import jax
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

import js
from js._checks import sharding_of

from ._optimizer import Optimizer, Rule
from ._param_group import OptState, hashable
from ._program import Program, init_program

# -- a raw optax transform ----------------------------------------------------------------------


class Transform:
    """An optax transform with the equality of its static description, ``key``.

    ``key`` is a hashable description of everything the transform computes with: equal keys
    mean the same update, so the compiled programs of one optimizer serve another. ``key=None``,
    or a key that cannot be hashed, compares the transform itself, by identity.
    """

    __slots__ = ("tx", "key")

    def __init__(self, tx: optax.GradientTransformation, key=None):
        self.tx = tx
        self.key = ("transform", tx) if key is None or not hashable(key) else ("key", key)

    def __eq__(self, other) -> bool:
        return isinstance(other, Transform) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Transform({self.key[1]!r})"


def _key_name(path) -> str:
    """``'adam.mu.encoder.weight'`` from the optax key path of one state leaf (the parameters
    are a ``{path: array}`` dict, so a parameter's path is one dict key)."""
    parts = []
    for entry in path:
        if isinstance(entry, jax.tree_util.DictKey):
            parts.append(str(entry.key))
        elif isinstance(entry, jax.tree_util.GetAttrKey):
            parts.append(entry.name)
        elif isinstance(entry, jax.tree_util.SequenceKey):  # a chain's position
            parts.append(str(entry.idx))
        else:  # pragma: no cover - optax states are dicts, named tuples and tuples
            parts.append(str(entry))
    return ".".join(parts)


class Optax(Optimizer):
    """An optimizer from a raw optax ``GradientTransformation`` (learning rate included).

    One parameter group without options (``param_groups[0]`` holds only ``"params"``); the
    state is optax's, one ``OptState`` per leaf, keyed ``'<chain name>.<field>[.<path>]'``
    (``optax.named_chain`` names the prefixes). Hyperparameters are constants of the program:
    prefer the js classes (``SGD``, ``Adam``, ...) for rates written from the host.

    Args:
        params: ``model.parameters()``.
        tx: the optax transform computing the update, e.g. ``optax.lion(1e-4)``.
        key: a hashable description of ``tx`` (everything it computes with): optimizers with
            equal keys share compiled programs. None (the default) compares ``tx`` by
            identity, so each new optimizer compiles its own.

    Example:
        >>> import jax.numpy as jnp, js, optax
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = js.optim.Optax(model.parameters(), optax.sgd(0.1), key=("sgd", 0.1))
        >>> opt.step({"w": jnp.ones(2)})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.9, 0.9]
    """

    name = "optax"
    _treedef: Any  # of the transform's state, whose leaves are _state (Transformed.build)
    _paths: tuple[str, ...]  # the trainable parameters' paths, the keys optax sees

    def __init__(
        self,
        params: js.ParameterSelection,
        tx: optax.GradientTransformation,
        *,
        key: Hashable | None = None,
    ) -> None:
        if not (hasattr(tx, "init") and hasattr(tx, "update")):
            raise TypeError(
                f"Optax: tx must be an optax GradientTransformation, got {type(tx).__name__}. "
                "Fix: Optax(model.parameters(), optax.adam(1e-3))"
            )
        self._tx = Transform(tx, None if key is None else ("Optax", key))
        super().__init__(params, {})

    def rule(self) -> Rule:
        """A :class:`Transformed` rule: this optimizer's state and update are ``tx``'s."""
        return Transformed(self, self._tx)


class Transformed(Rule):
    """The rule of an :class:`Optax` optimizer: it holds the optax transform (with its
    ``key``) and runs its ``init`` and ``update`` on the trainable parameters as a
    ``{path: array}`` dict; the state is the transform's, one ``OptState`` per leaf."""

    def __init__(self, optimizer: Optax, tx: Transform) -> None:
        super().__init__(optimizer)
        self.optax: Optax = optimizer
        self.tx = tx

    def key(self) -> Hashable:
        o = self.optax
        return (type(o), self.tx, o._treedef, o._trainable)

    def build(self) -> None:
        # optax sees {path: array}: its state keys then name each parameter by its path
        # ('adam.mu.fc.weight'), and a chain's tuple indices stay numbers ('lion.0.mu.w').
        o = self.optax
        tx = self.tx.tx
        indices = [i for i, t in enumerate(o._trainable) if t]
        variables = o.params.variables
        arrays = [variables[i].value for i in indices]
        paths = tuple(o.params.paths[i] for i in indices)
        named = dict(zip(paths, arrays, strict=True))
        shardings = [sharding_of(a) for a in arrays]
        mesh = [s for s in shardings if isinstance(s, NamedSharding)]
        if not arrays or any(s is None for s in shardings):  # none, or traced
            state = tx.init(named)
        elif len(mesh) < len(shardings):
            state = init_program(Program(o, (type(o), self.tx, paths)), arrays)
        else:  # on a mesh: each leaf shaped like its parameter on its sharding, the rest replicated
            replicated = NamedSharding(mesh[0].mesh, PartitionSpec())
            by_path = dict(zip(paths, zip(arrays, mesh, strict=True), strict=True))

            def place(path, leaf):
                keys = [e.key for e in path if isinstance(e, jax.tree_util.DictKey)]
                hit = by_path.get(keys[-1]) if keys else None
                return hit[1] if hit is not None and hit[0].shape == leaf.shape else replicated

            abstract = jax.eval_shape(tx.init, named)
            out = jax.tree_util.tree_map_with_path(place, abstract)
            state = jax.jit(tx.init, out_shardings=out)(named)
        leaves, o._treedef = jax.tree_util.tree_flatten_with_path(state)
        o._paths = paths
        o._keys = tuple(_key_name(path) for path, _ in leaves)
        o._slots = o._keys
        o._state = nnx.data(tuple(OptState(leaf) for _, leaf in leaves))

    def init(self, arrays: list, key: tuple[str, ...]) -> Any:
        return self.tx.tx.init(dict(zip(key, arrays, strict=True)))

    def update(self, params: list, grads: list, values: list) -> tuple[list, list]:
        o = self.optax
        count, *rest = values
        state = jax.tree_util.tree_unflatten(o._treedef, rest)
        named = dict(zip(o._paths, params, strict=True))
        updates, state = self.tx.tx.update(dict(zip(o._paths, grads, strict=True)), state, named)
        new: dict = optax.apply_updates(named, updates)  # pyright: ignore[reportAssignmentType]
        return [new[path] for path in o._paths], [count + 1, *jax.tree_util.tree_leaves(state)]

    def adapt(self, now: tuple[bool, ...], flipped: list[str]) -> None:
        raise ValueError(
            f"Optax.step: requires_grad changed since the optimizer was built: "
            f"{', '.join(flipped)}; an optax state cannot be resized. Fix: build a new Optax "
            "optimizer after setting requires_grad."
        )
