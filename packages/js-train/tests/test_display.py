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

from js.training import Trainer

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
    assert lines[0].startswith("epoch 0  step 10  train/loss 1.0000  train/count 40")
    # the epoch's last step is also a log step: its own window, then the epoch's means
    assert lines[1].startswith(
        "epoch 0  step 20  train/loss 1.0000  train/count 40  "
        "train/accuracy 1.0000  train/loss_epoch 1.0000  "
        "train/count_epoch 80  "
    )
    assert len(lines) == 5 and lines[-1] == "reads 6"  # no redraw reads without a terminal


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
