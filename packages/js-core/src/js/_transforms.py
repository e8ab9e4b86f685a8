"""The pure boundary: split, merge, apply, update, and stop_gradient.

``js.jit`` lives in ``_jit``, ``js.value_and_grad``/``js.grad`` in ``_autodiff``.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

stop_gradient = jax.lax.stop_gradient
split = nnx.split
merge = nnx.merge
update = nnx.update


def apply(
    graphdef: nnx.GraphDef, state: nnx.State, *args: Any, **kwargs: Any
) -> tuple[Any, nnx.State]:
    """Pure call at the split/merge boundary: ``(output, new_state)``.

    ``graphdef, state = js.split(model)`` gives a pure representation; ``js.apply`` merges it,
    calls the module, and splits the result again, so it can run under plain ``jax.jit``,
    ``jax.grad`` or ``jax.lax.scan``.
    """
    module = nnx.merge(graphdef, state)
    output = module(*args, **kwargs)
    _, new_state = nnx.split(module)
    return output, new_state
