import sys

import numpy as np
import pytest
from js_train_testing import FixedTask

from js.training import Callback, CSVRun, Trainer, plot_run


def test_csv_run_writes_one_row_per_epoch(tmp_path):
    x = np.ones(4, np.float32)
    run = CSVRun(tmp_path / "run")
    history = Trainer(3, run=run, verbose=False).fit(FixedTask(), [(x, x)], [(x, x)])
    lines = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert lines[0] == (
        "step,epoch,train/loss,train/count,train/accuracy,val/loss,val/count,"
        "time/epoch_s,time/samples_per_s,time/data_wait_s,perf/samples_per_s,perf/steps_per_s,"
        "perf/flops_per_step,mem/program_bytes"
    )  # step: the global step
    assert len(lines) == 4 and lines[3].startswith("3,2.0,1.0,4.0,1.0,2.0")
    assert float(lines[1].split(",")[7]) == pytest.approx(history[0]["time/epoch_s"])


def test_csv_run_adds_late_columns_and_resumes(tmp_path):
    run = CSVRun(tmp_path)
    run.log({"epoch": 0.0, "train/loss": 3.0}, step=0)
    run.log({"epoch": 1.0, "train/loss": 2.0, "val/loss": 2.5}, step=1)
    run.log({"epoch": 2.0, "train/loss": 1.0, "val/loss": 1.5}, step=2)
    assert run.path.read_text().splitlines()[:2] == ["step,epoch,train/loss,val/loss", "0,0.0,3.0,"]
    resumed = CSVRun(tmp_path, resume=True)  # continue after epoch 1: epoch 2 is replaced
    resumed.log({"epoch": 2.0, "train/loss": 0.5, "val/loss": 0.7}, step=2)
    assert resumed.path.read_text().splitlines()[1:] == [
        "0,0.0,3.0,",
        "1,1.0,2.0,2.5",
        "2,2.0,0.5,0.7",
    ]
    assert CSVRun(tmp_path).rows == []  # without resume, a new run starts empty


def test_one_csv_run_serves_several_fits_without_listing_a_step_twice(tmp_path):
    x = np.ones(4, np.float32)
    run = CSVRun(tmp_path)

    def steps():
        return [line.split(",")[0] for line in run.path.read_text().splitlines()[1:]]

    Trainer(2, run=run, verbose=False).fit(FixedTask(), [(x, x)])
    Trainer(4, run=run, verbose=False).fit(FixedTask(), [(x, x)], start_epoch=2)
    # one batch per epoch: global steps 1, 2, then 3, 4 (start_epoch 2 starts at step 2)
    assert steps() == ["1", "2", "3", "4"]  # a continued fit appends, as a Lightning logger
    Trainer(2, run=run, verbose=False).fit(FixedTask(), [(x, x)])
    assert steps() == ["1", "2"]  # a fit from epoch 0 again replaces: no step listed twice


def test_plot_run_writes_a_png_per_run(tmp_path):
    run = CSVRun(tmp_path)
    for epoch in range(3):
        run.log(
            {
                "epoch": float(epoch),
                "train/loss": 1.0 / (epoch + 1),
                "val/loss": 1.2,
                "train/accuracy": 0.5,
                "val/accuracy": 0.6,
            },
            step=epoch,
        )
    png = plot_run(tmp_path, tmp_path / "plots" / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_run(run.path, tmp_path / "again.png").exists()


def test_plot_run_without_matplotlib_says_how_to_install_it(tmp_path, monkeypatch):
    CSVRun(tmp_path).log({"epoch": 0.0, "train/loss": 1.0}, step=0)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib.* now fails
    with pytest.raises(
        ImportError,
        match=r"plot_run needs matplotlib: pip install "
        r"'js-train\[plot\]'",
    ):
        plot_run(tmp_path, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_plot_run_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="plot_run: no metrics file at"):
        plot_run(tmp_path, tmp_path / "x.png")
    (tmp_path / "metrics.csv").write_text("step,epoch\n")
    with pytest.raises(ValueError, match="holds no metrics rows"):
        plot_run(tmp_path, tmp_path / "x.png")
    (tmp_path / "metrics.csv").write_text("step,epoch\n0,0.0\n")
    with pytest.raises(ValueError, match="no split/metric columns"):
        plot_run(tmp_path, tmp_path / "x.png")


def test_plot_run_plots_step_rows_with_missing_cells(tmp_path):
    x = np.ones(4, np.float32)
    run = CSVRun(tmp_path)
    Trainer(max_steps=8, log_every_n_steps=2, val_every_n_steps=4, run=run, verbose=False).fit(
        FixedTask(), [(x, x)] * 3, [(x, x)]
    )
    rows = run.path.read_text().splitlines()
    assert rows[0].startswith("step,epoch,train/loss") and rows[1].startswith("2,0.0,")
    assert ",," in rows[1]  # a log row has no val/ cells
    assert plot_run(tmp_path, tmp_path / "curves.png").stat().st_size > 1000


class Logged:
    """A tracker that records every row it is sent, as wandb or MLflow would keep it."""

    def __init__(self):
        self.rows = []

    def log(self, metrics, step):
        self.rows.append((step, dict(metrics)))


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, task, step):
        if step == self.step:
            trainer.stop("enough")


@pytest.mark.parametrize(
    "case",
    ["stop at a log step", "data without a length ends at a log step", "log at the epoch's end"],
)
def test_each_row_is_written_once_with_its_epoch_columns(tmp_path, case):
    # a row at a step where the epoch turns out to end (a stop from on_step_end, an iterable
    # that runs out) gains the epoch's columns before it is written, and is written once
    x = np.ones(4, np.float32)
    tracker, csv = Logged(), CSVRun(tmp_path)

    class Both:
        def log(self, metrics, step):
            tracker.log(metrics, step)
            csv.log(metrics, step)

    data = [(x, x)] * 6
    if case == "data without a length ends at a log step":
        data = type("Stream", (), {"__iter__": lambda self: iter([(x, x)] * 6)})()
    callbacks = [StopAt(4)] if case == "stop at a log step" else []
    trainer = Trainer(1, callbacks=callbacks, run=Both(), log_every_n_steps=2, verbose=False)
    history = trainer.fit(FixedTask(), data, [(x, x)])
    steps = [step for step, _ in tracker.rows]
    assert steps == sorted(set(steps)) == [int(row["step"]) for row in history]
    assert [metrics for _, metrics in tracker.rows] == history  # each row whole, once
    last = history[-1]
    assert "time/epoch_s" in last and "val/loss" in last and "train/loss_epoch" in last
    assert len(csv.path.read_text().splitlines()) == 1 + len(history)
