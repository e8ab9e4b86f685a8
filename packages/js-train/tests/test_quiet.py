"""Quiet third-party output: orbax's "Waiting for previous save" and gloo's "Rank N is connected
to M peer ranks" go to logging at DEBUG; JS_LIBRARY_LOGS=1 (show_library_logs) shows them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest
from absl import logging as absl_logging

from js.training import ArrayLoader, ModelCheckpoint, Trainer, show_library_logs
from js.training._quiet import LIBRARY_LOGS, library_logs_shown, routine_output

WAITING = "Waiting for previous save to complete took"
GLOO = "[Gloo] Rank 0 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3"


@pytest.fixture
def every_save_waits(monkeypatch):
    """orbax warns when a save waited over 1 s for the previous one; below 0 s every save does
    (saves that really overlap that long need a model too large for a test)."""
    from orbax.checkpoint import checkpoint_manager

    monkeypatch.setattr(checkpoint_manager, "_WAIT_FOR_PREV_SAVE_WARNING_THRESHOLD_SECS", -1.0)
    monkeypatch.delenv(LIBRARY_LOGS, raising=False)


def fit_with_step_saves(make_task, data, path):
    x, y = data
    checkpoint = ModelCheckpoint(path, monitor="train/loss", every_n_steps=1)
    trainer = Trainer(max_steps=3, callbacks=[checkpoint], log_every_n_steps=1, verbose=False)
    trainer.fit(make_task(), ArrayLoader(x, y, batch_size=16))


def waiting(records) -> list[logging.LogRecord]:
    return [r for r in records if r.name == "absl" and r.getMessage().startswith(WAITING)]


def test_orbax_waiting_for_a_save_is_logged_at_debug_not_printed(
    make_task, data, tmp_path, every_save_waits, caplog, capfd
):
    caplog.set_level(logging.DEBUG, logger="js.training.library")
    fit_with_step_saves(make_task, data, tmp_path / "quiet")
    assert waiting(caplog.records) == []
    assert WAITING not in capfd.readouterr().err
    routed = [r for r in caplog.records if r.name == "js.training.library"]
    assert len(routed) == 3 and all(r.levelno == logging.DEBUG for r in routed)  # one a save
    assert WAITING in routed[0].getMessage()


def test_js_library_logs_shows_orbax_warning_again(
    make_task, data, tmp_path, every_save_waits, caplog, monkeypatch
):
    show_library_logs()
    try:
        assert os.environ[LIBRARY_LOGS] == "1" and library_logs_shown()
        fit_with_step_saves(make_task, data, tmp_path / "shown")
    finally:
        show_library_logs(False)
    assert not library_logs_shown()
    shown = waiting(caplog.records)
    assert len(shown) == 3 and all(r.levelno == logging.WARNING for r in shown)


def test_other_absl_warnings_and_the_users_logs_pass(caplog):
    Trainer(max_steps=1, verbose=False)  # installs the filter
    absl_logging.warning("a real problem from a library")
    logging.getLogger("my.script").warning(WAITING + " (the user's own message)")
    messages = [r.getMessage() for r in caplog.records]
    assert "a real problem from a library" in messages
    assert WAITING + " (the user's own message)" in messages


def test_routine_output_is_gloos_report_that_every_peer_connected(monkeypatch):
    monkeypatch.delenv(LIBRARY_LOGS, raising=False)
    assert routine_output(GLOO + "\n")
    assert not routine_output(GLOO.replace("connected to 3", "connected to 2"))  # a problem
    assert not routine_output("[Gloo] Rank 1 is NOT connected to: [2]\n")
    assert not routine_output("loss 0.5 " + GLOO)  # a line of the script's own output
    monkeypatch.setenv(LIBRARY_LOGS, "1")
    assert not routine_output(GLOO)
    with pytest.raises(TypeError, match=r"show_library_logs\(show\) takes True or False"):
        show_library_logs("yes")  # type: ignore[arg-type]


JOB = """
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    from js.training import init_distributed

    init_distributed()
    rows = multihost_utils.process_allgather(jnp.full(2, jax.process_index()))
    print("gathered", rows.tolist(), flush=True)
"""


@pytest.mark.slow  # two 2-process jobs: ~15 s on 2 cores
@pytest.mark.process
def test_the_launcher_drops_gloos_connection_lines_unless_asked(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))

    def launch(**env):
        command = [sys.executable, "-m", "js.training.launch", "--processes", "2", str(script)]
        environment = {k: v for k, v in os.environ.items() if k != LIBRARY_LOGS} | env
        return subprocess.Popen(
            command,
            cwd=tmp_path,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    quiet, shown = launch(), launch(JS_LIBRARY_LOGS="1")
    quiet_output, _ = quiet.communicate(timeout=300)
    shown_output, _ = shown.communicate(timeout=300)
    assert quiet.returncode == 0, quiet_output[-4000:]
    assert shown.returncode == 0, shown_output[-4000:]
    for output in (quiet_output, shown_output):
        assert "[0] gathered [[0, 0], [1, 1]]" in output
    assert "is connected to" not in quiet_output
    assert "[0] [Gloo] Rank 0 is connected to 1 peer ranks." in shown_output
    assert "[1] [Gloo] Rank 1 is connected to 1 peer ranks." in shown_output
