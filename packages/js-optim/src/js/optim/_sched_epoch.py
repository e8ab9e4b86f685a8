"""Schedules of the epoch: LambdaLR, StepLR, MultiStepLR, LinearLR, ExponentialLR and
CosineAnnealingLR (the public face is ``js.optim.lr_scheduler``).
"""

from __future__ import annotations

import copy
import math
import types
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from js._checks import check_number

from ._sched_base import (
    LRScheduler,
    _groups,
    _int,
    _lrs,
    _number,
    _state,
)

# -- schedules of the epoch ----------------------------------------------------------------------


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(last_epoch)`` per group.

    Args:
        optimizer: the optimizer.
        lr_lambda: a function of the epoch giving a factor, or a list of one per group.
        last_epoch: the index of the last epoch (-1: start).

    Example:
        >>> from js.optim.lr_scheduler import LambdaLR
        >>> class Opt:
        ...     param_groups = [{"lr": 0.5}, {"lr": 0.1}]
        >>> scheduler = LambdaLR(Opt(), [lambda e: 1 / (e + 1), lambda e: 0.5**e])
        >>> scheduler.step()
        >>> scheduler.get_last_lr()
        [0.25, 0.05]
    """

    def __init__(
        self,
        optimizer: Any,
        lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        groups = _groups("LambdaLR", optimizer)
        self.optimizer = optimizer
        if not isinstance(lr_lambda, (list, tuple)):
            self.lr_lambdas = [lr_lambda] * len(groups)
        else:
            if len(lr_lambda) != len(groups):
                raise ValueError(f"Expected {len(groups)} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        for index, function in enumerate(self.lr_lambdas):
            if not callable(function):
                raise TypeError(
                    f"LambdaLR: lr_lambda[{index}] must be a function of the epoch, got "
                    f"{function!r}"
                )
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict[str, Any]:
        """As :meth:`LRScheduler.state_dict`; ``lr_lambdas`` holds, per group, None for a
        function or lambda and the ``__dict__`` of a callable object (as PyTorch)."""
        state = _state(self, skip=("lr_lambdas",))
        state["lr_lambdas"] = [
            None if isinstance(fn, types.FunctionType) else copy.deepcopy(fn.__dict__)
            for fn in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As :meth:`LRScheduler.load_state_dict`, updating callable objects' ``__dict__``."""
        state = dict(state_dict)
        lr_lambdas = state.pop("lr_lambdas")
        super().load_state_dict(state)
        for index, fn in enumerate(lr_lambdas):
            if fn is not None:
                self.lr_lambdas[index].__dict__.update(copy.deepcopy(fn))

    def get_lr(self) -> list[float]:
        """``base_lr * lr_lambda(last_epoch)`` per group."""
        self._warn_outside_step()
        return [
            base_lr * lmbda(self.last_epoch)
            for lmbda, base_lr in zip(self.lr_lambdas, self.base_lrs, strict=True)
        ]


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
        self.step_size = _int("StepLR", "step_size", step_size, 1)
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
            _int("MultiStepLR", "every milestone", value, 0)
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
        self.total_iters = _int("LinearLR", "total_iters", total_iters, 0)
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
        self.T_max = _int("CosineAnnealingLR", "T_max", T_max, 1)
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
