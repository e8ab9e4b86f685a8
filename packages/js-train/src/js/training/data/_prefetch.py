"""Prefetcher: the background thread that pulls the next dispatches (host batches grouped and
placed on the device) while a step runs (``Trainer(prefetch=n)``)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

_END = object()


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
