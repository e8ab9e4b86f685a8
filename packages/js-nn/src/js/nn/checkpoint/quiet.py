"""What orbax reports of a failure js raises itself, kept off stderr.

A failed read is raised as one :class:`~.format.CheckpointError`, a failed write (a full disk,
a file size limit) as one OSError naming the directory (:func:`named_write_errors`). orbax also
reports each of them its own way: log records with tracebacks where it happens (absl, from its
writer and commit threads too), then, later, what the failure abandoned (tensorstore's callbacks
finding orbax's event loop closed, coroutines collected unfinished, asyncio's "Future exception
was never retrieved", threads failing at interpreter exit). :func:`quiet_leftovers` sends those
to the ``js.nn.checkpoint`` logger at DEBUG, once a failure is seen in this process; every other
report goes where it went.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_log = logging.getLogger("js.nn.checkpoint")
_ORBAX = f"{os.sep}orbax{os.sep}"
_failures = 0  # reads and writes that failed in this process (their leftovers are expected)


def failed() -> None:
    """Count a failed read or write: what orbax reports of it later is expected."""
    global _failures
    _failures += 1


def write_failure(error: BaseException) -> bool:
    """Whether orbax's ``error`` reports a failed write: a full disk or a file size limit
    (an OSError, or tensorstore's "Error writing ..." with its ``os_error_code``)."""
    text = str(error)
    return isinstance(error, OSError) or "Error writing" in text or "os_error_code" in text


@contextmanager
def named_write_errors(what: str, path: Path) -> Iterator[None]:
    """Raise a failed write inside as an OSError naming ``path`` (orbax raises tensorstore's
    "ValueError: OUT_OF_RANGE: Error writing ..." without it); other errors pass unchanged."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 - orbax/tensorstore raise many types
        if not write_failure(error):
            raise
        failed()
        text = str(error)
        first = text.splitlines()[0][:300] if text else type(error).__name__
        raise OSError(
            f"{what} could not be written in {path} ({first}). The steps already there are "
            "intact. Fix: free space on that disk (or raise the file size limit) and save again"
        ) from None


def _from_orbax(error: BaseException | None) -> bool:
    """Whether ``error`` (or what it was raised from) was raised inside orbax."""
    while error is not None:
        frames = traceback.extract_tb(error.__traceback__)
        if any(_ORBAX in frame.filename for frame in frames):
            return True
        error = error.__cause__ or error.__context__
    return False


def _orbax_leftover(unraisable) -> bool:
    """An unraisable report of orbax's abandoned read: its coroutine collected unfinished, or
    tensorstore's callback finding orbax's event loop closed (called from C++: no Python
    frame but asyncio's own)."""
    code = getattr(unraisable.object, "cr_code", None)
    if code is not None and _ORBAX in code.co_filename:
        return True
    error = unraisable.exc_value
    frames = traceback.extract_tb(unraisable.exc_traceback)
    return (
        isinstance(error, RuntimeError)
        and str(error) == "Event loop is closed"
        and bool(frames)
        and all(f"{os.sep}asyncio{os.sep}" in frame.filename for frame in frames)
    )


class _NeverRetrieved(logging.Filter):
    """asyncio's "Future exception was never retrieved" for a future orbax abandoned: one
    whose exception orbax raised, or, once a read or write has failed, tensorstore's (no
    Python frame)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        context = getattr(record, "msg", "")
        never = isinstance(context, str) and "exception was never retrieved" in context
        native = error is not None and not traceback.extract_tb(error.__traceback__)
        if never and (_from_orbax(error) or (native and _failures)):
            _log.debug("orbax left: %s", record.getMessage())
            return False
        return True


class _OrbaxTracebacks(logging.Filter):
    """orbax's log records with a traceback (absl, ERROR) of a failed write, where it happens:
    its writer thread, its commit thread, the main thread's wait. Once a read or write has
    failed, all of orbax's records with a traceback: the threads a failed write abandoned fail
    afterwards ("cannot schedule new futures after interpreter shutdown"). Any error that
    reaches a save, a wait or a read is still raised by js."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None or _ORBAX not in record.pathname:
            return True
        if write_failure(error):
            failed()
        elif not _failures:
            return True
        _log.debug("orbax: %s", record.getMessage())
        return False


_installed = False


def quiet_leftovers() -> None:
    """Send what orbax reports of a failure js raises (:mod:`this module <.quiet>`) to the
    ``js.nn.checkpoint`` logger at DEBUG instead of stderr; installed once per process, by the
    first checkpoint manager or read. Every other report goes where it went."""
    global _installed
    if _installed:
        return
    _installed = True
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if _orbax_leftover(unraisable):
            _log.debug("orbax left: %r", unraisable.exc_value)
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    logging.getLogger("asyncio").addFilter(_NeverRetrieved())
    logging.getLogger("absl").addFilter(_OrbaxTracebacks())


@contextmanager
def quiet_orbax() -> Iterator[None]:
    """orbax logs (and asyncio prints) the tracebacks of a failed read or write before raising;
    the error js raises instead says it once, readably. What the failure reports later goes to
    ``logging`` at DEBUG (:func:`quiet_leftovers`)."""
    quiet_leftovers()
    loggers = [logging.getLogger(name) for name in ("absl", "orbax", "asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
