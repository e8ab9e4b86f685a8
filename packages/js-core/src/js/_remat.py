"""``js.remat``: recompute activations in the backward pass (``jax.checkpoint`` for js calls).

A function of modules, ``Rngs`` and arrays is laid out as ``js.jit`` lays it out
(``_stateful``): the objects' state arrays and the array arguments become the inputs of a pure
function, which ``jax.checkpoint`` wraps; the state the function changed (dropout's RNG counters,
batch statistics) comes back out and is written into the caller's objects. A module is
converted by a shallow copy whose class runs its ``forward`` that way; its Parameters are the
original's own, under the same names.

What XLA:CPU does with it (measured for issue 22): the recomputation of blocks unrolled in one
program saved no temporary memory there, since the scheduler is free to run it early; a
``lax.scan`` over checkpointed identical blocks (``js.nn.ScannedStack(remat=True)``) keeps one
block's activations at a time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, overload

import jax
import numpy as np
from flax import nnx

from ._stateful import is_stateful, lay_out_call, read

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=nnx.Module)

# jax.checkpoint_policies entries that are policies themselves (the others build one from names)
POLICY_NAMES = (
    "everything_saveable",
    "nothing_saveable",
    "dots_saveable",
    "checkpoint_dots",
    "dots_with_no_batch_dims_saveable",
    "checkpoint_dots_with_no_batch_dims",
)


def resolve_policy(policy: str | Callable[..., Any] | None) -> Callable[..., Any] | None:
    """``policy`` as ``jax.checkpoint`` takes it: None, a policy function, or the name of one
    of ``jax.checkpoint_policies`` (``"dots_saveable"``)."""
    if policy is None or callable(policy):
        return policy
    names = [name for name in POLICY_NAMES if hasattr(jax.checkpoint_policies, name)]
    if isinstance(policy, str) and policy in names:
        return getattr(jax.checkpoint_policies, policy)
    raise ValueError(
        f"js.remat: policy must be None, a function of jax.checkpoint_policies or one of their "
        f"names {names}; got {policy!r}. Fix: e.g. policy='dots_saveable', or "
        "jax.checkpoint_policies.save_only_these_names('name') for a policy built from names"
    )


def _stateful_paths(tree) -> list[str]:
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_stateful)[0]
    return [jax.tree_util.keystr(path) for path, leaf in leaves if is_stateful(leaf)]


def _is_array(value) -> bool:
    return isinstance(value, (jax.Array, np.ndarray, np.generic))


def checkpoint_call(fn: Callable[..., Any], policy, prevent_cse: bool, args, kwargs) -> Any:
    """``fn(*args, **kwargs)`` under ``jax.checkpoint``, its stateful arguments threaded.

    Array leaves of the arguments are checkpoint inputs; other leaves (Python numbers, strings,
    None) stay Python values, as in a plain call. The state arrays ``fn`` changed are written
    back into the caller's objects; those it only read are left alone (so ``js.jit`` still sees
    a read-only forward as read-only).
    """
    layout, variables, dyn_args, dyn_kwargs = lay_out_call("js.remat", args, kwargs)
    nested = _stateful_paths((dyn_args, dyn_kwargs))
    if nested:
        raise TypeError(
            f"js.remat: a module, optimizer or Rngs sits inside a container argument (at "
            f"{nested[0]} of (args, kwargs)); its updates would be lost. Fix: pass each "
            "stateful object as its own top-level argument."
        )
    flat, treedef = jax.tree.flatten((dyn_args, dyn_kwargs))
    array_at = [_is_array(value) for value in flat]
    arrays = [value for value, is_array in zip(flat, array_at, strict=True) if is_array]
    written: list[bool] = []

    def pure(leaves, arrays):
        given = iter(arrays)
        values = [
            next(given) if is_array else v for v, is_array in zip(flat, array_at, strict=True)
        ]
        call_dyn_args, call_dyn_kwargs = jax.tree.unflatten(treedef, values)
        objects, call_args, call_kwargs = layout.rebuild(leaves, call_dyn_args, call_dyn_kwargs)
        output = fn(*call_args, **call_kwargs)
        if _stateful_paths(output):
            raise TypeError(
                f"js.remat: {getattr(fn, '__qualname__', fn)} returned a module, optimizer or "
                "variable. Return arrays only: objects passed as arguments are updated in place."
            )
        new_leaves = layout.updated(objects, "js.remat", fn)
        written[:] = [new is not old for new, old in zip(new_leaves, leaves, strict=True)]
        return output, [new for new, w in zip(new_leaves, written, strict=True) if w]

    checkpointed = jax.checkpoint(pure, policy=policy, prevent_cse=prevent_cse)
    output, changed = checkpointed(read(variables), arrays)
    new_values = iter(changed)
    for variable, w in zip(variables, written, strict=True):
        if w:
            variable.set_raw_value(next(new_values))
    return output


_REMAT_CLASSES: dict[type, type] = {}


def _remat_forward(self, *args: Any, **kwargs: Any) -> Any:
    base, (policy, prevent_cse) = type(self)._remat_base, self._remat_config
    return checkpoint_call(base.forward, policy, prevent_cse, (self, *args), kwargs)


def _shallow_copy(module, cls: type):
    """A new object of ``cls`` holding ``module``'s attributes (its children and Variables
    themselves, not copies)."""
    new = object.__new__(cls)
    new.__dict__.update(vars(module))
    return new


def _reduce(self, protocol):
    """Copy and pickle as the base class's object, converted again after."""
    plain = _shallow_copy(self, type(self)._remat_base)
    del plain.__dict__["_remat_config"]
    policy, prevent_cse = self._remat_config
    return (_restore, (plain, policy, prevent_cse))


