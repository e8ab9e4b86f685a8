"""The live display under a pseudo-terminal (rich bar and table) and in a pipe (quiet, plain
lines, no escape codes); TensorBoardRun's event files read back with tensorboard."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from js_train_testing import FixedTask

from js.training import CSVRun, Trainer
from js.training._progress import format_metrics, format_value

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    sys.path.insert(0, {tests!r})
    from js_train_testing import FixedTask
    from js.training import Trainer

    class Slow(FixedTask):
        def training_step(self, model, optimizer, rngs, batch):
            time.sleep(0.02)
            return super().training_step(model, optimizer, rngs, batch)

    x = np.ones(4, np.float32)
    trainer = Trainer(2, log_every_n_steps=10)
    trainer.progress_interval_s = 0.05
    trainer.fit(Slow(), [(x, x)] * 20, [(x, x)])
    print("reads", trainer.transfers)
""")


def _script(tmp_path) -> Path:
    path = tmp_path / "fit.py"
    path.write_text(SCRIPT.format(tests=str(Path(__file__).parent)))
    return path


def _env():
    paths = [str(p) for p in sorted((ROOT / "packages").glob("*/src"))]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]),
        "COLUMNS": "120",
        "TERM": "xterm",
    }


@pytest.mark.process
@pytest.mark.slow
def test_in_a_pipe_the_display_is_quiet_and_plain(tmp_path):
    done = subprocess.run(
        [sys.executable, str(_script(tmp_path))],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "\x1b[" not in done.stdout and "━" not in done.stdout  # no bar, no escape codes
    # what a person reads: no counts, units, 4 significant digits (format_metrics)
    assert lines[0].startswith("epoch 0  step 10  train/loss 1  train/accuracy 100%  time/")
    # the epoch's last step is also a log step: its own window, then the epoch's means
    assert lines[1].startswith(
        "epoch 0  step 20  train/loss 1  train/accuracy 100%  train/loss_epoch 1  "
        "train/accuracy_epoch 100%  "
    )
    assert len(lines) == 5 and lines[-1] == "reads 6"  # no redraw reads without a terminal


# A digits epoch row as the Trainer makes it (15 columns), and what the console shows of it.
DIGITS_ROW = {
    "epoch": 4.0,
    "step": 125.0,
    "train/loss": 0.0412345,
    "train/count": 1600.0,
    "train/accuracy": 0.98875,
    "val/loss": 0.0923456,
    "val/count": 197.0,
    "val/accuracy": 0.9746193,
    "time/epoch_s": 1.23456,
    "time/samples_per_s": 1296.04,
    "time/data_wait_s": 0.0123,
    "perf/samples_per_s": 1296.04,
    "perf/steps_per_s": 20.25,
    "perf/flops_per_step": 416585952.0,
    "mem/program_bytes": 7350056.0,
}


def test_the_printed_row_is_for_a_person_and_the_run_keeps_every_column(tmp_path):
    line = format_metrics(DIGITS_ROW)
    assert line == (
        "epoch 4  step 125  train/loss 0.04123  train/accuracy 98.88%  val/loss 0.09235  "
        "val/accuracy 97.46%  time/epoch 1.23 s  time/samples 1.296k/s  "
        "perf/flops 416.6M/step  mem/program 7.35 MB"
    )
    assert format_value("time/epoch_s", 0.0123) == "12.3 ms"
    assert format_value("time/epoch_s", 125.3) == "2m05.3s"
    assert format_value("perf/mfu", 0.4125) == "41.25%"
    assert format_value("mem/peak_device_bytes", 3.2e9) == "3.2 GB"
    assert format_value("perf/tokens_per_s", 1.5e6) == "1.5M/s"
    assert format_value("lr", 0.000312345) == "0.0003123"
    # a name drops the unit its value shows: never said twice
    shown = format_metrics({"perf/tokens_per_s": 1.5e6, "mem/peak_device_bytes": 3.2e9})
    assert shown == "perf/tokens 1.5M/s  mem/peak_device 3.2 GB"
    run = CSVRun(tmp_path)  # the run keeps every column at full precision
    run.log(DIGITS_ROW, step=125)
    header, values = run.path.read_text().splitlines()
    assert header.split(",")[1:] == list(DIGITS_ROW)[:1] + list(DIGITS_ROW)[2:]
    assert "416585952.0" in values and "0.0412345" in values


@pytest.mark.process
@pytest.mark.slow
def test_under_a_pseudo_terminal_rich_draws_bars_and_tables(tmp_path):
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, str(_script(tmp_path))], stdout=slave, stderr=subprocess.PIPE, env=_env()
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    _, err = child.communicate(timeout=300)
    os.close(master)
    out = b"".join(chunks).decode("utf-8", "replace")
    assert child.returncode == 0, err.decode()[-2000:]
    assert "\x1b[" in out and "━" in out  # a rich progress bar, redrawn in place
    assert "epoch 0" in out and "20/20" in out and "it/s" in out and "loss 1.0000" in out
    assert "metric" in out and "train/loss" in out and "val/loss" in out  # the epoch table
    reads = int(out.rsplit("reads", 1)[1].split()[0])
    assert 6 < reads <= 6 + 2 * 20  # redraws read the loss, at most once per step here


def test_tensorboard_run_is_read_back_with_event_accumulator(tmp_path):
    pytest.importorskip("tensorboardX")
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    from js.training import TensorBoardRun

    x = np.arange(8, dtype=np.float32)
    run = TensorBoardRun(tmp_path / "tb")
    history = Trainer(
        max_steps=8, log_every_n_steps=2, val_every_n_steps=4, run=run, verbose=False
    ).fit(FixedTask(), [(x[i : i + 1], x[i : i + 1]) for i in range(8)], [(x, x)])
    events = event_accumulator.EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"train/loss", "train/count", "val/loss", "time/samples_per_s", "epoch"} <= set(tags)
    for tag in ("train/loss", "val/loss"):
        want = [(int(row["step"]), row[tag]) for row in history if tag in row]
        got = [(e.step, e.value) for e in events.Scalars(tag)]
        assert [s for s, _ in got] == [s for s, _ in want]
        np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-6)


def test_tensorboard_run_without_tensorboardx_says_how_to_install_it(tmp_path, monkeypatch):
    from js.training import TensorBoardRun

    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(
        ImportError,
        match=r"TensorBoardRun needs tensorboardX: pip install "
        r"'js-train\[tensorboard\]'",
    ):
        TensorBoardRun(tmp_path)
