"""``Trainer(profile=(start_step, end_step))``: a ``jax.profiler`` trace of some training steps.

The Trainer adds a :class:`ProfileSteps` callback. The trace starts where the global step
reaches ``start_step`` (when the fit starts there, or at the end of the dispatch that reaches
it) and stops at the end of the dispatch that reaches ``end_step``, after one
``jax.block_until_ready`` on the task's model, optimizer and Rngs, so the recorded steps' device
work is inside it. A block waits for the device; it reads nothing back, so ``Trainer.transfers``
is unchanged. When the fit ends before ``end_step`` (``max_steps``, a stop, an error) the trace
stops there. Every dispatch is marked in the trace as a step (``StepTraceAnnotation('train',
step_num=<its first step>)``, from the previous step's end: its batch's loading included), and
every ``js.Module`` call is a named scope, so the compiled ops carry the layers' class names
(``jit(program)/MLP/Linear/dot_general``).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax

from js._checks import is_int

from ._callbacks import Callback
from ._protocol import TrainerView as Trainer  # the hooks' trainer: any TrainerView

if TYPE_CHECKING:  # the hooks' argument type (no cycle: _task imports no callback)
    from ._task import Task

DEFAULT_DIRECTORY = Path("runs/profile")


def check_profile(profile, profile_dir, run, max_steps: int | None) -> ProfileSteps | None:
    """The callback for ``Trainer(profile=, profile_dir=)``, or None without ``profile``;
    refuses, before anything runs, a window that is not a pair ``0 <= start < end``."""
    if profile is None:
        if profile_dir is not None:
            raise ValueError(
                f"Trainer got profile_dir={str(profile_dir)!r} but no profile: nothing would be "
                "recorded. Fix: profile=(start_step, end_step), e.g. profile=(10, 20)."
            )
        return None
    if not (isinstance(profile, (tuple, list)) and len(profile) == 2 and all(map(is_int, profile))):
        raise TypeError(
            "Trainer profile must be a pair (start_step, end_step) of ints, the global steps "
            f"[start_step, end_step) to record, got {profile!r}. Fix: e.g. profile=(10, 20)."
        )
    start, end = (int(step) for step in profile)
    if start < 0:
        raise ValueError(
            f"Trainer profile={tuple(profile)}: start_step must be >= 0 (a global step), got "
            f"{start}. Fix: e.g. profile=(10, 20)."
        )
    if end <= start:
        raise ValueError(
            f"Trainer profile={tuple(profile)} records the steps in [start_step, end_step), none "
            f"here. Fix: end_step > start_step, e.g. profile=({start}, {start + 1}) for one step."
        )
    if max_steps is not None and start >= max_steps:
        raise ValueError(
            f"Trainer profile={tuple(profile)} starts at step {start}, but max_steps={max_steps} "
            f"ends training before it. Fix: start_step < {max_steps}."
        )
    if profile_dir is None:
        directory = getattr(run, "directory", None)
        profile_dir = DEFAULT_DIRECTORY if directory is None else directory
    if not isinstance(profile_dir, (str, os.PathLike)):
        raise TypeError(
            f"Trainer profile_dir must be a directory path, got {type(profile_dir).__name__}. "
            "Fix: e.g. profile_dir='runs/profile'."
        )
    return ProfileSteps(start, end, profile_dir)


class ProfileSteps(Callback):
    """Record a ``jax.profiler`` trace of the global steps in ``[start, end)`` of each fit.

    Added by ``Trainer(profile=(start, end), profile_dir=...)`` (see the module). The trace is
    written to ``<directory>/plugins/profile/<timestamp>/<host>.xplane.pb`` (with a
    ``.trace.json.gz``), where TensorBoard's profile plugin (``tensorboard --logdir
    directory``) and XProf find it; with several processes each writes under
    ``<directory>/process_<i>``.

    Args:
        start: the first global step recorded.
        end: the step after the last one recorded.
        directory: where the trace goes.
    """

    def __init__(self, start: int, end: int, directory: str | os.PathLike) -> None:
        self.start, self.end = start, end
        self.directory = Path(directory)
        self.traces: list[Path] = []  # the directories written, one per traced fit
        self._directory = self.directory  # this process's (process_<i> in a multi-process job)
        self._tracing = False
        self._step: Any = None  # the open step annotation
        self._recorded = False

    def on_fit_start(self, trainer: Trainer, task: Task) -> None:
        self._maybe_start(trainer.global_step)

    def on_step_end(self, trainer: Trainer, task: Task, step: int) -> None:
        last = trainer.should_stop or (trainer.max_steps is not None and step >= trainer.max_steps)
        if self._tracing and (step >= self.end or last):
            self._stop(task)  # at end_step, or the fit's last step: no next step to mark
        elif not last:
            self._maybe_start(step)

    def on_train_end(self, trainer: Trainer, task: Task) -> None:
        if not self._tracing and not self._recorded:
            first, last = trainer.start_step, trainer.global_step
            warnings.warn(
                f"Trainer(profile=({self.start}, {self.end})): the fit ran steps {first} to "
                f"{last}, outside the profile's window, so no trace was recorded. Fix: a "
                "window inside the steps the fit runs.",
                stacklevel=2,
            )

    def on_fit_end(self, trainer: Trainer, task: Task) -> None:
        if self._tracing:  # the fit ended (or raised) before end_step
            self._stop(task)

    def _maybe_start(self, step: int) -> None:
        if self._tracing:
            self._mark(step)
            return
        if not self.start <= step < self.end:
            return
        directory = self.directory
        if jax.process_count() > 1:
            directory = directory / f"process_{jax.process_index()}"
        directory.mkdir(parents=True, exist_ok=True)
        try:
            jax.profiler.start_trace(str(directory))
        except RuntimeError as error:
            raise RuntimeError(
                f"Trainer(profile=...) could not start its trace at step {step}: {error} "
                "Fix: stop the other jax.profiler trace first, or drop profile=."
            ) from error
        self._tracing = True
        self._directory = directory
        self._mark(step)

    def _mark(self, step: int) -> None:
        """End the previous dispatch's step annotation and begin the next one's."""
        if self._step is not None:
            self._step.__exit__(None, None, None)
        self._step = jax.profiler.StepTraceAnnotation("train", step_num=step)
        self._step.__enter__()

    def _stop(self, task) -> None:
        """Wait for the device (no host read), end the annotation, write the trace."""
        try:
            state = [getattr(task, name, None) for name in ("model", "optimizer", "rngs")]
            jax.block_until_ready(state)
        except Exception:  # a failed step may leave donated arrays behind: stop anyway
            pass
        finally:
            if self._step is not None:
                self._step.__exit__(None, None, None)
                self._step = None
            self._tracing = False
            before = set(_runs(self._directory))
            jax.profiler.stop_trace()
            self._recorded = True
            self.traces += (
                sorted(set(_runs(self._directory)) - before) or _runs(self._directory)[-1:]
            )


def _runs(directory: Path) -> list[Path]:
    """The trace directories under ``directory/plugins/profile``, oldest first."""
    root = directory / "plugins" / "profile"
    return sorted(root.iterdir(), key=os.path.getmtime) if root.is_dir() else []
