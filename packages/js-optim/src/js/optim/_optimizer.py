"""The shared optimizer shell: a parameter selection, one optax transform, state in Variables.

An :class:`Optimizer` holds the live ``ParameterSelection`` it updates, the optax
``GradientTransformation`` that computes the update, and the transform's state as one
``OptState`` variable per array (so ``js.jit`` threads them and updates them in place). The
structure of that state (its pytree definition and key names) is static; only arrays change at
``step``, so a compiled training step never re-traces because of the optimizer.

The transform is held as a :class:`Transform`: optax builds new closures for every optimizer,
which compare by identity, so js's optimizers describe their transform by a hashable key (the
class and its hyperparameters). Two optimizers with equal keys have equal graph definitions,
so a ``js.jit`` step compiled for one runs the other without compiling again.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import jax
import jax.core  # jax.core.Tracer below; pyright knows a submodule only once imported
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

import js
from js._checks import compare_state, sharding_of

from ._schedules import LearningRate


class OptState(js.Buffer):
    """One array of optimizer state (a moment, a counter): threaded by ``js.jit``, never
    differentiated, saved by :meth:`Optimizer.state_dict`."""


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


class Transform:
    """An optax transform with the equality of its static description, ``key``.

    ``key`` is a hashable description of everything the transform computes with (e.g.
    ``('Adam', lr, betas, eps, weight_decay)``): equal keys mean the same update, so the
    compiled programs of one optimizer serve another. Callables inside the key (a schedule)
    compare by identity. ``key=None``, or a key that cannot be hashed (a schedule object
    without ``__hash__``), compares the transform itself, by identity.
    """

    __slots__ = ("tx", "key")

    def __init__(self, tx: optax.GradientTransformation, key=None):
        self.tx = tx
        self.key = ("transform", tx) if key is None or not _hashable(key) else ("key", key)

    def __eq__(self, other) -> bool:
        return isinstance(other, Transform) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Transform({self.key[1]!r})"


def _update(
    tx: Transform, treedef, grads, state_leaves: list, params: list
) -> tuple[list[jax.Array], list[jax.Array]]:
    """One pure optax step: ``(new_params, new_state_leaves)``, all lists in selection order."""
    state = jax.tree_util.tree_unflatten(treedef, state_leaves)
    updates, state = tx.tx.update(grads, state, params)
    # apply_updates returns the structure of ``params`` (a list); optax annotates its union
    new_params: list[jax.Array] = optax.apply_updates(params, updates)  # pyright: ignore[reportAssignmentType]
    return new_params, jax.tree_util.tree_leaves(state)


# Eagerly, one compiled program per optimizer structure: the state travels as its leaves, so
# rebuilding and flattening the optax tree from the static ``treedef`` happens once per trace,
# not on every step. Inside a trace (js.jit) the step is inlined instead: a nested jit would
# add a call to the program and trace it apart, for the same operations.
_apply = jax.jit(_update, static_argnums=(0, 1))


# One compiled init per transform key and parameter shapes: an eager optax init compiles one
# program per zeros_like shape (0.3 s for the digits CNN's Adam in a fresh process).
_init = jax.jit(lambda tx, arrays: tx.tx.init(arrays), static_argnums=0)


def _init_state(tx: Transform, arrays: list):
    """``tx.init(arrays)``, every moment on its parameter's sharding.

    On one device this is one jitted call (eager under a trace). On a mesh (``js.shard``) the
    state is built
    under ``jax.jit`` with out-shardings: each leaf shaped like parameter ``i`` (found at the
    last list index of its optax path, as in ``_key_name``) takes that parameter's sharding,
    the rest (counters) are replicated, so a sharded model never materialises whole moments.
    """
    shardings = [sharding_of(a) for a in arrays]
    if any(s is None for s in shardings):  # traced (or not JAX) parameters
        return tx.tx.init(arrays)
    named = [s for s in shardings if isinstance(s, NamedSharding)]
    if len(named) < len(shardings):
        return _init(tx, arrays)
    replicated = NamedSharding(named[0].mesh, PartitionSpec())
    abstract, treedef = jax.tree_util.tree_flatten_with_path(jax.eval_shape(tx.tx.init, arrays))
    out = []
    for path, leaf in abstract:
        index = [entry.idx for entry in path if isinstance(entry, jax.tree_util.SequenceKey)]
        same = index and leaf.shape == arrays[index[-1]].shape
        out.append(named[index[-1]] if same else replicated)
    return jax.jit(tx.tx.init, out_shardings=jax.tree_util.tree_unflatten(treedef, out))(arrays)


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


def _key_name(path, param_paths: tuple[str, ...]) -> str:
    """``'adam.mu.encoder.weight'`` from the optax key path of one state leaf."""
    parts = []
    for entry in path:
        if isinstance(entry, jax.tree_util.DictKey):
            parts.append(str(entry.key))
        elif isinstance(entry, jax.tree_util.GetAttrKey):
            parts.append(entry.name)
        elif isinstance(entry, jax.tree_util.SequenceKey):  # an index into the parameter list
            parts.append(param_paths[entry.idx])
        else:  # pragma: no cover - optax states are dicts, named tuples and our lists
            parts.append(str(entry))
    return ".".join(parts)


class Optimizer(js.Object):
    """Base class of js optimizers: ``step(grads)``, ``step_count``, state dicts.

    Subclasses validate their arguments and pass one ``optax.named_chain`` to ``__init__``;
    the chain's names become the prefixes of the :meth:`state_dict` keys.

    Args:
        params: the live selection to update, ``model.parameters()``.
        tx: the optax transform computing the update (learning rate included).
        config: ``(name, value)`` pairs shown by ``repr``.
        key: a hashable description of ``tx`` (see :class:`Transform`): optimizers of one
            class with equal keys share compiled programs. None (the default) compares ``tx``
            by identity, so each new optimizer compiles its own.
    """

    def __init__(
        self,
        params: js.ParameterSelection,
        tx: optax.GradientTransformation,
        config: tuple = (),
        *,
        key: Hashable | None = None,
    ) -> None:
        name = type(self).__name__
        if not isinstance(params, js.ParameterSelection):
            raise TypeError(
                f"{name}: params must be the selection model.parameters() returns, got "
                f"{type(params).__name__}. Fix: {name}(model.parameters(), ...)"
            )
        if len(params) == 0:
            raise ValueError(f"{name}: got an empty parameter selection; nothing to optimize")
        self.params = params
        self._tx = Transform(tx, None if key is None else (type(self).__qualname__, key))
        self._config = tuple(config)
        arrays = [param.value for param in params]
        # (path, shape, dtype, sharding) at construction: step refuses parameters cast, reshaped
        # or moved since (sharding is None for a parameter that was traced).
        self._built = tuple(
            (path, tuple(a.shape), np.dtype(a.dtype), sharding_of(a))
            for path, a in zip(params.paths, arrays, strict=True)
        )
        state = _init_state(self._tx, arrays)
        leaves, self._treedef = jax.tree_util.tree_flatten_with_path(state)
        self._keys = tuple(_key_name(path, params.paths) for path, _ in leaves)
        self._state = nnx.data(tuple(OptState(leaf) for _, leaf in leaves))
        # int32 like optax's counters; `+ 1` keeps the dtype, so a compiled step never recompiles.
        # On a mesh it is replicated there, beside the moments.
        count = jax.device_put(np.zeros((), np.int32))  # host-made: nothing to compile
        if isinstance(sharding := sharding_of(arrays[0]), NamedSharding):
            count = jax.device_put(count, NamedSharding(sharding.mesh, PartitionSpec()))
        self._step_count = OptState(count)

    @property
    def lr(self) -> LearningRate | None:
        """The learning rate given to the constructor: a float, a schedule ``step -> lr``, or
        None for an optimizer built without one. ``lr(step_count)`` is the next step's rate."""
        return dict(self._config).get("lr")

    @property
    def step_count(self) -> jax.Array:
        """How many times :meth:`step` ran: an int32 scalar (traced inside ``js.jit``)."""
        return self._step_count.value

    def step(self, grads: nnx.State | Mapping[str, jax.Array]) -> None:
        """Update every parameter once, in place, from ``grads``.

        ``grads`` is the state ``js.value_and_grad(loss_fn)(model, ...)`` returns for the model
        this optimizer was built from (or a ``{path: array}`` dict). Works eagerly and inside
        ``js.jit`` when the optimizer is passed as an argument.
        """
        self._check_params()
        matched = self.params.match(grads)  # one array per parameter, in selection order
        params = [param.value for param in self.params]
        state = [variable.value for variable in self._state]
        update = _update if isinstance(params[0], jax.core.Tracer) else _apply
        new_params, new_state = update(self._tx, self._treedef, matched, state, params)
        for param, value in zip(self.params, new_params, strict=True):
            param.value = value
        for variable, value in zip(self._state, new_state, strict=True):
            variable.value = value
        self._step_count.value = self._step_count.value + 1

    def _check_params(self) -> None:
        """Shapes and dtypes (static: free inside compiled code), then the devices of concrete
        parameters. Inside compiled code the parameters are tracers and the program's inputs
        decide placement, so the device check only runs eagerly."""
        changed, moved = [], []
        for (path, shape, dtype, built), p in zip(self._built, self.params, strict=True):
            value = p.value
            if value.shape != shape or value.dtype != dtype:
                changed.append(
                    f"{path!r}: built for {list(shape)} {dtype}, now {list(value.shape)} "
                    f"{np.dtype(value.dtype)}"
                )
            elif (how := _moved(built, sharding_of(value), value)) is not None:
                moved.append(f"{path!r}: {how}")
        if changed:
            raise ValueError(
                f"{type(self).__name__}.step: parameters changed shape or dtype after the "
                f"optimizer was built: {'; '.join(changed)}. Fix: cast or reshape the model "
                "first, then build the optimizer from model.parameters()."
            )
        if moved:
            raise ValueError(
                f"{type(self).__name__}.step: parameters moved to another device after the "
                f"optimizer was built (its state stays where they were): {'; '.join(moved)}. "
                "Fix: move the model first, then build the optimizer from model.parameters(), "
                "or put each parameter back with jax.device_put(value, device)."
            )

    # -- state dicts ---------------------------------------------------------------------------

    def state_dict(self, *, as_numpy: bool = True) -> dict[str, np.ndarray] | dict[str, jax.Array]:
        """Independent NumPy copies of the optimizer state, keyed by stable names.

        Keys: ``'step_count'`` and ``'<transform>.<field>[.<parameter path>]'``, e.g.
        ``'adam.mu.encoder.weight'``, ``'adam.count'``, ``'momentum.trace.w'``; see each
        optimizer's docstring. Parameters themselves are not included (``model.state_dict()``).
        With ``as_numpy=False``, the live ``jax.Array``s (no copy, on their shardings).
        """
        state: dict[str, jax.Array] = {"step_count": self._step_count.value}
        for key, variable in zip(self._keys, self._state, strict=True):
            state[key] = variable.value
        if not as_numpy:
            return state
        return {key: np.array(value, copy=True) for key, value in state.items()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`, all or nothing: keys, shapes and dtypes are checked
        first and one error lists every problem."""
        targets = dict(zip(self._keys, self._state, strict=True))
        targets = {"step_count": self._step_count, **targets}
        arrays = js.check_state_dict(state_dict, type(self).__name__)
        current = {key: variable.value for key, variable in targets.items()}
        missing, unexpected, mismatched = compare_state(current, arrays)
        problems = [f"missing key {key!r}" for key in missing]
        problems += [f"unexpected key {key!r}" for key in unexpected] + mismatched
        if problems:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict failed; nothing was loaded.\n  "
                + "\n  ".join(problems)
                + "\nFix: load a state saved by the same optimizer over the same parameters."
            )
        # Each array goes where the optimizer's state lives (with its parameters), in a few
        # batched transfers (js.placed_like: one per sharding; NumPy values are copied).
        keys = list(targets)
        values = js.placed_like([arrays[k] for k in keys], [targets[k].value for k in keys])
        for key, value in zip(keys, values, strict=True):
            targets[key].value = value

    def __repr__(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in self._config)
        return f"{type(self).__name__}({len(self.params)} parameters, {options})"
