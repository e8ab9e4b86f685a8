"""Quiet third-party output: the libraries' routine messages go to ``logging`` at DEBUG.

Two messages reach the console in every ordinary run, and neither reports a problem:

* orbax logs ``Waiting for previous save to complete took 2.4 seconds...`` through absl's
  Python logger (``'absl'``, level WARNING) whenever a ModelCheckpoint save waits more than
  1 s for the previous one (``orbax.checkpoint.checkpoint_manager``);
* gloo, JAX's CPU collectives in a multi-process job, prints ``[Gloo] Rank N is connected to
  M peer ranks. Expected number of connected peer ranks is : M`` to the process's standard
  output (C++ ``std::cout``, with no setting to turn it off) when a job's first collective
  connects the processes.

The Trainer installs a filter on the ``'absl'`` logger that reroutes the first (only that
message, from orbax, below ERROR) to the ``'js.training.library'`` logger at DEBUG;
``js.training.launch`` drops the second from the output it forwards, and logs it there too. A
gloo line saying some peer is *not* connected, every other absl record and everything the
user's own code logs or prints pass unchanged.

``JS_LIBRARY_LOGS=1`` in the environment, or :func:`show_library_logs`, shows them again as
the libraries print them (processes a launcher starts inherit the variable).
"""

from __future__ import annotations

import logging
import os
import re

LIBRARY_LOGS = "JS_LIBRARY_LOGS"
"""The environment variable that shows the libraries' routine output (``1``) again."""

library_logger = logging.getLogger("js.training.library")

# (where the record was logged from, how its message starts): routine messages, not problems
_ROUTINE_ABSL = (("orbax/checkpoint/", "Waiting for previous save to complete took"),)
_GLOO_CONNECTED = re.compile(
    r"\[Gloo\] Rank (\d+) is connected to (\d+) peer ranks\. "
    r"Expected number of connected peer ranks is : (\d+)\s*$"
)


def library_logs_shown() -> bool:
    """Whether the libraries' routine output is shown (``JS_LIBRARY_LOGS`` set and not 0)."""
    value = os.environ.get(LIBRARY_LOGS, "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


def show_library_logs(show: bool = True) -> None:
    """Show (or, with ``False``, quiet again) the routine output of orbax and gloo.

    Sets ``JS_LIBRARY_LOGS`` in ``os.environ``, so it holds in this process at once and in the
    processes it starts afterwards (``js.training.launch``'s children). Real problems (orbax
    errors, a gloo peer that did not connect) are never quieted.

    Args:
        show: True to show them, False to route them to ``logging`` at DEBUG again.

    Example:
        >>> show_library_logs()
        >>> library_logs_shown()
        True
        >>> show_library_logs(False)
    """
    if not isinstance(show, bool):
        raise TypeError(f"show_library_logs(show) takes True or False, got {show!r}")
    os.environ[LIBRARY_LOGS] = "1" if show else "0"


class _RoutineFilter(logging.Filter):
    """On the ``'absl'`` logger: a routine orbax record goes to ``js.training.library`` at
    DEBUG instead, unless the libraries' logs are shown."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR or library_logs_shown() or not _routine(record):
            return True
        library_logger.debug("%s: %s", record.name, record.getMessage())
        return False


def _routine(record: logging.LogRecord) -> bool:
    where = record.pathname.replace(os.sep, "/")
    message = str(record.msg)
    return any(part in where and message.startswith(start) for part, start in _ROUTINE_ABSL)


def quiet_library_logs() -> None:
    """Install the filter on absl's logger (once: a second call does nothing)."""
    absl = logging.getLogger("absl")
    if not any(isinstance(f, _RoutineFilter) for f in absl.filters):
        absl.addFilter(_RoutineFilter())


def routine_output(line: str) -> bool:
    """Whether a line a launched process printed is routine library output to drop: gloo's
    connection report when every peer connected (and ``JS_LIBRARY_LOGS`` is not set)."""
    if library_logs_shown():
        return False
    match = _GLOO_CONNECTED.match(line)  # the whole line: nothing else printed on it is lost
    return match is not None and match.group(2) == match.group(3)
