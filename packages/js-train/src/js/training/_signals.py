"""Stop signals during ``Trainer.fit``: SIGTERM, SIGINT (Ctrl-C) and SIGUSR1 end the fit at a
step boundary with a save, then :class:`Preempted` exits with ``128 + signal``.

The handlers only record the signal (the step in flight finishes; no KeyboardInterrupt lands
inside a step, a save or orbax's threads); the Trainer looks at the record after each dispatch.
In a job with JAX's preemption sync manager (``jax.distributed.initialize``, which catches
SIGTERM itself), SIGTERM is left to JAX and SIGINT/SIGUSR1 are passed on to it as a SIGTERM to
this process; every process then asks ``reached_preemption_sync_point`` for each global step
(orbax's CheckpointManager asks it with the step it saves: the same ids), so all stop at the
same step.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGUSR1") if hasattr(signal, name)
)


class Preempted(SystemExit):
    """The fit was stopped by a signal (SIGTERM, SIGINT, SIGUSR1) after saving its last step.

    ``Trainer.fit`` raises it after its cleanup (the save written, the writer lock freed, the
    previous signal handlers back). Uncaught, the process exits with ``code`` = ``128 +
    signum`` (143 for SIGTERM, 130 for SIGINT, 138 for SIGUSR1) and no traceback, the message
    having been printed to stderr; a script that has more to do catches it (``except
    Preempted``: not an ``Exception``, so a broad ``except Exception`` does not swallow it).

    Attributes:
        signum: the signal received (SIGTERM when JAX's preemption notice stopped the job).
        step: the global step the fit stopped at (the one saved).
        saved: the step directories written for the stop (empty when nothing saved it).
        message: the line printed to stderr.

    Example:
        >>> try:
        ...     trainer.fit(task, loader)  # doctest: +SKIP
        ... except Preempted as stopped:  # e.g. upload the logs first, then exit with its code
        ...     print(stopped.signum, stopped.step, stopped.saved)
        ...     raise
    """

    def __init__(self, signum: int, step: int, saved: list[Path], message: str) -> None:
        super().__init__(128 + signum)
        self.signum, self.step, self.saved, self.message = signum, step, saved, message

    def __str__(self) -> str:
        return self.message


def _jax_notices() -> bool:
    """Whether JAX's preemption sync manager runs here (it owns SIGTERM)."""
    from js._jax import distributed

    return distributed.global_state.preemption_sync_manager is not None


class StopSignals:
    """The stop signals' handlers for one fit (a context manager; main thread only).

    ``signum`` is the first signal received, ``ignored`` those received after it (while the
    fit finishes its step and saves); the previous handlers come back on exit.
    """

    def __init__(self, step: int = 0) -> None:
        self.step = step  # the last global step asked about
        self.signum: int | None = None
        self.ignored: list[int] = []
        self.jax_notices = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self  # signal.signal works only there; a fit in a thread is not stopped
        self.jax_notices = _jax_notices()
        for signum in STOP_SIGNALS:
            if signum == signal.SIGTERM and self.jax_notices:
                continue  # JAX's notifier caught it (a C handler Python cannot restore)
            self._previous[signum] = signal.signal(signum, self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._previous = {}

    def _record(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            self.ignored.append(signum)
            return
        self.signum = signum
        if self.jax_notices and signum != signal.SIGTERM:
            os.kill(os.getpid(), signal.SIGTERM)  # JAX's notice: every process agrees on a step

    def due(self, step: int, shared: bool, reads: bool) -> int | None:
        """The signal to stop for at this step boundary, or None.

        Args:
            step: the global step reached (after a dispatch of K steps, JAX's sync point is
                asked about each of them: it is the largest step any process reported + 1).
            shared: a job of several processes.
            reads: the boundary is one where the processes read anyway (a log, a validation,
                an epoch's end); without JAX's sync manager they agree only there.
        """
        if self.jax_notices:  # every process, every step: a host call, ~0.1 us
            from jax.experimental import multihost_utils

            steps = range(self.step + 1, step + 1) or [step]
            self.step = step
            reached = [multihost_utils.reached_preemption_sync_point(s) for s in steps]
            return (self.signum or signal.SIGTERM) if any(reached) else None
        if not shared:
            return self.signum
        if not reads:
            return None
        import numpy as np
        from jax.experimental import multihost_utils

        signums = multihost_utils.process_allgather(np.asarray(self.signum or 0, np.int32))
        return int(np.max(signums)) or None


def signal_name(signum: int) -> str:
    """``'SIGTERM'`` for 15."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def check_save_on_signal(path: Any) -> Path | None:
    """``Trainer(save_on_signal=...)``: None, or a directory path (made absolute)."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise TypeError(
            f"Trainer save_on_signal must be a directory path or None, got {path!r}. Fix: pass "
            "the directory a stop signal's checkpoint goes to, e.g. 'runs/x/on_signal'"
        )
    return Path(path).absolute()


def check_signal_directory(path: Path, start_step: int) -> None:
    """Refuse (when a fit starts) a ``save_on_signal`` directory holding steps after the fit's
    first step: the stop's save would fail there (a step must come after the latest)."""
    from js.nn.checkpoint.format import steps_in

    if path.is_file():
        raise NotADirectoryError(
            f"Trainer save_on_signal={str(path)!r} is a file. Fix: pass a directory path"
        )
    later = [step for step in steps_in(path) if step > start_step] if path.is_dir() else []
    if later:
        raise FileExistsError(
            f"Trainer save_on_signal: {path} already holds steps {sorted(later)}, after step "
            f"{start_step} where this fit starts, and a stop's save must come after the latest "
            "step there. Fix: use another directory, resume from its last step "
            "(load_checkpoint(path, ..., which='last'), fit(..., resume=True)) or delete those "
            "steps"
        )
