"""``SWALR``: torch's learning-rate annealing to a fixed rate for SWA (public in
``js.optim.swa_utils``, as in torch).

A ``js.optim.lr_scheduler.LRScheduler``: it writes ``optimizer.param_groups[i]["lr"]`` on the
host (the initial step at construction, ``last_epoch``, ``get_last_lr``, state dicts with
torch's keys).
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Sequence
from typing import Any, Literal

from js._checks import check_int

from .lr_scheduler import LRScheduler


class SWALR(LRScheduler):
    """Anneal each param group's learning rate to a fixed ``swa_lr``, as torch's ``SWALR``.

    Over ``anneal_epochs`` steps the rate moves from the group's ``lr`` to its ``swa_lr``
    (``alpha = anneal(t)``, ``t`` the fraction of the annealing done, ``lr = swa_lr * alpha +
    lr_0 * (1 - alpha)`` with torch's recursion through the group's current rate), then stays
    at ``swa_lr``. Rates are Python floats written to ``optimizer.param_groups[i]["lr"]`` on
    the host, with torch 2.13's double arithmetic (a js optimizer reads a written rate at its
    next step without compiling again). Building it adds ``'swa_lr'`` and ``'initial_lr'``
    to every group and takes torch's initial step. State dicts have torch's keys.

    Args:
        optimizer: an optimizer with ``param_groups`` whose ``lr`` are floats.
        swa_lr: the final rate, for all groups or one per group.
        anneal_epochs: steps of annealing (10; 0 jumps to ``swa_lr`` at the first step).
        anneal_strategy: ``'cos'`` (``(1 - cos(pi t)) / 2``) or ``'linear'`` (``t``).
        last_epoch: the index of the last epoch (-1: start).

    Example:
        >>> import jax.numpy as jnp, js, js.optim
        >>> from js.optim.swa_utils import SWALR
        >>> weight = js.Parameter(jnp.zeros(2))
        >>> optimizer = js.optim.SGD([{"params": [("w", weight)]}], lr=1.0)
        >>> scheduler = SWALR(optimizer, swa_lr=0.5, anneal_epochs=2, anneal_strategy="linear")
        >>> rates = []
        >>> for _ in range(3):
        ...     scheduler.step()
        ...     rates.append(optimizer.param_groups[0]["lr"])
        >>> rates
        [0.75, 0.5, 0.5]
    """

    def __init__(
        self,
        optimizer: Any,
        swa_lr: float | Sequence[float],
        anneal_epochs: int = 10,
        anneal_strategy: Literal["cos", "linear"] = "cos",
        last_epoch: int = -1,
    ) -> None:
        groups = getattr(optimizer, "param_groups", None)
        if not isinstance(groups, list) or not groups:
            raise TypeError(
                "SWALR: the optimizer must have param_groups, a non-empty list of groups with "
                f"'lr', got {type(optimizer).__name__}. Fix: pass a js.optim optimizer."
            )
        swa_lrs = list(swa_lr) if isinstance(swa_lr, (list, tuple)) else [swa_lr] * len(groups)
        if len(swa_lrs) != len(groups):
            raise ValueError(
                f"swa_lr must have the same length as optimizer.param_groups. swa_lr has "
                f"{len(swa_lrs)} values, param_groups has {len(groups)}."
            )
        for index, group in enumerate(groups):
            if not isinstance(group["lr"], numbers.Real):
                raise TypeError(
                    f"SWALR: optimizer.param_groups[{index}]['lr'] is {group['lr']!r}, not a "
                    "float rate to anneal. Fix: build the optimizer with a float lr."
                )
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}"
            )
        anneal_epochs = check_int("SWALR", "anneal_epochs", anneal_epochs, 0)
        for value, group in zip(swa_lrs, groups, strict=True):
            group["swa_lr"] = value
        self._anneal_strategy = anneal_strategy
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    def _anneal(self, t: float) -> float:
        return t if self._anneal_strategy == "linear" else (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr: float, swa_lr: float, alpha: float) -> float:
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self) -> list[float]:
        """The rates of the current step, from each group's current ``lr`` (torch's
        recursion); :meth:`step` calls it."""
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_t = max(0, min(1, (step - 1) / max(1, self.anneal_epochs)))
        prev_alpha = self._anneal(prev_t)
        groups = self.optimizer.param_groups
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        t = max(0, min(1, step / max(1, self.anneal_epochs)))
        alpha = self._anneal(t)
        return [
            g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(groups, prev_lrs, strict=True)
        ]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (torch's too: its ``anneal_func`` is left out there).

        Args:
            state_dict: a dict returned by :meth:`state_dict`.
        """
        state = {k: v for k, v in dict(state_dict).items() if k != "anneal_func"}
        self.__dict__.update(copy.deepcopy(state))
