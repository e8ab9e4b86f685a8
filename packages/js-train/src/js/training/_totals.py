"""The Trainer's running metrics: summed on the device, read to the host only when reported.

Per step a small compiled function adds ``loss * count``, ``count`` and ``correct`` to the
epoch's totals (float32 scalars on the device). A report reads them with one
``jax.device_get`` (together with the learning rate, when the optimizer has a schedule); the
metrics since the previous report are the difference of two reads, so one set of totals
serves both the log window and the epoch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_KEYS = ("loss", "count", "correct")


@jax.jit
def _add(totals, loss, count, correct):
    """Add the count-weighted loss, count and correct of one step (scalars) or of K steps
    (stacked, each ``[K]``) to the running totals, on the device."""
    new = {
        "loss": totals["loss"] + jnp.sum(loss * count),
        "count": totals["count"] + jnp.sum(count),
    }
    if correct is not None:
        new["correct"] = totals["correct"] + jnp.sum(correct)
    return new


def check_step_metrics(metrics, where: str) -> None:
    if not isinstance(metrics, Mapping) or "loss" not in metrics or "count" not in metrics:
        got = sorted(metrics) if isinstance(metrics, Mapping) else type(metrics).__name__
        raise KeyError(
            f"{where} must return a dict with 'loss' and 'count' (and optionally 'correct'); "
            f"got {got}. Fix: return e.g. {{'loss': loss, 'count': batch_size}}."
        )


def _zeros(has_correct: bool) -> dict:
    keys = _KEYS if has_correct else _KEYS[:2]
    return {key: jnp.zeros((), jnp.float32) for key in keys}


def _lr(task):
    """``lr(step_count)`` on the device when the task's optimizer has a schedule, else None."""
    optimizer = getattr(task, "optimizer", None)
    lr = getattr(optimizer, "lr", None)
    if optimizer is None or not callable(lr):
        return None
    return jnp.asarray(lr(optimizer.step_count), jnp.float32)


def rates(host: dict, prefix: str) -> dict[str, float]:
    count = float(host["count"])
    out = {f"{prefix}/loss": float(host["loss"]) / max(count, 1.0), f"{prefix}/count": count}
    if "correct" in host:
        out[f"{prefix}/accuracy"] = float(host["correct"]) / max(count, 1.0)
    return out


def throughput(perf, samples: float, steps: int, seconds: float) -> dict[str, float]:
    """``time/samples_per_s`` of an interval (``samples`` in ``steps`` steps, ``seconds``
    of wall time) and, given the fit's :class:`~._perf.PerfColumns`, its ``perf/*`` and ``mem/*``
    columns: one rate, under both names."""
    rate = float(samples) / max(seconds, 1e-9)
    row = {"time/samples_per_s": rate}
    if perf is not None:
        row.update(perf.columns(rate, steps, seconds))
    return row


def with_epoch(row: dict, epoch: dict) -> dict:
    """``row`` (a step's columns) closing an epoch whose means are ``epoch``.

    A row's plain ``train/<m>`` are its own interval. Without a log at that step, that is the
    epoch. Where a log fell on it, they stay the log's window and the epoch's means get their
    own columns, ``train/<m>_epoch`` (Lightning's ``_epoch`` split): neither replaces the other.
    """
    if "train/loss" not in row:
        return {**row, **epoch}
    train = {key: value for key, value in epoch.items() if key.startswith("train/")}
    rest = {key: value for key, value in epoch.items() if key not in train}
    return {**row, **rest, **{f"{key}_epoch": value for key, value in train.items()}}


def epoch_metrics(row: dict) -> dict:
    """An epoch-closing row as ``on_epoch_end`` sees it: the epoch's means under the plain
    ``train/<m>`` names, so that monitors (EarlyStopping, ModelCheckpoint) compare epochs."""
    means = {
        key[: -len("_epoch")]: value
        for key, value in row.items()
        if key.startswith("train/") and key.endswith("_epoch")
    }
    return {**row, **means}


class NonFinite(NamedTuple):
    """Where the training loss was first read not finite: in steps ``first_step`` to ``step``
    (the window since the previous read, whose loss was finite), read at ``step``."""

    first_step: int
    step: int
    loss: float


