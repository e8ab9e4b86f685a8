"""Building a model without drawing its weights: the abstract model (shapes and dtypes only)
that loading fills, and the constructor's own values of the variables a folder does not hold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import jax
from flax import nnx

import js

from ._folders import FamilyModel


class _ShapeRngs(js.Rngs):
    """``js.Rngs`` for a constructor traced for shapes only: ``next`` folds a Python counter
    into the stream's key instead of advancing the stream's traced counter, whose every update
    under the trace built an error message scanning the whole program (0.4 s for GPT-2 124M).
    The keys differ from ``js.Rngs``'s; the values they draw are never computed."""

    def next(self, name: str) -> jax.Array:
        """A key of stream ``name`` (shape and dtype as ``js.Rngs.next``'s)."""
        stream = self._stream(name)
        drawn = vars(self).get("_shape_draws", 0) + 1
        object.__setattr__(self, "_shape_draws", drawn)
        return jax.random.fold_in(stream.key.get_raw_value(), drawn)


def _build_abstract(cls: type[FamilyModel], config: Any) -> Any:
    """The model with a ``jax.ShapeDtypeStruct`` in every variable: its constructor traced,
    nothing drawn or allocated.

    ``nnx.eval_shape`` rebuilds each module with its attributes in sorted order, while js's
    traversal (``state_dict``, ``named_parameters``, the canonical path of a tied Parameter)
    follows assignment order: each module's attributes are put back in the constructor's order.
    """
    orders: dict[str, list[str]] = {}

    def build() -> Any:
        model = cast(Any, cls)(config, rngs=_ShapeRngs(params=0))
        orders.update({path: list(vars(m)) for path, m in model.named_modules()})
        return model

    model = nnx.eval_shape(build)
    for path, module in model.named_modules():
        attributes = vars(module)
        ordered = {k: attributes[k] for k in orders.get(path, ()) if k in attributes}
        ordered.update(attributes)
        attributes.clear()
        attributes.update(ordered)
    return model


def _initial_values(
    cls: type[FamilyModel], config: Any, wanted: Sequence[tuple]
) -> list[jax.Array]:
    """The constructor's own values of the variables at nnx paths ``wanted``: one compiled run
    whose other outputs XLA drops (no array of the rest of the model is materialised)."""
    wanted_set = set(wanted)

    def build() -> list:
        model = cast(Any, cls)(config, rngs=js.Rngs(params=0))
        flat = nnx.flatten(model, with_paths=True)[1]
        return [v.get_raw_value() for p, v in flat if p in wanted_set]

    return jax.jit(build)()
