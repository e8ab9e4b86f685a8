"""What the Trainer's parts and callbacks share: the Trainer as a callback sees it, a step
boundary, and the stop a constructor-installed callback asks for.

A leaf module (it imports nothing of js-train), so that ``_callbacks``, ``_limits``,
``_profile``, ``_checkpoint`` and ``_loop`` name the Trainer's type without importing
``_trainer`` (which imports them all).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol


class TrainerView(Protocol):
    """The Trainer as its callbacks use it (:class:`~js.training.Trainer` is one)."""

    callbacks: tuple
    history: list[dict[str, float]]
    start_epoch: int
    start_step: int
    max_steps: int | None
    should_stop: bool
    stop_reason: str | None
    saved_on_request: list[Path]

    @property
    def epoch(self) -> int: ...

    @property
    def global_step(self) -> int: ...

    @property
    def nonfinite(self) -> Any: ...

    def stop(self, reason: str = ..., *, save: bool = ...) -> None: ...

    def request_save(self, reason: str) -> None: ...

    def loader_position(self, train_data: Any = ...) -> Any: ...


class Boundary(NamedTuple):
    """Where the loop stands when it asks its limits (:class:`~._limits.Limit`) whether to stop.

    Attributes:
        at: ``'step'`` after a dispatch's ``on_step_end``, ``'epoch'`` after ``on_epoch_end``,
            ``'end'`` after the fit's last step boundary (before ``on_train_end``).
        reads: the processes of a job read here anyway (a log, a validation, an epoch's end,
            the fit's end), so a multi-process agreement costs no extra wait.
        final: the fit ends here whatever the limits say (``max_steps``, its last epoch).
    """

    at: Literal["step", "epoch", "end"]
    reads: bool
    final: bool


@dataclasses.dataclass(frozen=True)
class Stop:
    """What a limit asks of the loop: stop at this boundary, ``save`` the step stopped at (a
    :class:`~._callbacks.SaveRequest`), or ``drop_save``: cancel a pending request (a state
    that is not finite is not saved)."""

    reason: str
    save: bool = False
    drop_save: bool = False
