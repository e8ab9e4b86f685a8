"""The Trainer's training data: one epoch's batches with the position after each, and the
background thread that places the next dispatches on the device while a step runs.

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
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

# grain's public classes the Trainer iterates itself, by the name of a class in the MRO
_GRAIN = ("MapDataset", "IterDataset", "DataLoader")
_END = object()


def grain_kind(data) -> str | None:
    """``'MapDataset'``, ``'IterDataset'`` or ``'DataLoader'`` for a grain object, else None
    (without importing grain: by the module of ``data``'s classes)."""
    for cls in type(data).__mro__:
        if cls.__name__ in _GRAIN and cls.__module__.split(".")[0] == "grain":
            return cls.__name__
    return None


def _absl_parsed() -> None:
    """grain's worker processes read absl flags, which raise UnparsedFlagAccessError in a
    program that never parsed them (any script without ``absl.app``): mark them parsed."""
    try:
        from absl import flags  # grain's own dependency, present wherever grain is
    except ImportError:  # no absl: no grain workers either
        return

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def _stateful(data) -> bool:
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
            _absl_parsed()
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


class GrainPosition:
    """The ``'loader'`` checkpoint entry of a grain pipeline: ``get_state()`` is grain's state
    after the last batch a step consumed (``{'grain': kind, 'state': ...}``); ``set_state``
    keeps a saved one for the next ``fit(..., resume=True)`` on the same pipeline, after
    ``check_state`` (asked by ``load_checkpoint`` before anything is restored) found it fits.
    """

    def __init__(self, data: TrainData, remember: Callable[[TrainData], None]) -> None:
        self._data, self._remember = data, remember

    def get_state(self) -> dict:
        return {"grain": self._data.grain, "state": self._data.consumed}

    def check_state(self, state: Any) -> str | None:
        kind = self._data.grain
        saved = state.get("grain") if isinstance(state, dict) else None
        if saved != kind or "state" not in state:
            what = f"a grain {saved} position" if saved else f"not a grain position ({state!r})"
            return (
                f"the checkpoint holds {what}, but the loader given is a grain {kind}. Fix: "
                "name the same pipeline as the saved run: {'loader': "
                "trainer.loader_position(train_data)}"
            )
        inner = state["state"]
        if kind != "DataLoader" and isinstance(inner, dict):
            try:
                fresh = iter(self._data.data).get_state()
            except Exception:  # noqa: BLE001 - the iterator itself refuses at fit time
                return None
            if isinstance(fresh, dict) and set(fresh) != set(inner):
                return (
                    f"the saved grain iterator state has the fields {sorted(inner)}, this "
                    f"pipeline's iterator {sorted(fresh)}: another pipeline. Fix: build the "
                    "same pipeline (transformations, prefetch, workers) as the saved run"
                )
        elif kind == "DataLoader":
            try:
                json.loads(inner)
            except (TypeError, ValueError):
                return f"the saved DataLoader state is not grain's JSON text ({inner!r:.60})"
        return None

    def set_state(self, state: Any) -> None:
        problem = self.check_state(state)
        if problem is not None:
            raise ValueError(f"loader: {problem}")
        self._data.consumed = self._data.resume_state = state["state"]
        self._remember(self._data)


class ArrayPosition:
    """The ``'loader'`` checkpoint entry of a stateful loader (ArrayLoader): its
    ``state_dict()`` after the last batch a step consumed, not after those a prefetching
    thread ran ahead to; ``load_state_dict`` restores the loader itself (so a checkpoint
    saved from this entry loads into the loader too, and the reverse)."""

    def __init__(self, data: TrainData) -> None:
        self._data = data

    def state_dict(self) -> dict:
        consumed = self._data.consumed
        return dict(consumed) if consumed is not None else self._data.data.state_dict()

    def load_state_dict(self, state) -> None:
        self._data.data.load_state_dict(state)
        self._data.consumed = self._data.data.state_dict()


class Prefetcher:
    """Iterate ``source`` (a generator of dispatches: host batches pulled, grouped and
    placed) in a background thread, at most ``depth`` items ahead; re-raise its errors here.

    :meth:`close` stops the thread (it finishes the item in hand) and joins it.
    """

    def __init__(self, source: Iterator, depth: int) -> None:
        self._source = source
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="js-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for item in self._source:
                if not self._put((item, None)):
                    return
            self._put((_END, None))
        except BaseException as error:  # noqa: BLE001 - re-raised in the consumer
            self._put((_END, error))
        finally:
            close = getattr(self._source, "close", None)
            if callable(close):
                close()  # the generator's finally (a grain iterator's close) in this thread

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self):
        item, error = self._queue.get()
        if error is not None:
            self.close()
            raise error
        if item is _END:
            self.close()
            raise StopIteration
        return item

    def close(self) -> None:
        """Stop the thread and wait for it (the batch it is pulling is dropped)."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()
