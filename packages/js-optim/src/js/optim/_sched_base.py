"""The scheduler base class, ``LRScheduler``, and the argument checks of the schedulers (the
public face is ``js.optim.lr_scheduler``).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from typing import Any

from js._checks import check_int, check_number

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated "
    "where possible. Please use `scheduler.step()` to step the scheduler. During the "
    "deprecation, if epoch is different from None, the closed form is used instead of the "
    "new chainable form, where available."
)


# -- argument checks -----------------------------------------------------------------------------


def _groups(owner: str, optimizer: Any) -> list:
    """The optimizer's param groups, after checking each has a float ``lr`` to write."""
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, Sequence) or isinstance(groups, str) or len(groups) == 0:
        raise TypeError(
            f"{owner}: the optimizer must have param_groups, a non-empty list of dict-like "
            f"groups with 'lr', got {type(optimizer).__name__}. Fix: pass a js.optim optimizer "
            "(js.optim.SGD(model.parameters(), lr=0.1))."
        )
    for index, group in enumerate(groups):
        if not (hasattr(group, "__getitem__") and hasattr(group, "__setitem__")):
            raise TypeError(
                f"{owner}: optimizer.param_groups[{index}] is a {type(group).__name__}, not a "
                "dict-like group"
            )
        _check_float_lr(owner, index, group)
    return list(groups)


def _check_float_lr(owner: str, index: int, group: Any) -> None:
    if "lr" not in group:
        raise KeyError(f"{owner}: optimizer.param_groups[{index}] has no 'lr'")
    if callable(group["lr"]):
        raise TypeError(
            f"{owner}: optimizer.param_groups[{index}]['lr'] is a traced schedule "
            f"({group['lr']!r}), evaluated inside the compiled step; a scheduler writes a float "
            "rate on the host and has nothing to write there. Fix: build the optimizer with a "
            "float lr (lr=0.1) for this scheduler, or keep the traced schedule without a "
            "scheduler."
        )


def _number(owner: str, name: str, value: Any, low: float | None = None) -> float:
    """A real number (``>= low``), checked by ``js._checks`` and kept as given: the rates are
    computed with it in PyTorch's arithmetic."""
    check_number(owner, name, value, low)
    return value


def _per_group(name: str, groups: list, value: Any) -> list:
    """``value`` per group: a list/tuple of one per group, or one value for all (torch's
    ``_format_param``)."""
    if isinstance(value, (list, tuple)):
        if len(value) != len(groups):
            raise ValueError(
                f"{name} must have the same length as optimizer.param_groups. {name} has "
                f"{len(value)} values, param_groups has {len(groups)}."
            )
        return list(value)
    return [value] * len(groups)


def _lrs(optimizer: Any) -> list:
    return [group["lr"] for group in optimizer.param_groups]


def _state(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """A copy of ``obj.__dict__`` without the optimizer and ``skip``: PyTorch's state keys."""
    return {
        key: copy.deepcopy(value)
        for key, value in obj.__dict__.items()
        if key != "optimizer" and key not in skip
    }


# -- the base class ------------------------------------------------------------------------------


class LRScheduler:
    """Base class of the schedulers: ``step()``, ``get_last_lr()``, ``last_epoch``, state dicts.

    Subclasses implement :meth:`get_lr` (the rates after ``last_epoch`` advanced) and may
    implement ``_get_closed_form_lr`` (used by ``step(epoch)``), as in PyTorch. Building one
    adds ``'initial_lr'`` to every group (``setdefault``: a second scheduler on the same
    optimizer keeps the first's) and performs the initial step, ``last_epoch`` 0.

    Args:
        optimizer: an optimizer with ``param_groups`` whose ``lr`` are floats.
        last_epoch: the index of the last epoch; -1 (default) starts a schedule. Another value
            needs ``'initial_lr'`` in every group already (resuming a schedule).

    Example:
        >>> from js.optim.lr_scheduler import ExponentialLR
        >>> class Opt:
        ...     param_groups = [{"lr": 1.0}]
        >>> scheduler = ExponentialLR(Opt(), gamma=0.5)
        >>> scheduler.step(); scheduler.step()
        >>> scheduler.last_epoch, scheduler.get_last_lr()
        (2, [0.25])
    """

    _get_lr_called_within_step: bool = False
    _is_initial: bool = False

    def __init__(self, optimizer: Any, last_epoch: int = -1) -> None:
        owner = type(self).__name__
        groups = _groups(owner, optimizer)
        last_epoch = check_int(owner, "last_epoch", last_epoch, -1)
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in groups:
                if "initial_lr" not in group:
                    group["initial_lr"] = group["lr"]
        else:
            for i, group in enumerate(groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when "
                        "resuming scheduler with last_epoch >= 0. Fix: build the scheduler "
                        "with last_epoch=-1 and load its state_dict, or restore the optimizer "
                        "first."
                    )
        self.base_lrs: list[float] = [group["initial_lr"] for group in groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        """Set the step count to 0 and perform the initial step (``last_epoch`` + 1)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state: every attribute but the optimizer (PyTorch's keys, copied).

        Returns:
            A dict of plain Python values (``last_epoch``, ``base_lrs``, ``_last_lr``,
            ``_step_count``, the scheduler's options, ...).
        """
        return _state(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (the optimizer's own ``lr`` is restored by the
        optimizer's ``load_state_dict``).

        Args:
            state_dict: a dict returned by :meth:`state_dict`.
        """
        self.__dict__.update(copy.deepcopy(dict(state_dict)))

    def get_last_lr(self) -> list[float]:
        """The rates the last :meth:`step` wrote, one per param group (a new list)."""
        return list(self._last_lr)

    def get_lr(self) -> list[float]:
        """The rates for ``last_epoch``, one per group: called by :meth:`step` (use
        :meth:`get_last_lr` to read the current ones)."""
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        """Advance ``last_epoch`` by one and write each group's new ``lr``.

        Args:
            epoch: deprecated in PyTorch: sets ``last_epoch`` to ``epoch`` and uses the closed
                form where there is one (with PyTorch's warning).
        """
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        owner = type(self).__name__
        for index, group in enumerate(self.optimizer.param_groups):
            _check_float_lr(owner, index, group)
        self._get_lr_called_within_step = True
        try:
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed_form = getattr(self, "_get_closed_form_lr", None)
                values = closed_form() if closed_form is not None else self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = _lrs(self.optimizer)

    def _warn_outside_step(self) -> None:
        if not self._get_lr_called_within_step:
            warnings.warn(
                "To get the last learning rate computed by the scheduler, please use "
                "`get_last_lr()`.",
                UserWarning,
                stacklevel=3,
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self.get_last_lr()})"
