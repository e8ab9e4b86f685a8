"""Decays by a factor: ``StepLR``, ``MultiStepLR`` and ``ExponentialLR`` (the public face
is ``js.optim.lr_scheduler``)."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from typing import Any

from js._checks import check_int

from ._sched_base import (
    LRScheduler,
    _lrs,
    _number,
)


class StepLR(LRScheduler):
    """Multiply the rate by ``gamma`` every ``step_size`` epochs.

    Args:
        optimizer: the optimizer.
        step_size: the period of the decay, in epochs (>= 1).
        gamma: the factor.
        last_epoch: the index of the last epoch (-1: start).

    Example:
        >>> from js.optim.lr_scheduler import StepLR
        >>> class Opt:
        ...     param_groups = [{"lr": 0.1}]
        >>> scheduler = StepLR(Opt(), step_size=30, gamma=0.1)
    """

    def __init__(
        self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        self.step_size = check_int("StepLR", "step_size", step_size, 1)
        self.gamma = _number("StepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The current rates, times ``gamma`` at a multiple of ``step_size``."""
        self._warn_outside_step()
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _lrs(self.optimizer)
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [
            base_lr * self.gamma ** (self.last_epoch // self.step_size) for base_lr in self.base_lrs
        ]


class MultiStepLR(LRScheduler):
    """Multiply the rate by ``gamma`` at each milestone epoch (twice at a repeated one).

    Args:
        optimizer: the optimizer.
        milestones: epoch indices (ints).
        gamma: the factor.
        last_epoch: the index of the last epoch (-1: start).

    Example:
        >>> from js.optim.lr_scheduler import MultiStepLR
        >>> class Opt:
        ...     param_groups = [{"lr": 0.05}]
        >>> scheduler = MultiStepLR(Opt(), milestones=[30, 80], gamma=0.1)
    """

    def __init__(
        self, optimizer: Any, milestones: Iterable[int], gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        if isinstance(milestones, str) or not isinstance(milestones, Iterable):
            raise TypeError(f"MultiStepLR: milestones must be a list of ints, got {milestones!r}")
        milestones = list(milestones)
        for value in milestones:
            check_int("MultiStepLR", "every milestone", value, 0)
        self.milestones = Counter(int(m) for m in milestones)
        self.gamma = _number("MultiStepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The current rates, times ``gamma ** count`` at a milestone."""
        self._warn_outside_step()
        if self.last_epoch not in self.milestones:
            return _lrs(self.optimizer)
        return [
            group["lr"] * self.gamma ** self.milestones[self.last_epoch]
            for group in self.optimizer.param_groups
        ]

    def _get_closed_form_lr(self) -> list[float]:
        milestones = sorted(self.milestones.elements())
        return [
            base_lr * self.gamma ** bisect_right(milestones, self.last_epoch)
            for base_lr in self.base_lrs
        ]


class ExponentialLR(LRScheduler):
    """Multiply the rate by ``gamma`` every epoch.

    Args:
        optimizer: the optimizer.
        gamma: the factor.
        last_epoch: the index of the last epoch (-1: start).

    Example:
        >>> from js.optim.lr_scheduler import ExponentialLR
        >>> class Opt:
        ...     param_groups = [{"lr": 0.1}]
        >>> scheduler = ExponentialLR(Opt(), gamma=0.9)
    """

    def __init__(self, optimizer: Any, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = _number("ExponentialLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The current rates times ``gamma`` (unchanged at the initial step)."""
        self._warn_outside_step()
        if self._is_initial:
            return _lrs(self.optimizer)
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma**self.last_epoch for base_lr in self.base_lrs]
