"""The live display: a rich progress bar per epoch (or per run of steps) and the metrics.

On a terminal, ``rich.progress`` draws steps, the last read loss, it/s and the time left, and
each epoch ends with a small table of its metrics. Anywhere else (CI logs, a pipe, a file) the
display is quiet and plain: no bar, no escape codes, one line of metrics per row. A redraw that
shows a loss costs the Trainer one device-to-host read, so the loss is read at most once per
``interval_s`` (the bar's own refresh in between only redraws the step count).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

# Columns left off the console (the run, the history and the CSV keep them): sample counts,
# the same rate under a second name, and the loop's input wait.
_QUIET = ("/count", "/count_epoch", "perf/samples_per_s", "perf/steps_per_s", "time/data_wait_s")
_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _si(value: float, unit: str) -> str:
    """``value`` with an SI prefix and 4 significant digits: ``416.6 MFLOP``, ``7.35 MB``."""
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _seconds(value: float) -> str:
    if value >= 60:
        minutes, seconds = divmod(value, 60)
        return f"{int(minutes)}m{seconds:04.1f}s"
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"


def _rate(per: str) -> Callable[[float], str]:
    return lambda value: f"{_si(value, '').rstrip().replace(' ', '')}/{per}"


# A column's unit, as its name ends and as the console shows its value: the console drops the
# suffix from the name (``time/epoch_s 0.842`` prints as ``time/epoch 842 ms``), so a printed
# unit is never said twice. The first match counts (``_per_s`` before ``_s``).
_UNITS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("", "_per_s", _rate("s")),  # time/samples_per_s: time/samples 12.35k/s
    ("", "_per_step", _rate("step")),  # perf/flops_per_step: perf/flops 416.6M/step
    ("time/", "_s", _seconds),  # time/epoch_s: time/epoch 842 ms
    ("mem/", "_bytes", lambda value: _si(value, "B")),  # mem/program_bytes: mem/program 7.35 MB
)


def _unit(key: str) -> tuple[str, Callable[[float], str]] | None:
    """The unit suffix of ``key`` and how its value shows that unit, or None."""
    for prefix, suffix, show in _UNITS:
        if key.startswith(prefix) and key.endswith(suffix):
            return suffix, show
    return None


def console_name(key: str) -> str:
    """``key`` as the console prints it: without the unit suffix its value shows
    (:func:`format_value`); the run and the history keep the full name.

    Example:
        >>> console_name("time/epoch_s"), console_name("time/samples_per_s")
        ('time/epoch', 'time/samples')
        >>> console_name("mem/program_bytes"), console_name("train/loss")
        ('mem/program', 'train/loss')
    """
    unit = _unit(key)
    return key if unit is None else key.removesuffix(unit[0])


def format_value(key: str, value: float) -> str:
    """One column's value as a person reads it: a loss or a learning rate to 4 significant
    digits, an accuracy or MFU in percent, and a column whose name ends with a unit (``_s``,
    ``_per_s``, ``_per_step``, ``_bytes``) with that unit and an SI prefix.

    Example:
        >>> format_value("perf/flops_per_step", 416585952.0), format_value("mem/program_bytes", 7350056.0)
        ('416.6M/step', '7.35 MB')
        >>> format_value("val/accuracy", 0.98125), format_value("time/samples_per_s", 12345.6)
        ('98.12%', '12.35k/s')
    """  # noqa: E501
    if key.endswith(("/count", "/count_epoch")):
        return f"{value:.0f}"
    if "accuracy" in key or key == "perf/mfu":
        return f"{100 * value:.4g}%"
    unit = _unit(key)
    if unit is not None:
        return unit[1](value)
    if key.startswith("mem/"):
        return _si(value, "B")
    return f"{value:.4g}"


def console_columns(metrics: dict) -> dict[str, str]:
    """The columns of a row a person reads (not the counts, the duplicate rates and the
    input wait), named by :func:`console_name` and formatted by :func:`format_value`;
    ``epoch`` and ``step`` as ints."""
    shown = {}
    for key, value in metrics.items():
        if key in ("epoch", "step"):
            shown[key] = f"{int(value)}"
        elif not key.endswith(_QUIET) and key not in _QUIET:
            shown[console_name(key)] = format_value(key, value)
    return shown


def format_metrics(metrics: dict) -> str:
    """``epoch 3  step 120  train/loss 0.1234  val/accuracy 98.2%  time/epoch 842 ms ...`` (a
    plain line of the columns :func:`console_columns` keeps)."""
    return "  ".join(f"{key} {value}" for key, value in console_columns(metrics).items())


def _table(metrics: dict) -> Table:
    table = Table(
        title=f"epoch {int(metrics.get('epoch', 0))}, step {int(metrics.get('step', 0))}",
        title_justify="left",
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in console_columns(metrics).items():
        if key not in ("epoch", "step"):
            table.add_row(key, value)
    return table


class Display:
    """Progress bars and metrics for one fit.

    Args:
        enabled: draw bars; ``None`` draws them only when ``stream`` is a terminal.
        interval_s: the least time between two loss reads (device reads) for the bar.
        stream: where to write (default ``sys.stdout``).

    Example:
        >>> import io
        >>> display = Display(enabled=None, stream=io.StringIO())  # not a terminal: plain
        >>> display.metrics({"epoch": 0.0, "step": 4.0, "train/loss": 0.5, "train/count": 64.0})
        >>> display.stream.getvalue()
        'epoch 0  step 4  train/loss 0.5\\n'
    """

    def __init__(
        self, enabled: bool | None = None, interval_s: float = 1.0, stream: TextIO | None = None
    ) -> None:
        self.stream = sys.stdout if stream is None else stream
        terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = terminal if enabled is None else bool(enabled)
        self.rich = terminal  # tables and escape codes only on a terminal
        self.interval_s = interval_s
        self.console = Console(
            file=self.stream,
            force_terminal=self.enabled or None,
            no_color=not terminal,
            highlight=False,
        )
        self.progress = None
        self.task = None
        self.last_read = time.perf_counter()
        self.steps = 0

    def begin(self, label: str, total: int | None) -> None:
        """Start a bar for ``label`` (an epoch), ``total`` steps (None: unknown)."""
        if not self.enabled:
            return
        if self.progress is None:
            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                _Rate(),
                TimeRemainingColumn(),
                console=self.console,
                refresh_per_second=4,
            )
            self.progress.start()
        self.task = self.progress.add_task(label, total=total, loss="-")
        self.steps = 0

    def advance(self, steps: int, loss: Callable[[], float]) -> None:
        """``steps`` more steps done; ``loss()`` (one device read) only when a redraw is due."""
        if not self.enabled or self.task is None or self.progress is None:
            return
        self.steps += steps
        now = time.perf_counter()
        if now - self.last_read >= self.interval_s:
            self.last_read = now
            self.progress.update(self.task, advance=steps, loss=f"{loss():.4f}")
        else:
            self.progress.update(self.task, advance=steps)

    def end(self) -> None:
        """Finish the current bar (left on screen, complete)."""
        if self.enabled and self.task is not None and self.progress is not None:
            self.progress.refresh()
            self.progress.stop_task(self.task)
            self.task = None

    def metrics(self, row: dict, *, final: bool = False) -> None:
        """Show one row: a table at an epoch's end on a terminal, else one plain line."""
        if self.rich and final:
            self.console.print(_table(row))
        elif self.progress is not None:
            self.progress.console.print(format_metrics(row), markup=False)
        else:
            self.stream.write(format_metrics(row) + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class _Rate(TextColumn):
    """Steps per second over the bar's life (rich's own speed column shows bytes)."""

    def __init__(self) -> None:
        super().__init__("")

    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:.1f} it/s")
