"""The Trainer's option checks: everything that can be refused before a step runs."""

from __future__ import annotations

import datetime
import math
import numbers
import os
from collections.abc import Mapping

import js
from js._checks import check_int, is_int

from ._callbacks import Callback, check_monitor
from ._limits import NonFiniteGuard, StopOnSignal
from ._lr_scheduling import check_fit
from ._schedule import check_loader_position
from ._signals import check_signal_directory
from ._task import check_task


def check_options(max_epochs, options: dict) -> dict:
    """The step options as ints (or None), refusing conflicting combinations."""
    checked = {
        name: None if value is None else check_int("Trainer", name, value, 1)
        for name, value in options.items()
    }
    if max_epochs is None and checked["max_steps"] is None:
        raise ValueError(
            "Trainer needs max_epochs or max_steps (or both), got neither. Fix: "
            "Trainer(max_epochs=10) or Trainer(max_steps=5000)."
        )
    most = checked["max_steps"]
    for name in ("val_every_n_steps", "log_every_n_steps"):
        every = checked[name]
        if most is not None and every is not None and every > most:
            raise ValueError(
                f"Trainer {name}={every} is more than max_steps={most}: it would never "
                f"happen. Fix: {name} <= max_steps, or None."
            )
    return checked


def check_callbacks(callbacks: tuple) -> None:
    for callback in callbacks:
        if not isinstance(callback, Callback):
            raise TypeError(
                f"Trainer callbacks must be Callback instances, got {type(callback).__name__}"
            )
    paths = [str(c.path) for c in callbacks if hasattr(c, "path")]
    if len(paths) != len(set(paths)):
        raise ValueError(
            f"Trainer got two checkpoint callbacks writing to the same path ({paths}): they "
            "would overwrite each other. Fix: give each its own directory."
        )


def check_monitors(callbacks, has_val: bool) -> None:
    """Fail before training when a callback monitors a metric no row can produce.

    The Trainer's metrics are ``epoch``, ``step``, ``time/epoch_s``, ``time/samples_per_s``,
    ``lr`` and ``<split>/loss``, ``/count`` and ``/accuracy`` (the last only when steps return
    ``correct``, known after the first step) for ``train`` and, with validation data, ``val``.
    """
    splits = ("train", "val") if has_val else ("train",)
    names = ["epoch", "step", "time/epoch_s", "time/samples_per_s", "lr"] + [
        f"{split}/{metric}" for split in splits for metric in ("loss", "count", "accuracy")
    ]
    for callback in callbacks:
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str):
            check_monitor(type(callback).__name__, monitor, names)


def check_data(data, name: str, several_epochs: bool) -> None:
    if not hasattr(data, "__iter__"):
        raise TypeError(f"fit: {name} must be an iterable of batches, got {type(data).__name__}")
    if several_epochs and iter(data) is data:
        raise TypeError(
            f"fit: {name} is a one-shot iterator (a generator?), which would be empty after the "
            "first epoch. Fix: pass a re-iterable, such as a list or an ArrayLoader, or train "
            "an endless generator with Trainer(max_steps=...) and max_epochs=None."
        )


_TIMEDELTA_KEYS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")
_MAX_TIME_FIX = (
    "Fix: a datetime.timedelta, a dict such as {'hours': 1, 'minutes': 30}, a 'DD:HH:MM:SS' "
    "string such as '00:12:00:00', or seconds as a number"
)


def check_max_time(max_time) -> float | None:
    """``Trainer(max_time=...)`` in seconds (None: no limit), as Lightning takes it: a
    ``datetime.timedelta``, a dict of ``timedelta`` keywords, a ``'DD:HH:MM:SS'`` string, or
    seconds as a number; it must be above 0."""
    if max_time is None:
        return None
    seconds = None
    if isinstance(max_time, datetime.timedelta):
        seconds = max_time.total_seconds()
    elif isinstance(max_time, Mapping):
        unknown = sorted(str(key) for key in max_time if key not in _TIMEDELTA_KEYS)
        values = max_time.values()
        if unknown or not all(isinstance(v, numbers.Real) and v is not True for v in values):
            raise ValueError(
                f"Trainer max_time={max_time!r}: a dict takes numbers under "
                f"{', '.join(_TIMEDELTA_KEYS)} (datetime.timedelta's keywords)"
                + (f", not {unknown}" if unknown else "")
                + f". {_MAX_TIME_FIX}"
            )
        seconds = datetime.timedelta(**{k: float(v) for k, v in max_time.items()}).total_seconds()
    elif isinstance(max_time, str):
        parts = max_time.strip().split(":")
        if len(parts) != 4 or not all(part.strip().isdigit() for part in parts):
            raise ValueError(
                f"Trainer max_time={max_time!r} is not 'DD:HH:MM:SS' (four whole numbers). "
                f"{_MAX_TIME_FIX}"
            )
        days, hours, minutes, secs = (int(part) for part in parts)
        seconds = datetime.timedelta(
            days=days, hours=hours, minutes=minutes, seconds=secs
        ).total_seconds()
    elif isinstance(max_time, numbers.Real) and not isinstance(max_time, bool):
        seconds = float(max_time)
    else:
        raise TypeError(f"Trainer max_time got a {type(max_time).__name__}. {_MAX_TIME_FIX}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"Trainer max_time={max_time!r} is {seconds} s: it must be a finite duration above "
            f"0. {_MAX_TIME_FIX}, or None for no limit"
        )
    return seconds


