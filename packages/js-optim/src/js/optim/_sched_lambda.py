"""``LambdaLR``: the rate as a function of the epoch (the public face is
``js.optim.lr_scheduler``)."""

from __future__ import annotations

import copy
import types
from collections.abc import Callable
from typing import Any

from ._sched_base import (
    LRScheduler,
    _groups,
    _state,
)


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
