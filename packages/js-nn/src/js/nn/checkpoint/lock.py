"""One writer per checkpoint directory: an exclusive ``fcntl.flock`` on ``<dir>/.js-writer.lock``.

A writer (``save_checkpoint`` from choosing the step to the commit, ``ModelCheckpoint`` for a
whole fit) holds the lock; a second writer fails at once with the holder's pid and host, or
waits up to ``timeout`` seconds. The kernel drops a flock when its holder exits, however it
exits, so a writer killed with SIGKILL never leaves a stale lock, only (at worst) the file;
a holder that exits normally removes the file. Removing it is safe because the holder unlinks
while still locked and every locker checks, once locked, that the file it locked is still the
one at the path (otherwise it locks again). In a multi-process job only the primary process
locks; the others learn the outcome from it. Readers take no lock: steps become visible by an
atomic rename, so a reader never sees a half-written one.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

import jax
import numpy as np

LOCK_NAME = ".js-writer.lock"


def check_timeout(owner: str, timeout) -> float:
    """``lock_timeout`` as seconds: a real number >= 0 (checked before anything is written)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"{owner} lock_timeout must be a number of seconds >= 0, got "
            f"{timeout!r} (a {type(timeout).__name__}). Fix: e.g. lock_timeout=30."
        )
    if not timeout >= 0:  # NaN fails too
        raise ValueError(f"{owner} lock_timeout must be >= 0 seconds, got {timeout!r}")
    return float(timeout)


class DirectoryLock:
    """An exclusive writer lock on ``directory`` (which must exist), held by one process."""

    def __init__(self, directory: Path, owner: str, timeout: float = 0.0):
        self.path = Path(directory) / LOCK_NAME
        self.owner, self.timeout = owner, timeout
        self._fd: int | None = None

    def _holder(self) -> str:
        try:
            text = self.path.read_text().strip()
        except OSError:
            text = ""
        return text or "another process"

    def _try_once(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        try:  # the file we locked may have been unlinked by the holder we waited for
            same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return self._try_once()
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self._fd = fd
        return True

    def acquire(self) -> DirectoryLock:
        deadline = time.monotonic() + self.timeout
        while not self._try_once():
            if time.monotonic() >= deadline:
                waited = f"within {self.timeout:g} s" if self.timeout else "at once"
                raise TimeoutError(
                    f"{self.owner}: {self.path.parent} is being written by {self._holder()} "
                    f"(it holds {self.path.name}); could not take the writer lock {waited}, "
                    "and two writers would mix their steps. Fix: wait for that writer to "
                    "finish, write to another directory, or pass lock_timeout=<seconds> to "
                    "wait for it."
                )
            time.sleep(0.05)
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)  # still locked: nobody can lock this inode now
        finally:
            os.close(fd)

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def writer_lock(path: Path, owner: str, timeout: float) -> DirectoryLock | None:
    """The directory's writer lock, held by the primary process; every process of a job
    learns whether the primary got it (the others hold None)."""
    lock, error = None, None
    if jax.process_index() == 0:
        try:
            lock = DirectoryLock(path, owner, timeout).acquire()
        except TimeoutError as caught:
            error = caught
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        got = multihost_utils.broadcast_one_to_all(np.int32(error is None))
        if not int(got) and error is None:
            error = TimeoutError(f"{owner}: the primary process could not lock {path}")
    if error is not None:
        raise error
    return lock
