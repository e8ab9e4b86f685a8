"""A one-line progress bar and the per-epoch metrics line."""

from __future__ import annotations

import sys
import time


def format_metrics(metrics: dict) -> str:
    """``epoch 3  train/loss 0.1234  val/accuracy 0.9800 ...`` (the line printed per epoch)."""
    parts = [f"epoch {int(metrics['epoch'])}"] if "epoch" in metrics else []
    for key, value in metrics.items():
        if key == "epoch":
            continue
        if key.endswith("/count"):
            parts.append(f"{key} {value:.0f}")
        else:
            parts.append(f"{key} {value:.3f}" if key.startswith("time") else f"{key} {value:.4f}")
    return "  ".join(parts)


class ProgressBar:
    """Steps done, last read loss, throughput and time left, redrawn in place.

    Args:
        label: what is running (``'epoch 3 train'``).
        total: number of steps, when the data has a length (otherwise no time left is shown).
        stream: where to draw (default ``sys.stdout``).
        enabled: draw at all; ``None`` draws only when ``stream`` is a terminal, so logs and
            pipes stay quiet.
        interval_s: the least time between redraws; each redraw that shows a loss costs the
            caller one device-to-host read, so :meth:`due` tells it when one is wanted.

    Example:
        >>> import io
        >>> bar = ProgressBar("train", total=4, stream=io.StringIO(), enabled=True)
        >>> bar.update(2, loss=0.5)
        >>> "2/4" in bar.stream.getvalue()
        True
    """

    def __init__(self, label: str, total: int | None = None, *, stream=None,
                 enabled: bool | None = None, interval_s: float = 1.0):
        self.label = label
        self.total = total
        self.stream = sys.stdout if stream is None else stream
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.interval_s = interval_s
        self.start = time.perf_counter()
        self.last_draw = self.start

    def due(self) -> bool:
        """Whether a redraw (and the read it needs) is wanted now."""
        return self.enabled and time.perf_counter() - self.last_draw >= self.interval_s

    def update(self, steps: int, loss: float | None = None) -> None:
        """Redraw with ``steps`` steps done and the latest host-side ``loss``."""
        if not self.enabled:
            return
        now = time.perf_counter()
        self.last_draw = now
        rate = steps / max(now - self.start, 1e-9)
        text = f"\r{self.label} {steps}" + (f"/{self.total}" if self.total else "")
        if loss is not None:
            text += f"  loss {loss:.4f}"
        text += f"  {rate:.1f} it/s"
        if self.total:
            text += f"  {max(self.total - steps, 0) / max(rate, 1e-9):.0f}s left"
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        """Erase the bar, leaving the line for the epoch's metrics."""
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()
