"""The grain dataset behind process_batches, defined on first use (grain is optional).

Importing this module never imports grain (the suite imports every src module for its
doctests, with or without the extra): :func:`process_rows_class` builds the class once.
"""

from __future__ import annotations

import functools
from typing import Any

from ._grain import import_grain


@functools.cache
def process_rows_class() -> type:
    """``ProcessRows``, a ``grain.MapDataset`` subclass (grain imported here)."""
    grain = import_grain()

    class ProcessRows(grain.MapDataset):
        """This process's rows of every global batch of ``parent``, in the global order.

        Global batch ``b`` is positions ``[b*B, (b+1)*B)`` of ``parent``; this process reads rows
        ``[p*B/P, (p+1)*B/P)`` of each, so its local index ``j`` (batch ``j // (B/P)``, row
        ``j % (B/P)``) maps to position ``b*B + p*B/P + row``. Indices past one epoch follow grain's
        convention (``epoch * len + index``) so a shuffled parent draws a new order every epoch. A
        kept final batch of ``rem`` rows gives each process ``rem/P`` of them the same way.
        """

        def __init__(
            self, parent: Any, batch: int, index: int, count: int, drop_remainder: bool
        ) -> None:
            super().__init__(parent)
            self._rows, self._batch, self._index = len(parent), batch, index
            self._full, remainder = divmod(self._rows, batch)
            self._local, self._tail = batch // count, 0 if drop_remainder else remainder // count
            self._length = self._full * self._local + self._tail

        def __len__(self) -> int:
            return self._length

        def position(self, index: int) -> int:
            """The parent index of local row ``index`` (epochs included)."""
            epoch, index = divmod(index, self._length)
            batch, row = divmod(index, self._local)
            if batch < self._full:
                position = batch * self._batch + self._index * self._local + row
            else:  # the kept final, smaller global batch: rem/P rows each
                position = self._full * self._batch + self._index * self._tail + row
            return epoch * self._rows + position

        def __getitem__(self, index: Any) -> Any:
            if isinstance(index, slice):
                return self.slice(index)
            return self._parent[self.position(index)]

        def __str__(self) -> str:
            return f"ProcessRows(batch={self._batch}, process={self._index}, rows={self._local})"

    return ProcessRows