def check_on_nonfinite(on_nonfinite) -> str | None:
    """``Trainer(on_nonfinite=...)``: ``'stop'`` or None."""
    if on_nonfinite is not None and on_nonfinite != "stop":
        raise ValueError(
            f"Trainer on_nonfinite must be 'stop' or None, got {on_nonfinite!r}. Skipping the "
            "update is not offered: the update happens inside task.training_step, where "
            "jnp.where(jnp.isfinite(loss), new, old) can keep the old state. Fix: "
            "on_nonfinite='stop', or None to train on."
        )
    return on_nonfinite


def check_unroll(unroll) -> int | bool:
    """``Trainer(unroll=...)``: True, False or an int >= 1."""
    if not isinstance(unroll, bool) and not (is_int(unroll) and unroll >= 1):
        raise TypeError(
            f"Trainer unroll must be True, False or an int >= 1 (steps unrolled "
            f"per loop iteration), got {unroll!r}"
        )
    return unroll


def check_compilation_cache(compilation_cache):
    """``Trainer(compilation_cache=...)``: True, False or a directory path."""
    if not isinstance(compilation_cache, (bool, str, os.PathLike)):
        raise TypeError(
            "Trainer compilation_cache must be True, False or a directory path, got "
            f"{type(compilation_cache).__name__}. Fix: compilation_cache=False to leave "
            "JAX's cache alone, or a path such as '~/.cache/js/jax'"
        )
    return compilation_cache


def enable_cache(compilation_cache) -> None:
    """The persistent compilation cache, before the first step compiles (process-wide)."""
    if compilation_cache is not False:
        js.enable_compilation_cache(None if compilation_cache is True else compilation_cache)


def check_resume(train_data, data, epoch: int, step: int) -> None:
    """A mid-epoch ``fit(resume=True)``: the loader restored to the Trainer's epoch, and a
    grain pipeline's position restored."""
    check_loader_position(train_data, epoch)
    if data.grain is not None and data.resume_state is None:
        raise ValueError(
            f"fit(resume=True): the Trainer resumes epoch {epoch} mid-way (step {step}), but no "
            f"position of train_data (a grain {data.grain}) was restored, and it would start "
            "the epoch over. Fix: load_checkpoint(path, {..., 'trainer': trainer, 'loader': "
            "trainer.loader_position(train_data)}) with this train_data first."
        )


def check_fit_call(trainer, task, train_data, val_data, start_epoch, resume, grain) -> int:
    """Everything ``fit`` can refuse before a step runs (``grain``: the train data is a grain
    pipeline, whose ``iter()`` may start workers, so it is not iterated here); returns
    ``start_epoch`` checked. Turns on the compilation cache."""
    check_task(task)
    start_epoch = check_int("fit", "start_epoch", start_epoch, 0)
    enable_cache(trainer.compilation_cache)
    several = trainer.max_epochs is None or trainer.max_epochs - start_epoch > 1
    if not grain:
        check_data(train_data, "train_data", several and trainer.max_epochs is not None)
    if val_data is not None:
        check_data(val_data, "val_data", several)
    check_monitors(trainer.callbacks, val_data is not None)
    if trainer.save_on_signal is not None:
        check_signal_directory(trainer.save_on_signal, trainer.global_step if resume else 0)
    scheduler = getattr(task, "lr_scheduler_config", None)
    if scheduler is not None:
        check_fit(scheduler, trainer, val_data is not None)
    return start_epoch


def installed_callbacks(profiler, perf, on_nonfinite, max_time, save_on_signal) -> tuple:
    """The callbacks of the options that stop, save or measure, in the order they run after
    the user's: the profile window, the perf columns, the non-finite guard, ``max_time``, the
    stop signals (``save_on_signal``); None or False where an option is off."""
    guard = NonFiniteGuard() if on_nonfinite == "stop" else None
    chosen = (profiler, perf, guard, max_time, StopOnSignal(save_on_signal))
    return tuple(callback for callback in chosen if callback)


def check_eval_call(trainer, task, data, name: str) -> None:
    """``validate``/``predict``: the task and the data checked, the cache on, no reads yet."""
    check_task(task)
    enable_cache(trainer.compilation_cache)
    check_data(data, name, False)
    trainer.position.transfers = 0
