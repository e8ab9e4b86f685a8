"""A Task's learning-rate scheduler: Lightning's configuration, checked; when the Trainer steps
it; how its state enters a checkpoint.

``Task(model, optimizer, lr_scheduler=...)`` takes a scheduler (``js.optim.lr_scheduler``) or
Lightning's dict ``{"scheduler": s, "interval": "epoch" | "step", "frequency": 1, "monitor":
"val/loss", "strict": True}``. The Trainer steps it every ``frequency`` epochs (at an epoch's
end, after validation) or every ``frequency`` optimizer steps, and feeds a
``ReduceLROnPlateau`` the monitored value of the row of that epoch or step. A scheduler of
interval ``"step"`` must step between two optimizer steps, so with ``steps_per_execution=K``
the Trainer ends a dispatch at each multiple of ``frequency`` (and refuses ``frequency=1``,
which would leave one step per dispatch: a traced schedule ``lr=`` is the fix there).
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from js._checks import check_int
from js.optim.lr_scheduler import ReduceLROnPlateau

_KEYS = ("scheduler", "interval", "frequency", "monitor", "strict")


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
    """A checked scheduler configuration (Lightning's ``LRSchedulerConfig``, less ``name``)."""

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True

    @property
    def plateau(self) -> bool:
        return isinstance(self.scheduler, ReduceLROnPlateau)


def scheduler_config(lr_scheduler: Any, optimizer: Any) -> SchedulerConfig | None:
    """The checked configuration of ``Task(lr_scheduler=...)`` (None for None)."""
    if lr_scheduler is None:
        return None
    if isinstance(lr_scheduler, Mapping):
        unknown = sorted(set(map(str, lr_scheduler)) - set(_KEYS))
        if unknown:
            raise KeyError(
                f"Task lr_scheduler: unknown keys {unknown}; the keys are {list(_KEYS)} "
                "(Lightning's, less 'name'). Fix: {'scheduler': s, 'interval': 'step', ...}."
            )
        if "scheduler" not in lr_scheduler:
            raise KeyError(
                "Task lr_scheduler: the dict has no 'scheduler'. Fix: {'scheduler': "
                "StepLR(optimizer, 30), 'interval': 'epoch'}."
            )
        config = SchedulerConfig(**lr_scheduler)
    else:
        config = SchedulerConfig(lr_scheduler)
    _check(config, optimizer)
    return config


def _check(config: SchedulerConfig, optimizer: Any) -> None:
    scheduler = config.scheduler
    missing = [
        name
        for name in ("step", "get_last_lr", "state_dict", "load_state_dict")
        if not callable(getattr(scheduler, name, None))
    ]
    if missing or not hasattr(scheduler, "optimizer"):
        raise TypeError(
            f"Task lr_scheduler: expected a scheduler (js.optim.lr_scheduler), got "
            f"{type(scheduler).__name__}, which has no {missing or ['optimizer']}."
        )
    if scheduler.optimizer is not optimizer:
        raise ValueError(
            f"Task lr_scheduler: the {type(scheduler).__name__} was built on another optimizer "
            "than the task's. Fix: build it on the optimizer passed to Task."
        )
    if config.interval not in ("epoch", "step"):
        raise ValueError(
            f"Task lr_scheduler: interval must be 'epoch' or 'step', got {config.interval!r}"
        )
    check_int("Task lr_scheduler", "frequency", config.frequency, 1)
    if config.monitor is not None and not isinstance(config.monitor, str):
        raise TypeError(
            f"Task lr_scheduler: monitor must be a metric name such as 'val/loss', got "
            f"{config.monitor!r}"
        )
    if not isinstance(config.strict, bool):
        raise TypeError(f"Task lr_scheduler: strict must be True or False, got {config.strict!r}")
    if config.plateau and config.monitor is None:
        raise ValueError(
            "Task lr_scheduler: ReduceLROnPlateau steps on a monitored metric, and none was "
            "given. Fix: lr_scheduler={'scheduler': scheduler, 'monitor': 'val/loss'}."
        )


def check_fit(config: SchedulerConfig, trainer: Any, has_val: bool) -> None:
    """Refuse, before a step runs, what a fit could not schedule exactly."""
    k = trainer.steps_per_execution
    if config.interval == "step" and config.frequency == 1 and k > 1:
        raise ValueError(
            f"Trainer(steps_per_execution={k}) runs {k} optimizer steps per dispatch, but the "
            "task's scheduler (interval 'step', frequency 1) must step on the host between "
            "every two of them: each dispatch would run one step. Fix: a traced schedule "
            "evaluated inside the step (lr=js.optim.cosine_schedule(...) on the optimizer, "
            "no lr_scheduler), steps_per_execution=1, or a frequency that is a multiple of "
            f"{k}."
        )
    if not config.plateau or not config.strict:
        return
    monitor = config.monitor
    assert monitor is not None  # checked by scheduler_config
    if monitor.startswith("val/") and not has_val:
        raise KeyError(
            f"ReduceLROnPlateau conditioned on metric {monitor!r}, which needs val_data: no "
            "validation runs in this fit. Fix: pass val_data to fit, or monitor 'train/loss'."
        )
    if config.interval == "step":
        every = trainer.val_every_n_steps if monitor.startswith("val/") else None
        every = trainer.log_every_n_steps if monitor.startswith("train/") else every
        name = "val_every_n_steps" if monitor.startswith("val/") else "log_every_n_steps"
        if every is None or config.frequency % every:
            raise ValueError(
                f"ReduceLROnPlateau steps every {config.frequency} optimizer steps (interval "
                f"'step') on {monitor!r}, but the Trainer produces it every {every} steps "
                f"({name}). Fix: Trainer({name}=n) with n dividing frequency={config.frequency}, "
                "or interval 'epoch'."
            )


def scheduler_room(config: SchedulerConfig | None, step: int) -> int:
    """Steps until the next step of an interval-'step' scheduler (large when none)."""
    if config is None or config.interval != "step":
        return 1 << 30
    return config.frequency - step % config.frequency


def step_scheduler(config: SchedulerConfig, row: Mapping[str, float]) -> None:
    """One ``scheduler.step()``; a ReduceLROnPlateau gets ``row[monitor]``."""
    if not config.plateau:
        config.scheduler.step()
        return
    monitor = config.monitor or ""  # a plateau's monitor is checked when the Task is built
    if monitor not in row:
        message = (
            f"ReduceLROnPlateau conditioned on metric {monitor!r} which is not available. "
            f"Available metrics are: {sorted(row)}. Condition can be set using `monitor` key "
            "in lr scheduler dict"
        )
        if config.strict:
            raise KeyError(message)
        warnings.warn(message + "; the scheduler did not step (strict=False).", stacklevel=3)
        return
    config.scheduler.step(float(row[monitor]))


def lr_columns(config: SchedulerConfig | None) -> dict[str, float]:
    """``lr`` (group 0's rate) and ``lr/pg<i>`` for each further group, as written now."""
    if config is None:
        return {}
    groups = config.scheduler.optimizer.param_groups
    columns = {"lr": float(groups[0]["lr"])}
    columns.update({f"lr/pg{i}": float(g["lr"]) for i, g in enumerate(groups) if i})
    return columns


# -- checkpoints ---------------------------------------------------------------------------------


def _numeric(state: Mapping) -> dict[str, Any]:
    """The numbers of a scheduler's state dict as arrays (nested for lists of dicts); strings,
    None and callables (options fixed at construction) are left out."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, (bool, numbers.Real)):
            out[str(key)] = np.asarray(value, np.float64 if isinstance(value, float) else None)
        elif isinstance(value, (list, tuple)) and value:
            if all(isinstance(v, Mapping) or v is None for v in value):  # schedulers, lambdas
                out[str(key)] = {str(i): _numeric(v) for i, v in enumerate(value) if v is not None}
            elif all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value):
                floats = any(isinstance(v, float) for v in value)
                out[str(key)] = np.asarray(value, np.float64 if floats else np.int64)
    return out


def _merged(current: Mapping, saved: Mapping) -> dict[str, Any]:
    """``current`` (a scheduler's state dict) with its numbers replaced by ``saved``'s."""
    out = dict(current)
    for key, value in current.items():
        if str(key) not in saved:
            continue
        new = saved[str(key)]
        if isinstance(value, (list, tuple)) and isinstance(new, Mapping):
            out[key] = [
                _merged(v, new[str(i)]) if isinstance(v, Mapping) else v
                for i, v in enumerate(value)
            ]
        elif isinstance(value, (list, tuple)):
            out[key] = type(value)(np.asarray(new).tolist())
        else:
            out[key] = np.asarray(new).item()
    return out


class SchedulerState:
    """A scheduler as a checkpoint object: its numbers (epoch counters, base and last rates,
    a plateau's best and counters) as arrays, and the optimizer's current rates (``lrs``).

    Loading writes the numbers into the scheduler's state dict and the rates into the
    optimizer's groups: a resumed fit continues the same sequence of rates.
    """

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def state_dict(self) -> dict[str, Any]:
        """``{'scheduler': {...}, 'lrs': float64[groups]}``."""
        groups = self.scheduler.optimizer.param_groups
        return {
            "scheduler": _numeric(self.scheduler.state_dict()),
            "lrs": np.asarray([float(g["lr"]) for g in groups], np.float64),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`."""
        self.scheduler.load_state_dict(_merged(self.scheduler.state_dict(), state["scheduler"]))
        for group, lr in zip(
            self.scheduler.optimizer.param_groups, np.asarray(state["lrs"]).tolist(), strict=True
        ):
            group["lr"] = lr
