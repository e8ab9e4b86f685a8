"""Learning-rate schedulers on the host, as ``torch.optim.lr_scheduler`` (PyTorch 2.13).

A scheduler writes ``optimizer.param_groups[i]["lr"]`` between steps, in Python doubles with
PyTorch's own arithmetic: the chainable ``get_lr`` recursion (each rate computed from the
group's current one) where PyTorch uses it, its closed forms where it does (``step(epoch)``,
a resumed ``CosineAnnealingLR``), so the sequence of rates equals PyTorch's exactly. A js
optimizer reads a written ``lr`` at its next step without compiling again (the rate is an
array of its state, not a constant of the program).

This is the other way to vary the rate. A *traced* schedule, ``lr=cosine_schedule(...)`` (a
callable of the step count evaluated inside the compiled step), needs no host work per step
and runs under ``Trainer(steps_per_execution=K)``; a scheduler here is PyTorch's object, with
its state dict, ``ReduceLROnPlateau`` reacting to a metric and ``SequentialLR`` chaining
others. A group whose ``lr`` is a traced schedule is refused: it has no rate to write.

Differences from PyTorch: the optimizer is any object with ``param_groups`` (a list of
dict-like groups with ``"lr"``), not checked to be a ``torch.optim.Optimizer``; PyTorch's
warning about calling ``scheduler.step()`` before ``optimizer.step()`` (which patches the
optimizer's ``step``) is not given. State dicts have PyTorch's keys, so one saved by PyTorch
loads here (lambdas excepted, as there).

Example:
    >>> from js.optim.lr_scheduler import StepLR
    >>> class Opt:  # any object with param_groups: js.optim's optimizers have them
    ...     param_groups = [{"lr": 0.1}]
    >>> scheduler = StepLR(Opt(), step_size=2, gamma=0.5)
    >>> lrs = []
    >>> for epoch in range(5):
    ...     lrs.append(scheduler.get_last_lr()[0])
    ...     scheduler.step()
    >>> lrs
    [0.1, 0.1, 0.05, 0.05, 0.025]
"""

from __future__ import annotations

import copy
import math
import numbers
import types
import warnings
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, SupportsFloat

from ._optimizer import Optimizer

__all__ = [
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "OneCycleLR",
    "ReduceLROnPlateau",
    "SequentialLR",
    "StepLR",
]

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


def _number(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a number, got {value!r}")
    return value  # pyright: ignore[reportReturnType]  (a Real, kept as given: its arithmetic)


def _int(owner: str, name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{owner}: {name} must be an int >= {low}, got {value!r}")
    return int(value)


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
        last_epoch = _int(owner, "last_epoch", last_epoch, -1)
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
        start_factor = _number("LinearLR", "start_factor", start_factor)
        end_factor = _number("LinearLR", "end_factor", end_factor)
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError(
                "Starting multiplicative factor expected to be greater than 0 and less or "
                f"equal to 1, got start_factor={start_factor!r}."
            )
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError(
                "Ending multiplicative factor expected to be between 0 and 1, got "
                f"end_factor={end_factor!r}."
            )
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


# -- combinations, cycles and plateaus -----------------------------------------------------------


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
            _int(name, "every milestone", value, 0)
        last_epoch = _int(name, "last_epoch", last_epoch, -1)
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
            if (
                isinstance(total_steps, bool)
                or not isinstance(total_steps, int)
                or total_steps <= 0
            ):
                raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            if not isinstance(epochs, int) or epochs <= 0:
                raise ValueError(f"Expected positive integer epochs, but got {epochs}")
            if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
                raise ValueError(
                    f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}"
                )
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        self._schedule_phases = _phases(three_phase, pct_start, self.total_steps)
        if not isinstance(pct_start, float) or pct_start < 0 or pct_start > 1:
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
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
        if _number(owner, "factor", factor) >= 1.0:
            raise ValueError(f"Factor should be < 1.0, got factor={factor!r}.")
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
        self.patience = _int(owner, "patience", patience, 0)
        self.cooldown = _int(owner, "cooldown", cooldown, 0)
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