def _restore(module, policy, prevent_cse):
    return remat(module, policy, prevent_cse=prevent_cse)


def remat_class(base: type) -> type:
    """The class of ``js.remat(module)`` for modules of class ``base`` (one per class):
    ``base`` with a ``forward`` that checkpoints ``base.forward``, named as ``base``."""
    cls = _REMAT_CLASSES.get(base)
    if cls is None:
        namespace = {
            "forward": _remat_forward,
            "_remat_base": base,
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
            "__reduce_ex__": _reduce,
        }
        cls = _REMAT_CLASSES[base] = type(base.__name__, (base,), namespace)
    return cls


@overload
def remat(
    target: M, policy: str | Callable[..., Any] | None = None, *, prevent_cse: bool = True
) -> M: ...


@overload
def remat(
    target: F, policy: str | Callable[..., Any] | None = None, *, prevent_cse: bool = True
) -> F: ...


def remat(
    target: Any, policy: str | Callable[..., Any] | None = None, *, prevent_cse: bool = True
) -> Any:
    """Recompute ``target``'s activations in the backward pass instead of storing them.

    ``jax.checkpoint`` for js's calling convention. Given a function of modules, ``js.Rngs`` and
    arrays (as ``js.jit`` takes them), returns a function that computes the same and is
    differentiated (``js.value_and_grad``, ``js.grad``) by running it again in the backward
    pass; the state it changes (RNG counters, batch statistics) is written back as by a plain
    call, and dropout draws the same masks when recomputed. Given a module, returns a module
    of the same class name that computes the same, with the same Parameters (shared with
    ``target``, not copies) under the same names: ``state_dict`` keys are unchanged. Put it in
    the parent in place of the original (``self.blocks[i] = js.remat(block)``).

    Memory: on XLA:CPU the recomputation of blocks unrolled in one program is scheduled freely
    and saved nothing when measured; ``js.nn.ScannedStack(blocks, remat=True)``, a loop over
    identical blocks, is what keeps one block's activations at a time there.

    Args:
        target: a function or a module.
        policy: what may be saved rather than recomputed: None (nothing but the inputs), a
            function of ``jax.checkpoint_policies``, or its name (``"dots_saveable"``,
            ``"nothing_saveable"``, ``"everything_saveable"``,
            ``"dots_with_no_batch_dims_saveable"``, ...).
        prevent_cse: ``jax.checkpoint``'s: keep XLA from merging the recomputation with the
            forward pass (True; False is safe inside ``lax.scan``).

    Returns:
        The checkpointed function, or the converted module.

    Example:
        >>> import jax.numpy as jnp, js
        >>> class Linear(js.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.weight = js.Parameter(jnp.eye(4) / 2)
        ...     def forward(self, x):
        ...         return x @ self.weight.value
        >>> layer = Linear()
        >>> lazy = js.remat(layer)
        >>> list(lazy.state_dict()) == list(layer.state_dict()), lazy.weight is layer.weight
        (True, True)
        >>> loss = lambda m, x: jnp.sum(jnp.tanh(m(x)) ** 2)
        >>> g1 = js.grad(loss)(layer, jnp.ones((2, 4)))
        >>> g2 = js.grad(js.remat(loss))(layer, jnp.ones((2, 4)))
        >>> bool(jnp.allclose(g1["weight"], g2["weight"]))
        True
    """
    policy = resolve_policy(policy)
    prevent_cse = bool(prevent_cse)
    if isinstance(target, nnx.Module):
        base = getattr(type(target), "_remat_base", type(target))
        converted = _shallow_copy(target, remat_class(base))
        converted._remat_config = (policy, prevent_cse)  # static: selects the program
        return converted
    if not callable(target):
        raise TypeError(
            f"js.remat: expected a module or a function, got {type(target).__name__}. Fix: "
            "js.remat(block) or js.remat(fn)"
        )

    @functools.wraps(target)
    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        return checkpoint_call(target, policy, prevent_cse, args, kwargs)

    return checkpointed
