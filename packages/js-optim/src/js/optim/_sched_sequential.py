"""``SequentialLR``: schedulers one after another (the public face is
``js.optim.lr_scheduler``)."""

from __future__ import annotations

import copy
from bisect import bisect_right
from typing import Any

from js._checks import check_int

from ._sched_base import (
    LRScheduler,
    _groups,
    _state,
)
from ._sched_plateau import ReduceLROnPlateau


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another, switching at each milestone epoch.

    At a milestone the next scheduler starts from its initial rates (PyTorch's
    ``_update_lr(0)``). Build the inner schedulers on the same optimizer first.

    Args:
        optimizer: the optimizer all ``schedulers`` write.
        schedulers: the schedulers, in order (not ``ReduceLROnPlateau``).
        milestones: the epochs where the next one starts; one fewer than ``schedulers``.
        last_epoch: the index of the last epoch (-1: start).

    Example:
        >>> from js.optim.lr_scheduler import LinearLR, SequentialLR, ExponentialLR
        >>> class Opt:
        ...     param_groups = [{"lr": 1.0}]
        >>> opt = Opt()
        >>> warmup = LinearLR(opt, start_factor=0.5, total_iters=2)
        >>> decay = ExponentialLR(opt, gamma=0.5)
        >>> scheduler = SequentialLR(opt, [warmup, decay], milestones=[2])
        >>> lrs = []
        >>> for _ in range(4):
        ...     lrs.append(scheduler.get_last_lr()[0])
        ...     scheduler.step()
        >>> lrs
        [0.5, 0.75, 1.0, 0.5]
    """

    def __init__(
        self,
        optimizer: Any,
        schedulers: list[LRScheduler],
        milestones: list[int],
        last_epoch: int = -1,
    ) -> None:
        name = type(self).__name__
        _groups(name, optimizer)
        if len(schedulers) < 1:
            raise ValueError(f"{name} expects at least one scheduler, but got no scheduler.")
        for index, scheduler in enumerate(schedulers):
            if not hasattr(scheduler, "optimizer"):
                raise TypeError(
                    f"{name} at index {index} should have `optimizer` as its attribute."
                )
            if isinstance(scheduler, ReduceLROnPlateau):
                raise ValueError(
                    f"{name} does not support `ReduceLROnPlateau` scheduler as it requires "
                    "additional kwargs to be specified when calling `step`, but got one at "
                    f"index {index} in the given schedulers sequence."
                )
            if scheduler.optimizer is not optimizer:
                raise ValueError(
                    f"{name} expects all schedulers to belong to the same optimizer, but got "
                    f"scheduler {type(scheduler).__name__} at index {index} built on another "
                    "optimizer."
                )
        milestones = list(milestones)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                "Sequential Schedulers expects number of schedulers provided to be one more "
                f"than the number of milestone points, but got number of schedulers "
                f"{len(schedulers)} and the number of milestones to be equal to {len(milestones)}"
            )
        for value in milestones:
            check_int(name, "every milestone", value, 0)
        last_epoch = check_int(name, "last_epoch", last_epoch, -1)
        self._schedulers = list(schedulers)
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:  # back to the initial rates
            group["lr"] = group["initial_lr"]
        self.recursive_undo()  # undo the initial step the inner schedulers performed
        index = bisect_right(self._milestones, 0)
        self._schedulers[index]._initial_step()
        self._last_lr = self._schedulers[index].get_last_lr()

    def recursive_undo(self, sched: Any = None) -> None:
        """Step back ``last_epoch`` of every (nested) inner scheduler by one."""
        scheds = self if sched is None else sched
        if hasattr(scheds, "_schedulers"):
            for s in scheds._schedulers:
                self.recursive_undo(s)
        elif hasattr(scheds, "last_epoch"):
            scheds.last_epoch -= 1

    def step(self) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]  (as torch)
        """Step the scheduler of the current epoch (the next one restarts at its milestone)."""
        self.last_epoch += 1
        index = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """As :meth:`LRScheduler.state_dict`, with each inner scheduler's under
        ``'_schedulers'``."""
        state = _state(self, skip=("_schedulers",))
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As :meth:`LRScheduler.load_state_dict`, loading each inner scheduler's too."""
        state = dict(state_dict)
        inner = state.pop("_schedulers")
        self.__dict__.update(copy.deepcopy(state))
        for scheduler, saved in zip(self._schedulers, inner, strict=True):
            scheduler.load_state_dict(saved)
