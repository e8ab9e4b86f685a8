"""Runs (where metrics go): CSVRun, TensorBoardRun, and plot_run for a run's curves.

A run is any object with ``log(metrics, step)`` (and optionally ``close()``); the Trainer calls
it once per reported row, with ``step`` the global step (batches trained).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Protocol


class Run(Protocol):
    """What ``Trainer(run=)`` takes: an object with ``log(metrics, step)`` (CSVRun,
    TensorBoardRun, or a wrapper around another tracker)."""

    def log(self, metrics: dict, step: int) -> None: ...


class CSVRun:
    """Write the Trainer's rows to ``<directory>/metrics.csv``, one row per ``log`` call.

    The file is rewritten whole (through a temporary file and a rename) on every call, so it is
    always complete, and a metric that appears later adds a column. Rows are keyed by step:
    logging a step drops the rows at or after it, so a step is never listed twice. One run can
    serve several fits, as a PyTorch Lightning logger can: a fit that continues
    (``start_epoch``, ``resume=True``) appends its rows; a fit that starts again from step 0
    replaces them. With
    ``resume=True`` the rows already in ``metrics.csv`` are read first and kept the same way.

    Args:
        directory: the run directory (created if missing).
        resume: keep the rows already in ``metrics.csv``.

    Example:
        >>> import tempfile
        >>> run = CSVRun(tempfile.mkdtemp())
        >>> run.log({"epoch": 0.0, "train/loss": 1.5}, step=0)
        >>> run.path.read_text().splitlines()[0]
        'step,epoch,train/loss'
    """

    def __init__(self, directory: str | os.PathLike, *, resume: bool = False) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "metrics.csv"
        self.rows: list[dict] = []
        if resume and self.path.exists():
            with open(self.path, newline="") as f:
                self.rows = [dict(row) for row in csv.DictReader(f)]

    def log(self, metrics: dict, step: int) -> None:
        """Record ``metrics`` (a dict of floats) at ``step``, replacing the rows at or after
        ``step``, and rewrite the file."""
        self.rows = [row for row in self.rows if int(row["step"]) < step]
        self.rows.append({"step": step, **{k: v for k, v in metrics.items() if k != "step"}})
        columns = []
        for row in self.rows:
            columns += [key for key in row if key not in columns]
        partial = self.path.with_suffix(".csv.tmp")
        with open(partial, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(self.rows)
        os.replace(partial, self.path)

    def close(self) -> None:
        pass


class TensorBoardRun:
    """Write each row's metrics as TensorBoard scalars under ``directory`` (event files).

    Every float of a row becomes one scalar at ``step`` (the global step), tagged by its name
    (``train/loss``, ``val/accuracy``, ``lr``, ``time/samples_per_s``, ``epoch``), so
    TensorBoard groups them by split. Needs tensorboardX (``pip install
    'js-train[tensorboard]'``), imported only here; view with ``tensorboard --logdir
    directory``.

    Args:
        directory: the run directory (created if missing).
        flush_secs: how often the writer flushes to disk (``close()`` always flushes).

    Example:
        >>> run = TensorBoardRun("runs/char_lm/tb")  # doctest: +SKIP
        >>> Trainer(max_steps=1000, log_every_n_steps=50, run=run)  # doctest: +SKIP
    """

    def __init__(self, directory: str | os.PathLike, *, flush_secs: int = 10) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError as error:
            raise ImportError(
                "TensorBoardRun needs tensorboardX: pip install 'js-train[tensorboard]'"
            ) from error
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(self.directory), flush_secs=flush_secs)

    def log(self, metrics: dict, step: int) -> None:
        """Add every metric of ``metrics`` as a scalar at ``step``."""
        for key, value in metrics.items():
            if key != "step":
                self.writer.add_scalar(key, float(value), global_step=int(step))

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


def read_csv(path: str | os.PathLike) -> dict[str, list[float]]:
    """Columns of a metrics CSV as lists of floats (empty cells become NaN)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} holds no metrics rows; log at least one epoch first")
    return {
        key: [float(row[key]) if row[key] not in ("", None) else float("nan") for row in rows]
        for key in rows[0]
    }


def plot_run(directory_or_csv: str | os.PathLike, png_path: str | os.PathLike) -> Path:
    """Plot a run's curves against the global step (one panel per metric, train and val
    together) to a PNG; a metric's missing cells (val/ between validations) are skipped.

    Needs matplotlib (``pip install js-train[plot]``), imported only here.

    Args:
        directory_or_csv: a run directory holding ``metrics.csv``, or the CSV file itself.
        png_path: where to write the image.

    Returns the PNG's path.

    Example:
        >>> plot_run("runs/digits", "runs/digits/curves.png")  # doctest: +SKIP
    """
    source = Path(directory_or_csv)
    if source.is_dir():
        source = source / "metrics.csv"
    if not source.exists():
        raise FileNotFoundError(f"plot_run: no metrics file at {source}; log a run there first")
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError("plot_run needs matplotlib: pip install 'js-train[plot]'") from error
    columns = read_csv(source)
    x = columns["step"]
    # train/<m>_step and _epoch exist only where a log falls on an epoch's end: no panel
    names = sorted(
        {
            key.split("/", 1)[1]
            for key in columns
            if key.startswith(("train/", "val/"))
            and not key.endswith(("/count", "_step", "_epoch"))
        }
    )
    if not names:
        raise ValueError(f"plot_run: {source} has no split/metric columns (train/loss, ...)")
    figure = Figure(figsize=(4.5 * len(names), 3.5))
    for i, name in enumerate(names):
        axes = figure.add_subplot(1, len(names), i + 1)
        for split in ("train", "val"):
            if f"{split}/{name}" in columns:  # rows without this metric are skipped
                kept = [
                    (s, v) for s, v in zip(x, columns[f"{split}/{name}"], strict=True) if v == v
                ]
                axes.plot([s for s, _ in kept], [v for _, v in kept], marker="o", label=split)
        axes.set_xlabel("step")
        axes.set_title(name)
        axes.legend()
    figure.tight_layout()
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path)
    return png_path
