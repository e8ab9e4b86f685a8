"""ReduceLROnPlateau, the scheduler reacting to a metric (the public face is
``js.optim.lr_scheduler``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Literal, SupportsFloat

from js._checks import check_int, check_number

from ._sched_base import (
    EPOCH_DEPRECATION_WARNING,
    LRScheduler,
    _check_float_lr,
    _groups,
    _lrs,
    _number,
)


class ReduceLROnPlateau(LRScheduler):
    """Multiply the rate by ``factor`` once ``metrics`` has not improved for more than
    ``patience`` epochs; ``step(metrics)`` once per epoch (after validation).

    Args:
        optimizer: the optimizer.
        mode: ``'min'`` (a lower metric is better) or ``'max'``.
        factor: ``new_lr = lr * factor`` (< 1).
        patience: epochs without improvement tolerated (>= 0).
        threshold: the least relative (or absolute) change that counts as an improvement.
        threshold_mode: ``'rel'`` (``best * (1 -/+ threshold)``) or ``'abs'``
            (``best -/+ threshold``).
        cooldown: epochs after a reduction during which bad epochs are not counted (>= 0).
        min_lr: a lower bound on the rate, or one per group.
        eps: a reduction smaller than this is skipped.

    Example:
        >>> from js.optim.lr_scheduler import ReduceLROnPlateau
        >>> class Opt:
        ...     param_groups = [{"lr": 0.1}]
        >>> scheduler = ReduceLROnPlateau(Opt(), patience=1)
        >>> for loss in (1.0, 1.0, 1.0):
        ...     scheduler.step(loss)
        >>> scheduler.get_last_lr()
        [0.010000000000000002]
    """

    def __init__(
        self,
        optimizer: Any,
        mode: Literal["min", "max"] = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: Literal["rel", "abs"] = "rel",
        cooldown: int = 0,
        min_lr: list[float] | float = 0,
        eps: float = 1e-8,
    ) -> None:
        owner = "ReduceLROnPlateau"
        check_number(owner, "factor", factor, high=1, open_high=True)
        self.factor = factor
        groups = _groups(owner, optimizer)
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(groups):
                raise ValueError(f"expected {len(groups)} min_lrs, got {len(min_lr)}")
            self.default_min_lr = None
            self.min_lrs = list(min_lr)
        else:
            self.default_min_lr = _number(owner, "min_lr", min_lr)
            self.min_lrs = [min_lr] * len(groups)
        self.patience = check_int(owner, "patience", patience, 0)
        self.cooldown = check_int(owner, "cooldown", cooldown, 0)
        self.eps = _number(owner, "eps", eps)
        self.last_epoch = 0
        self._last_lr = _lrs(optimizer)
        self._init_is_better(mode=mode, threshold=threshold, threshold_mode=threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics: SupportsFloat, epoch: int | None = None) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
        """Count one epoch with the monitored value ``metrics``; reduce the rates when due.

        Args:
            metrics: the monitored value (a float, or a 0-d array read to the host).
            epoch: deprecated in PyTorch: the epoch's index (with its warning).
        """
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs in cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _lrs(self.optimizer)

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(
                    f"The number of param groups in the `optimizer` ({len(groups)}) differs "
                    f"from when `ReduceLROnPlateau` was initialized ({len(self.min_lrs)}). "
                    "Fix: set the `min_lrs` field to one value per group."
                )
            self.min_lrs = [self.default_min_lr] * len(groups)
        for index, group in enumerate(groups):
            _check_float_lr("ReduceLROnPlateau", index, group)
            old_lr = float(group["lr"])
            new_lr = max(old_lr * self.factor, self.min_lrs[index])
            if old_lr - new_lr > self.eps:
                group["lr"] = new_lr

    @property
    def in_cooldown(self) -> bool:
        """Whether a reduction happened less than ``cooldown`` epochs ago."""
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min" and self.threshold_mode == "abs":
            return a < best - self.threshold
        if self.mode == "max" and self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"mode {mode!r} is unknown! Fix: mode='min' or 'max'.")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(
                f"threshold mode {threshold_mode!r} is unknown! Fix: threshold_mode='rel' or 'abs'."
            )
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode = mode
        self.threshold = _number("ReduceLROnPlateau", "threshold", threshold)
        self.threshold_mode = threshold_mode

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (mode and thresholds checked again)."""
        super().load_state_dict(state_dict)
        self._init_is_better(
            mode=self.mode, threshold=self.threshold, threshold_mode=self.threshold_mode
        )
