"""``CosineAnnealingLR`` (the public face is ``js.optim.lr_scheduler``)."""

from __future__ import annotations

import math
from typing import Any

from js._checks import check_int

from ._sched_base import (
    LRScheduler,
    _lrs,
    _number,
)


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from the initial rate to ``eta_min`` over ``T_max`` epochs (and back
    up over the next ``T_max``, as PyTorch's: it is periodic).

    ``lr = eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``, computed
    in PyTorch's recursive form (so the doubles equal PyTorch's). The traced
    :func:`js.optim.cosine_schedule` is its closed form, held at ``eta_min`` after ``T_max``.

    Args:
        optimizer: the optimizer.
        T_max: the half period, in epochs (>= 1).
        eta_min: the smallest rate.
        last_epoch: the index of the last epoch (-1: start).

    Example:
        >>> from js.optim.lr_scheduler import CosineAnnealingLR
        >>> class Opt:
        ...     param_groups = [{"lr": 0.1}]
        >>> scheduler = CosineAnnealingLR(Opt(), T_max=100, eta_min=1e-4)
    """

    def __init__(
        self, optimizer: Any, T_max: int, eta_min: float = 0.0, last_epoch: int = -1
    ) -> None:
        self.T_max = check_int("CosineAnnealingLR", "T_max", T_max, 1)
        self.eta_min = _number("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """PyTorch's recursive form (its closed form on a resumed first step)."""
        self._warn_outside_step()
        groups = self.optimizer.param_groups
        if self._is_initial:
            return _lrs(self.optimizer)
        if self._step_count == 1 and self.last_epoch > 0:
            return [
                self.eta_min
                + (base_lr - self.eta_min)
                * (1 + math.cos((self.last_epoch) * math.pi / self.T_max))
                / 2
                for base_lr in self.base_lrs
            ]
        if (self.last_epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            return [
                group["lr"] + (base_lr - self.eta_min) * (1 - math.cos(math.pi / self.T_max)) / 2
                for base_lr, group in zip(self.base_lrs, groups, strict=True)
            ]
        return [
            (1 + math.cos(math.pi * self.last_epoch / self.T_max))
            / (1 + math.cos(math.pi * (self.last_epoch - 1) / self.T_max))
            * (group["lr"] - self.eta_min)
            + self.eta_min
            for group in groups
        ]

    def _get_closed_form_lr(self) -> list[float]:
        return [
            self.eta_min
            + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
            for base_lr in self.base_lrs
        ]
