"""The Trainer on a device mesh: where each batch is put on the mesh (``js.shard_batch``).

The model (and ``Rngs``) are placed by the user with ``js.shard`` before the optimizer is
built; the Trainer only splits each batch over the mesh's batch axis as it enters a step, so
``js.jit`` runs the step on every device of the mesh and keeps the state where it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

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


def on_mesh(data: Iterable, mesh, batch_axis: str) -> Iterable:
    """``data`` with every batch split over ``batch_axis`` of ``mesh`` (unchanged without one)."""
    if mesh is None:
        return data
    return _placed(data, mesh, batch_axis)


def _placed(data: Iterable, mesh, batch_axis: str) -> Iterator:
    for batch in data:
        yield js.shard_batch(batch, mesh, batch_axis)
