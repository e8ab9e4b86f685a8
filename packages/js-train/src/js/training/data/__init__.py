"""js.training.data: where js-train's data code lives, one concept per private module.

Public here: :class:`TokenWindows` (token files, NumPy only) and :func:`process_batches` (one
global batch order over several processes; it needs grain, the optional extra
``js-train[grain]``, imported when it is first called, so ``import js.training`` works without
grain). :class:`~js.training.ArrayLoader` lives here too and is public as
``js.training.ArrayLoader``.

The modules, leaves first (none imports js.training outside this package):

* ``_grain``: importing grain with an install hint; recognising its objects without it;
* ``_arrays``: :class:`~js.training.ArrayLoader`, batches of in-memory arrays;
* ``_tokens``: :class:`TokenWindows`;
* ``_rows`` and ``_batches``: :func:`process_batches` and the grain dataset behind it;
* ``_train_data``: what ``Trainer.fit`` iterates, one epoch's ``(batch, position)`` pairs;
* ``_prefetch``: the thread that pulls the next batches while a step runs;
* ``_positions``: the ``'loader'`` entry of a checkpoint (``Trainer.loader_position``).
"""

from ._batches import process_batches as process_batches
from ._tokens import TokenWindows as TokenWindows

__all__ = ["TokenWindows", "process_batches"]
