"""Runs (where metrics go): CSVRun, and plot_run for a run's curves."""

from __future__ import annotations

import csv
import os
from pathlib import Path


class CSVRun:
    """Write per-epoch metrics to ``<directory>/metrics.csv``, one row per ``log`` call.

    The file is rewritten whole (through a temporary file and a rename) on every call, so it is
    always complete, and a metric that appears later adds a column. Rows are keyed by step:
    logging a step drops the rows at or after it, so a step is never listed twice. One run can
    serve several fits, as a PyTorch Lightning logger can: a fit that continues
    (``start_epoch``) appends its rows; a fit that starts again from epoch 0 replaces them. With
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

    def __init__(self, directory, *, resume: bool = False):
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
        self.rows.append({"step": step, **metrics})
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


def read_csv(path) -> dict[str, list[float]]:
    """Columns of a metrics CSV as lists of floats (empty cells become NaN)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} holds no metrics rows; log at least one epoch first")
    return {key: [float(row[key]) if row[key] not in ("", None) else float("nan") for row in rows]
            for key in rows[0]}


def plot_run(directory_or_csv, png_path) -> Path:
    """Plot a run's curves (one panel per metric, train and val together) to a PNG.

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
    x = columns.get("epoch", columns["step"])
    names = sorted({key.split("/", 1)[1] for key in columns
                    if key.startswith(("train/", "val/")) and not key.endswith("/count")})
    if not names:
        raise ValueError(f"plot_run: {source} has no split/metric columns (train/loss, ...)")
    figure = Figure(figsize=(4.5 * len(names), 3.5))
    for i, name in enumerate(names):
        axes = figure.add_subplot(1, len(names), i + 1)
        for split in ("train", "val"):
            if f"{split}/{name}" in columns:
                axes.plot(x, columns[f"{split}/{name}"], marker="o", label=split)
        axes.set_xlabel("epoch")
        axes.set_title(name)
        axes.legend()
    figure.tight_layout()
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path)
    return png_path
