"""``js.export``: a module's eval-mode forward as a ``jax.export.Exported`` (serialized StableHLO).

The artifact runs where only JAX is installed: ``jax.export.deserialize(blob).call(x)``. The
forward is traced on a copy of the module rebuilt inside the trace (``nnx.merge``), so nothing
the trace does reaches the caller's module. With ``weights="baked"`` the copy reads the current
arrays, which the trace records as constants: the artifact carries its weights. With
``weights="argument"`` the copy's arrays are replaced by the first input, the
``{path: array}`` dict of ``module.state_dict()`` (what ``js.nn.save_weights`` writes), so one
artifact serves any weights of that architecture.

Only the evaluation forward is exported. A module in train mode is refused when its forward
depends on the mode (dropout, batch statistics): both modes are traced and compared.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from flax import nnx

from ._checks import is_int
from ._module import Module

WEIGHTS = ("baked", "argument")


def _check_args(example_args: tuple) -> None:
    for index, arg in enumerate(example_args):
        if not isinstance(arg, (jax.Array, np.ndarray, jax.ShapeDtypeStruct)):
            raise TypeError(
                f"js.export: example argument {index} is a {type(arg).__name__}, not an array; "
                "an exported function takes arrays only. Fix: pass np.asarray(...) (or a "
                "jax.ShapeDtypeStruct), and fix non-array options in the module's constructor "
                "or a wrapper module's forward"
            )


def _batched(example_args: tuple, dynamic_batch) -> set[int]:
    """The positions whose leading dimension becomes the symbolic ``batch``."""
    if dynamic_batch is False:
        return set()
    if dynamic_batch is True:
        lead = [a.shape[0] if a.ndim else None for a in example_args]
        chosen = {i for i, n in enumerate(lead) if n is not None and n == lead[0]}
    else:
        chosen = set(_positions(dynamic_batch, len(example_args)))
    scalar = sorted(i for i in chosen if i >= len(example_args) or not example_args[i].ndim)
    if scalar or (not chosen and example_args):
        raise ValueError(
            f"js.export: dynamic_batch needs a leading dimension, but arguments {scalar or [0]} "
            "have none. Fix: dynamic_batch=False, or name the batched positions, e.g. (0,)"
        )
    return chosen


def _positions(dynamic_batch, count: int) -> tuple[int, ...]:
    """``dynamic_batch`` given as positions: a sequence of argument indices in range."""
    given = dynamic_batch if isinstance(dynamic_batch, Sequence) else None
    if given is None or isinstance(given, (str, bytes)) or not all(is_int(i) for i in given):
        raise TypeError(
            f"js.export: dynamic_batch must be True, False or a sequence of argument positions, "
            f"got {dynamic_batch!r}. Fix: dynamic_batch=True (the leading dimension of the "
            "first argument and of those sharing its size), False (all static) or e.g. (0,)"
        )
    outside = [i for i in given if not 0 <= i < count]
    if outside:
        raise ValueError(
            f"js.export: dynamic_batch positions {outside} are not among the {count} example "
            f"arguments (positions 0 to {count - 1}). Fix: name existing positions, e.g. (0,)"
        )
    return tuple(int(i) for i in given)


def _check_platforms(platforms) -> tuple[str, ...] | None:
    """``platforms`` as a tuple of names: a bare string would be read letter by letter."""
    if platforms is None:
        return None
    if isinstance(platforms, str):
        raise TypeError(
            f"js.export: platforms must be a sequence of platform names, got the string "
            f"{platforms!r}. Fix: platforms=({platforms!r},)"
        )
    if not isinstance(platforms, Sequence) or not platforms:
        raise TypeError(
            f"js.export: platforms must be a non-empty sequence of names such as ('cpu', "
            f"'cuda'), got {platforms!r}"
        )
    bad = [p for p in platforms if not isinstance(p, str) or not p]
    if bad:
        raise TypeError(
            f"js.export: platforms must be names such as 'cpu', 'cuda' or 'tpu', got {bad}. "
            "Fix: platforms=('cpu', 'cuda')"
        )
    return tuple(platforms)


def _specs(example_args: tuple, dynamic_batch) -> list[jax.ShapeDtypeStruct]:
    chosen = _batched(example_args, dynamic_batch)
    (batch,) = jax.export.symbolic_shape("batch") if chosen else (None,)
    return [
        jax.ShapeDtypeStruct((batch, *a.shape[1:]) if i in chosen else a.shape, a.dtype)
        for i, a in enumerate(example_args)
    ]


def _forward_of(module: Module, weights: str):
    """The pure forward of a copy of ``module`` rebuilt inside the trace from its arrays.

    Unflattening the state there makes new Variables at the trace's level, so the copy can be
    written (``weights="argument"``, a forward that updates a buffer) without touching
    ``module``, whose Variables belong to the caller's level.
    """
    graphdef, state = nnx.split(module)
    leaves, treedef = jax.tree.flatten(state)

    def copy():
        return nnx.merge(graphdef, jax.tree.unflatten(treedef, leaves))

    def baked(*args):
        return copy()(*args)

    def argument(arrays, *args):
        rebuilt = copy()
        variables = rebuilt._state_variables()
        for path, array in arrays.items():
            variables[path].value = array
        return rebuilt(*args)

    return baked if weights == "baked" else argument


def _check_mode(module: Module, example_args: tuple) -> None:
    """Refuse a train-mode module whose forward differs from its eval-mode forward."""
    training = [path or type(module).__name__ for path, m in module.named_modules() if m.training]
    if not training:
        return
    evaluation = nnx.merge(*nnx.split(module)).eval()
    try:
        train_jaxpr = str(jax.make_jaxpr(_forward_of(module, "baked"))(*example_args))
    except Exception as error:  # noqa: BLE001 - e.g. Dropout asking for rngs in train mode
        same, why = False, f" (in train mode it raises {type(error).__name__}: {error})"
    else:
        eval_jaxpr = str(jax.make_jaxpr(_forward_of(evaluation, "baked"))(*example_args))
        same, why = eval_jaxpr == train_jaxpr, ""
    if not same:
        raise ValueError(
            f"js.export exports the eval-mode forward, but {type(module).__name__} is in train "
            f"mode (modules {training[:5]}) and its forward depends on the mode (dropout, batch "
            f"statistics){why}. Fix: call model.eval() before js.export"
        )


def export(
    module: Module,
    *example_args: jax.Array | jax.ShapeDtypeStruct,
    dynamic_batch: bool | Sequence[int] = True,
    weights: str = "baked",
    platforms: Sequence[str] | None = None,
) -> jax.export.Exported:
    """Export ``module``'s eval-mode forward as a ``jax.export.Exported``.

    Args:
        module: a ``js.Module``; in train mode only if its forward does not depend on the mode.
        *example_args: arrays (or ``jax.ShapeDtypeStruct``) giving the inputs' shapes and dtypes.
        dynamic_batch: ``True``: the leading dimension of the first argument, and of every
            argument sharing its size, is symbolic (``batch``); ``False``: all static; or the
            positions to make batched, e.g. ``(0,)``.
        weights: ``'baked'`` (the artifact holds the current weights) or ``'argument'`` (its
            first input is the ``{path: array}`` dict of ``module.state_dict()``).
        platforms: lowering platforms (default: the current one), e.g. ``('cpu', 'cuda')``.

    Returns:
        ``jax.export.Exported``: call it with ``.call(*args)``; ``.serialize()`` gives bytes
        that ``jax.export.deserialize`` reloads without js installed.

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np, js
        >>> class Affine(js.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = js.Parameter(jnp.ones((3, 2)))
        ...     def forward(self, x):
        ...         return x @ self.w.value
        >>> exported = js.export(Affine().eval(), np.ones((4, 3), np.float32))
        >>> str(exported.in_avals[0].shape)
        '(batch, 3)'
        >>> restored = jax.export.deserialize(exported.serialize())
        >>> restored.call(np.ones((7, 3), np.float32)).shape
        (7, 2)
    """
    if not isinstance(module, Module):
        raise TypeError(f"js.export expects a js.Module, got {type(module).__name__}")
    if weights not in WEIGHTS:
        raise ValueError(
            f"js.export weights must be one of {WEIGHTS}, got {weights!r}. Fix: "
            "'baked' to ship the weights inside, 'argument' to pass them in"
        )
    _check_args(example_args)
    platforms = _check_platforms(platforms)
    specs = _specs(example_args, dynamic_batch)
    _check_mode(module, example_args)
    forward = jax.jit(_forward_of(module, weights))
    if weights == "baked":
        return jax.export.export(forward, platforms=platforms)(*specs)
    arrays = {
        path: jax.ShapeDtypeStruct(v.shape, v.dtype)
        for path, v in module._state_variables().items()
    }
    return jax.export.export(forward, platforms=platforms)(arrays, *specs)