class Totals:
    """One epoch's running totals on the device and the host copy of the last read.

    Every read goes through :meth:`read` and counts one transfer in the fit's ``Position``;
    a window (the steps since the previous read) is the difference of two reads.
    """

    def __init__(self, device: dict | None = None, host: dict | None = None):
        self.device = device
        self.started = time.perf_counter()
        self._clock_step: int | None = None  # the step the clock (re)started at, if known
        # (step, host totals or None, lr, time) of the last read: the window starts there
        self._read: tuple[int | None, Any, Any, float] = (None, host, None, self.started)
        self.finite_step: int | None = None  # the step of the last read whose loss was finite
        self.nonfinite: NonFinite | None = None  # the first read whose loss was not

    def _seen(self, host, position) -> None:
        """Note whether a read's loss sum is finite (the epoch's running sum: any non-finite
        step since the epoch started makes it non-finite, and it stays so)."""
        loss = float(host["loss"])
        if self.nonfinite is not None:
            return
        if math.isfinite(loss):
            self.finite_step = position.step
            return
        start = position.epoch_start_step if self.finite_step is None else self.finite_step
        self.nonfinite = NonFinite(start + 1, position.step, loss)

    @staticmethod
    def accumulate(totals, metrics, where: str) -> dict:
        """``totals`` (None at first) plus one step's (or K steps') metrics, on the device."""
        if totals is None:
            check_step_metrics(metrics, where)
            totals = _zeros("correct" in metrics)
        return _add(totals, metrics["loss"], metrics["count"], metrics.get("correct"))

    def add(self, metrics) -> None:
        self.device = self.accumulate(self.device, metrics, "training_step")

    def empty_epoch(self) -> bool:
        return self.device is None

    def restart_clock(self, step: int | None = None) -> None:
        """Start timing from now (a fit's start, a resumed one too), at global step ``step``;
        the window starts at the totals there are (restored ones after a resume)."""
        self.started = time.perf_counter()
        self._clock_step = step
        self._read = (None, self._read[1], None, self.started)

    def read(self, position, task) -> tuple[dict, float | None]:
        """The host totals and lr at ``position.step``: one device read, reused at that step."""
        if self._read[0] != position.step:
            host = jax.device_get({"totals": self.device, "lr": _lr(task)})
            position.transfers += 1
            self._read = (position.step, host["totals"], host["lr"], time.perf_counter())
            self._seen(host["totals"], position)
        return self._read[1], self._read[2]

    def running_loss(self, position) -> float:
        """The epoch's mean loss so far, for the progress display (one read)."""
        host = jax.device_get(self.device)
        position.transfers += 1
        self._seen(host, position)
        return float(host["loss"]) / max(float(host["count"]), 1.0)

    def window(self, position, task, perf=None) -> dict[str, float]:
        """``train/*``, ``time/samples_per_s`` and ``lr`` of the steps since the last read
        (and the ``perf/*``, ``mem/*`` columns of ``perf``, a :class:`~._perf.PerfColumns`)."""
        last_step, last_host, last_time = self._read[0], self._read[1], self._read[3]
        if last_step is None:  # the window starts where the clock did
            last_step = position.epoch_start_step if self._clock_step is None else self._clock_step
        host, lr = self.read(position, task)
        since = {key: host[key] - (last_host[key] if last_host else 0) for key in host}
        row = rates(since, "train")
        seconds = self._read[3] - last_time
        row.update(throughput(perf, since["count"], position.step - last_step, seconds))
        if lr is not None:
            row["lr"] = float(lr)
        return row

    def epoch_summary(self, position, task, perf=None) -> dict[str, float]:
        """The epoch's ``train/*``, ``time/epoch_s``, ``time/samples_per_s`` (and ``lr``, and
        the ``perf/*``, ``mem/*`` columns of ``perf``, a :class:`~._perf.PerfColumns`)."""
        host, lr = self.read(position, task)
        row = rates(host, "train")
        elapsed = time.perf_counter() - self.started
        row["time/epoch_s"] = elapsed
        row.update(throughput(perf, host["count"], position.steps_in_epoch, elapsed))
        if lr is not None:
            row["lr"] = float(lr)
        return row

    def state_dict(self, position) -> dict:
        """``loss`` (sum of ``loss * count``), ``count``, ``correct`` and ``has_correct``,
        read from the device once."""
        device = self.device if self.device is not None else _zeros(True)
        host = jax.device_get(device)
        position.transfers += 1
        self._seen(host, position)
        state: dict[str, Any] = {"has_correct": int("correct" in host)}
        state.update({key: np.float32(host.get(key, 0.0)) for key in _KEYS})
        return state

    @classmethod
    def from_state(cls, state: Mapping, started: bool) -> Totals:
        """The totals of a :meth:`state_dict`; ``started``: the epoch has steps (else empty)."""
        if not started:
            return cls()
        keys = _KEYS if int(state["has_correct"]) else _KEYS[:2]
        restored = {key: np.float32(state[key]) for key in keys}
        return cls({key: jnp.asarray(value) for key, value in restored.items()}, restored)
