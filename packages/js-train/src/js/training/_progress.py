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


def format_metrics(metrics: dict) -> str:
    """``epoch 3  step 120  train/loss 0.1234  val/accuracy 0.9800 ...`` (a plain line)."""
    parts = [f"epoch {int(metrics['epoch'])}"] if "epoch" in metrics else []
    if "step" in metrics:
        parts.append(f"step {int(metrics['step'])}")
    for key, value in metrics.items():
        if key in ("epoch", "step"):
            continue
        if key.endswith(("/count", "/count_epoch")):
            parts.append(f"{key} {value:.0f}")
        elif key.startswith("time") or key == "lr":
            parts.append(f"{key} {value:.4g}")
        else:
            parts.append(f"{key} {value:.4f}")
    return "  ".join(parts)


def _table(metrics: dict) -> Table:
    table = Table(
        title=f"epoch {int(metrics.get('epoch', 0))}, step {int(metrics.get('step', 0))}",
        title_justify="left",
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        if key not in ("epoch", "step"):
            counted = key.endswith(("/count", "/count_epoch"))
            table.add_row(key, f"{value:.0f}" if counted else f"{value:.4g}")
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
        >>> display.metrics({"epoch": 0.0, "step": 4.0, "train/loss": 0.5})
        >>> display.stream.getvalue()
        'epoch 0  step 4  train/loss 0.5000\\n'
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
