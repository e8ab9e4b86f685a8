"""js.training.data: token files and one global batch order over several processes.

:class:`TokenWindows` needs only NumPy; :func:`process_batches` needs grain (the optional
extra ``js-train[grain]``), imported when it is first called, so ``import js.training`` works
without grain.
"""

from ._batches import process_batches as process_batches
from ._tokens import TokenWindows as TokenWindows

__all__ = ["TokenWindows", "process_batches"]
