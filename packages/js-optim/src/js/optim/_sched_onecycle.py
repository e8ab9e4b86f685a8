"""``OneCycleLR``: the one-cycle policy, rate and momentum (the public face is
``js.optim.lr_scheduler``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from js._checks import check_int, check_number

from ._optimizer import Optimizer
from ._sched_base import (
    LRScheduler,
    _groups,
    _per_group,
)


class OneCycleLR(LRScheduler):
    """The 1cycle policy: from ``max_lr / div_factor`` up to ``max_lr`` and down to
    ``initial_lr / final_div_factor`` over ``total_steps`` steps (stepped per batch).

    Adds ``'initial_lr'``, ``'max_lr'`` and ``'min_lr'`` to each group; with
    ``cycle_momentum`` it cycles ``'momentum'`` (SGD) or ``betas[0]`` (Adam family) inversely
    between ``max_momentum`` and ``base_momentum`` and adds those keys too. Stepping past
    ``total_steps`` raises, as in PyTorch.

    Args:
        optimizer: the optimizer.
        max_lr: the peak rate, or one per group.
        total_steps: steps in the cycle; or give ``epochs`` and ``steps_per_epoch``.
        epochs: epochs to train, with ``steps_per_epoch``.
        steps_per_epoch: steps per epoch, with ``epochs``.
        pct_start: the fraction of the cycle spent increasing the rate (a float in [0, 1]).
        anneal_strategy: ``'cos'`` or ``'linear'``.
        cycle_momentum: cycle the momentum (needs ``momentum`` or ``betas`` in the groups).
        base_momentum: the lower momentum, or one per group.
        max_momentum: the upper momentum, or one per group.
        div_factor: ``initial_lr = max_lr / div_factor``.
        final_div_factor: ``min_lr = initial_lr / final_div_factor``.
        three_phase: a third phase annihilates the rate (fastai's variant), as PyTorch.
        last_epoch: the index of the last batch (-1: start).

    Example:
        >>> from js.optim.lr_scheduler import OneCycleLR
        >>> class Opt:
        ...     param_groups = [{"lr": 0.1, "momentum": 0.9}]
        >>> scheduler = OneCycleLR(Opt(), max_lr=0.1, total_steps=100)
        >>> round(scheduler.get_last_lr()[0], 6)
        0.004
    """

    def __init__(
        self,
        optimizer: Any,
        max_lr: float | list[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: Literal["cos", "linear"] = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | list[float] = 0.85,
        max_momentum: float | list[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        groups = _groups("OneCycleLR", optimizer)
        self.optimizer = optimizer
        if total_steps is not None:
            self.total_steps = check_int("OneCycleLR", "total_steps", total_steps, 1)
        elif epochs is not None and steps_per_epoch is not None:
            epochs = check_int("OneCycleLR", "epochs", epochs, 1)
            self.total_steps = epochs * check_int(
                "OneCycleLR", "steps_per_epoch", steps_per_epoch, 1
            )
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        pct_start = check_number("OneCycleLR", "pct_start", pct_start, 0, 1)
        self._schedule_phases = _phases(three_phase, pct_start, self.total_steps)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}"
            )
        self._anneal_func_type = anneal_strategy
        if cycle_momentum and _momentum_key(optimizer, groups) == "momentum":
            _check_momentum_kept(optimizer, groups)
        max_lrs = _per_group("max_lr", groups, max_lr)
        if last_epoch == -1:
            for index, group in enumerate(groups):
                group["initial_lr"] = max_lrs[index] / div_factor
                group["max_lr"] = max_lrs[index]
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _momentum_key(optimizer, groups) == "betas"
            max_momentums = _per_group("max_momentum", groups, max_momentum)
            base_momentums = _per_group("base_momentum", groups, base_momentum)
            if last_epoch == -1:
                for high, low, group in zip(max_momentums, base_momentums, groups, strict=True):
                    if self.use_beta1:
                        group["betas"] = (high, *group["betas"][1:])
                    else:
                        group["momentum"] = high
                    group["max_momentum"] = high
                    group["base_momentum"] = low
        super().__init__(optimizer, last_epoch)

    def _anneal_func(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        """The rate of step ``last_epoch`` in its phase (and the momentum, written)."""
        self._warn_outside_step()
        step_num = self.last_epoch
        if step_num > self.total_steps:
            raise ValueError(
                f"Tried to step {step_num} times. The specified number of total steps is "
                f"{self.total_steps}"
            )
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for index, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step_num <= end_step or index == len(self._schedule_phases) - 1:
                    pct = (step_num - start_step) / (end_step - start_step)
                    lr = self._anneal_func(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                    if self.cycle_momentum:
                        momentum = self._anneal_func(
                            group[phase["start_momentum"]], group[phase["end_momentum"]], pct
                        )
                    break
                start_step = phase["end_step"]
            lrs.append(lr)  # pyright: ignore[reportPossiblyUnbound]  (the last phase always breaks)
            if self.cycle_momentum:
                if self.use_beta1:
                    group["betas"] = (momentum, *group["betas"][1:])  # pyright: ignore[reportPossiblyUnbound]
                else:
                    group["momentum"] = momentum  # pyright: ignore[reportPossiblyUnbound]
        return lrs


def _phases(three_phase: bool, pct_start: float, total_steps: int) -> list[dict[str, Any]]:
    """OneCycleLR's phases: the step each ends at, and the group keys it goes between."""
    up = {
        "end_step": float(pct_start * total_steps) - 1,
        "start_lr": "initial_lr",
        "end_lr": "max_lr",
        "start_momentum": "max_momentum",
        "end_momentum": "base_momentum",
    }
    if not three_phase:
        down = ("max_lr", "min_lr", "base_momentum", "max_momentum")
        return [up, _phase(total_steps - 1, *down)]
    back = ("max_lr", "initial_lr", "base_momentum", "max_momentum")
    last = ("initial_lr", "min_lr", "max_momentum", "max_momentum")
    return [
        up,
        _phase(float(2 * pct_start * total_steps) - 2, *back),
        _phase(total_steps - 1, *last),
    ]


def _phase(end_step: float, *keys: str) -> dict[str, Any]:
    names = ("start_lr", "end_lr", "start_momentum", "end_momentum")
    return {"end_step": end_step, **dict(zip(names, keys, strict=True))}


def _momentum_key(optimizer: Any, groups: list) -> str:
    """``'betas'`` or ``'momentum'``: what OneCycleLR cycles (from ``optimizer.defaults``, as
    PyTorch, or the first group's keys for an optimizer without ``defaults``)."""
    defaults = getattr(optimizer, "defaults", None)
    keys = set(defaults) if isinstance(defaults, Mapping) else set(groups[0].keys())
    if "momentum" not in keys and "betas" not in keys:
        raise ValueError(
            "optimizer must support momentum or beta1 with `cycle_momentum` option enabled. "
            "Fix: cycle_momentum=False."
        )
    return "betas" if "betas" in keys else "momentum"


def _check_momentum_kept(optimizer: Any, groups: list) -> None:
    """A js optimizer built without momentum keeps no momentum buffer, and cannot start one
    by a write (torch's SGD does): refuse before any group is written."""
    if not isinstance(optimizer, Optimizer):
        return
    for index, group in enumerate(groups):
        if group.get("momentum", 0) == 0:
            raise ValueError(
                f"OneCycleLR: cycle_momentum=True writes a momentum between base_momentum and "
                f"max_momentum into every group, but param_groups[{index}] was built with "
                f"momentum=0, so {type(optimizer).__name__} keeps no momentum buffer for it. "
                f"Fix: build it with momentum (e.g. {type(optimizer).__name__}(..., "
                "momentum=0.9)), or pass cycle_momentum=False."
            )
