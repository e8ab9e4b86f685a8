"""The Trainer on a device mesh: the checks of ``Trainer(mesh=, batch_axis=)``.

The model (and ``Rngs``) are placed by the user with ``js.shard`` before the optimizer is
built; the Trainer only splits each batch over the mesh's batch axis as it enters a step
(``Trainer._to_device``), so ``js.jit`` runs the step on every device of the mesh and keeps
the state where it is.
"""

from __future__ import annotations

import jax

import js


def check_mesh(mesh, batch_axis: str) -> None:
    """Validate ``Trainer(mesh=, batch_axis=)`` when the Trainer is built."""
    if mesh is None:
        return
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(
            f"Trainer mesh must be a jax.sharding.Mesh or None, got {type(mesh).__name__}. Fix: "
            'mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))'
        )
    if not isinstance(batch_axis, str) or batch_axis not in mesh.axis_names:
        raise KeyError(
            f"Trainer batch_axis {batch_axis!r} is not an axis of the mesh; its axes are "
            f"{list(mesh.axis_names)}. Fix: Trainer(..., mesh=mesh, batch_axis=<one of them>)"
        )
    js.shard_batch((), mesh, batch_axis)  # an empty batch: js's own checks of the mesh
