"""The Trainer's training data: one epoch's batches with the position after each.

:class:`TrainData` adapts what ``Trainer.fit`` accepts to one protocol, an iterator of
``(batch, state)`` per epoch, where ``state`` is the data's position once that batch was
pulled (None when the data has none):

- an ArrayLoader (or any iterable with ``state_dict``/``load_state_dict``): ``set_epoch`` at
  an epoch's start when it has one, ``iter()``, and ``state_dict()`` after each batch;
- a grain ``MapDataset``: one epoch is one pass, ``len(dataset)`` batches, through a fresh
  iterator (the same order every epoch, as grain defines a MapDataset: shuffle after
  ``.repeat(n)`` for an order per epoch); a grain ``IterDataset`` or ``DataLoader``: one
  epoch is a fresh iterator until it ends (a ``DataLoader`` whose sampler has
  ``num_epochs=1`` serves each record once; with ``num_epochs=None`` it is endless: train
  with ``Trainer(max_steps=...)``). The state is grain's own ``iterator.get_state()`` (a dict
  for dataset iterators, the JSON text of a ``DataLoaderIterator``'s bytes);
- any other iterable: ``iter()`` once per epoch, no state.

grain is never imported here: its objects are recognised by their classes' module names.
The checkpoint entries of a position are in :mod:`._positions`, the thread that pulls the
next batches ahead in :mod:`._prefetch`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from ._grain import absl_parsed, grain_kind


def _stateful(data: Any) -> bool:
    return all(callable(getattr(data, name, None)) for name in ("state_dict", "load_state_dict"))


class TrainData:
    """One fit's training data: the epoch's ``(batch, state)`` pairs, its length when known,
    the position of the batches the steps consumed, and a grain state to continue from.

    Args:
        data: what ``fit`` was given as ``train_data``.
    """

    def __init__(self, data: Any) -> None:
        self.data = data
        self.grain = grain_kind(data)
        self.stateful = self.grain is None and _stateful(data)
        if self.grain is not None:
            absl_parsed()
        self.length = self._length()
        self.consumed: Any = None  # the state after the last batch a step consumed
        self.resume_state: Any = None  # a grain state the next epoch's iterator continues

    def _length(self) -> int | None:
        if self.grain in ("IterDataset", "DataLoader") or not hasattr(self.data, "__len__"):
            return None
        length = len(self.data)
        return None if length >= sys.maxsize else length  # MapDataset.repeat(): endless

    def batches(self, epoch: int, continues: bool) -> Iterator[tuple[Any, Any]]:
        """Epoch ``epoch``'s ``(batch, state)`` pairs; ``continues``: the epoch resumes mid-way
        (an ArrayLoader keeps its restored position; a grain iterator gets ``resume_state``)."""
        if not continues and callable(getattr(self.data, "set_epoch", None)):
            self.data.set_epoch(epoch)
        iterator = iter(self.data)
        if self.grain is not None and continues and self.resume_state is not None:
            self._restore(iterator, self.resume_state)
        self.resume_state = None
        try:
            for batch in iterator:
                yield batch, self._state(iterator)
        finally:
            close = getattr(iterator, "close", None)
            if self.grain is not None and callable(close):
                close()  # a grain iterator's worker processes and threads

    def _state(self, iterator) -> Any:
        if self.stateful:
            return self.data.state_dict()
        if self.grain is None:
            return None
        state = iterator.get_state()
        return state.decode("utf-8") if isinstance(state, bytes) else state

    def _restore(self, iterator, state) -> None:
        encoded = state.encode("utf-8") if self.grain == "DataLoader" else state
        try:
            iterator.set_state(encoded)
        except Exception as error:
            raise ValueError(
                f"fit(resume=True): the grain {self.grain} refused the checkpoint's iterator "
                f"state ({type(error).__name__}: {error}). Fix: resume with the same pipeline "
                "as the saved run (source, its repr, transformations, batch size, worker_count)."
            ) from error
