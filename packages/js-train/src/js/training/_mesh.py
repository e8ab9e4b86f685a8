"""The Trainer on a device mesh: the checks of ``Trainer(mesh=, batch_axis=)``.

The model (and ``Rngs``) are placed by the user with ``js.shard`` before the optimizer is
built; the Trainer only splits each batch over the mesh's batch axis as it enters a step
(``Trainer._to_device``), so ``js.jit`` runs the step on every device of the mesh and keeps
the state where it is.
"""

from __future__ import annotations

from js._checks import check_mesh as _check_mesh


def check_mesh(mesh, batch_axis: str) -> None:
    """Validate ``Trainer(mesh=, batch_axis=)`` when the Trainer is built (None: no mesh): a
    ``jax.sharding.Mesh`` with Auto axes, among them ``batch_axis`` (js-core's check)."""
    if mesh is not None:
        _check_mesh("Trainer", mesh, batch_axis, name="batch_axis")
