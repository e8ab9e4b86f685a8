"""``LinearLR``: a linear ramp of the rate's factor (the public face is
``js.optim.lr_scheduler``)."""

from __future__ import annotations

from typing import Any

from js._checks import check_int, check_number

from ._sched_base import (
    LRScheduler,
    _lrs,
)


class LinearLR(LRScheduler):
    """Scale the rate by a factor going linearly from ``start_factor`` to ``end_factor`` over
    ``total_iters`` epochs, then keep it.

    Args:
        optimizer: the optimizer.
        start_factor: the first epoch's factor, in (0, 1].
        end_factor: the factor reached at ``total_iters``, in [0, 1].
        total_iters: epochs of the ramp (>= 0).
        last_epoch: the index of the last epoch (-1: start).

    Example:
        >>> from js.optim.lr_scheduler import LinearLR
        >>> class Opt:
        ...     param_groups = [{"lr": 0.05}]
        >>> scheduler = LinearLR(Opt(), start_factor=0.5, total_iters=4)
    """

    def __init__(
        self,
        optimizer: Any,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        check_number("LinearLR", "start_factor", start_factor, 0, 1, open_low=True)
        check_number("LinearLR", "end_factor", end_factor, 0, 1)
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = check_int("LinearLR", "total_iters", total_iters, 0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """PyTorch's chainable form: the current rates times the ratio of two factors."""
        self._warn_outside_step()
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        delta = self.end_factor - self.start_factor
        return [
            group["lr"]
            * (1.0 + delta / (self.total_iters * self.start_factor + (self.last_epoch - 1) * delta))
            for group in self.optimizer.param_groups
        ]

    def _get_closed_form_lr(self) -> list[float]:
        return [
            base_lr
            * (
                self.start_factor
                + (self.end_factor - self.start_factor)
                * min(self.total_iters, self.last_epoch)
                / self.total_iters
            )
            for base_lr in self.base_lrs
        ]
