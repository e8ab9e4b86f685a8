"""Stop signals during fit: SIGTERM, SIGINT and SIGUSR1 finish the step in flight, save it
through the ModelCheckpoint, and exit with 128 + signal (``Preempted``); the saved step resumes
bit for bit. Real signals to real processes (signal_job.py children, or this process for the
fast variants), each child bounded by a timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from js_train_testing import blobs
from signal_job import Pace, build, params

import js.training
from js.training import Callback, ModelCheckpoint, Preempted, load_checkpoint

JOBS = Path(__file__).parent / "jobs"  # the child-process scripts
TIMEOUT = 240  # seconds a child may take before the test fails (a hang, not a slow machine)


@pytest.fixture(scope="module")
def straight():
    """The uninterrupted run's parameters (in this process: the same program as a child's)."""
    task, data, trainer = build(None)
    trainer.fit(task, data)
    return params(task)


def resume(path: Path) -> tuple[int, dict[str, np.ndarray]]:
    """Load ``path``'s last step into a fresh task seeded differently; fit on to the end."""
    task, data, trainer = build(None, seed=7)
    objects = {**task.checkpoint_objects(), "trainer": trainer, "loader": data}
    load_checkpoint(path, objects, which="last")
    step = trainer.global_step
    trainer.fit(task, data, resume=True)
    return step, params(task)


def assert_same(expected: dict, got: dict) -> None:
    assert expected.keys() == got.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def child(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", JAX_PLATFORMS="cpu", JS_COMPILATION_CACHE="0")
    # one CPU device and this process's compile flags (tools/pytest_xla.py), as in its straight run
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags)
    return subprocess.Popen(
        [sys.executable, str(JOBS / "signal_job.py"), *args],
        cwd=JOBS,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(process: subprocess.Popen, text: str) -> list[str]:
    """The child's stdout lines up to the first that starts with ``text``."""
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith(text):
            return lines
    raise AssertionError(f"the child ended before printing {text!r}: {''.join(lines)}")


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"the child did not exit in {TIMEOUT} s:\n{out}\n{err}") from None
    return process.returncode, out, err


def stopped_step(err: str, name: str, path: Path) -> int:
    """The step the child's exit line names, checked against the documented message."""
    line = next(line for line in err.splitlines() if line.startswith("js.training:"))
    assert line.startswith(f"js.training: {name} received, stopped after step ")
    step = int(line.split("after step ")[1].split()[0])
    code = 128 + int(getattr(signal, name))
    assert f"(saved {path / str(step)}" in line and f"exiting with code {code}." in line, line
    return step


@pytest.mark.parametrize(
    "name, every",
    [  # SIGINT (Ctrl-C) while saving every step: exits promptly
        ("SIGTERM", 4),  # the default run's one test of a signal to a child process
        pytest.param("SIGINT", 1, marks=pytest.mark.slow),
    ],
)
@pytest.mark.process
def test_a_signal_from_outside_saves_the_step_and_exits(tmp_path, straight, name, every):
    process = child("cut", str(tmp_path), "--every", str(every))
    wait_for(process, "step 3 ")
    process.send_signal(getattr(signal, name))
    code, out, err = finish(process)
    assert code == 128 + getattr(signal, name), err
    step = stopped_step(err, name, tmp_path)
    assert f"stopping: received {name} after step {step}; saved {tmp_path / str(step)}" in out
    assert "Traceback" not in err and "cannot schedule new futures" not in err
    resumed_at, final = resume(tmp_path)
    assert resumed_at == step
    assert_same(straight, final)


@pytest.mark.process
@pytest.mark.slow
def test_a_second_sigterm_while_saving_is_ignored_until_the_step_is_written(tmp_path, straight):
    code, out, err = finish(child("cut", str(tmp_path), "--self", "SIGTERM@6", "--again"))
    assert code == 143, err
    assert stopped_step(err, "SIGTERM", tmp_path) == 6
    assert "second SIGTERM while saving" in out
    assert "1 later signal(s) ignored while saving" in err
    resumed_at, final = resume(tmp_path)
    assert resumed_at == 6
    assert_same(straight, final)


def test_sigusr1_in_this_process_raises_preempted_after_saving(tmp_path, straight):
    """The fast variant: the signal sent to this process at step 6, ``Preempted`` caught."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGUSR1)}
    checkpoint = ModelCheckpoint(tmp_path, "train/loss", every_n_steps=4)
    task, data, trainer = build(4, [checkpoint, Pace(0.0, (signal.SIGUSR1, 6), False)])
    with pytest.raises(Preempted) as stopped:
        trainer.fit(task, data)
    assert stopped.value.code == 128 + signal.SIGUSR1
    assert (stopped.value.signum, stopped.value.step) == (signal.SIGUSR1, 6)
    assert stopped.value.saved == [tmp_path / "6"] == trainer.saved_on_request
    assert trainer.stop_reason == "received SIGUSR1 after step 6"
    assert {signum: signal.getsignal(signum) for signum in before} == before  # restored
    assert not isinstance(stopped.value, Exception)  # `except Exception` does not swallow it
    resumed_at, final = resume(tmp_path)
    assert resumed_at == 6
    assert_same(straight, final)


class SignalDuring(Callback):
    """Send SIGTERM to this process once, from inside the fit at ``moment``: ``validation``
    (as the 2nd validation starts, at step 8) or ``save`` (at step 6, right after the
    ModelCheckpoint's save of it began: its write is still in the background)."""

    def __init__(self, moment: str) -> None:
        self.moment, self.sent = moment, False

    def _send(self) -> None:
        if not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)

    def on_validation_epoch_start(self, trainer, task):
        if self.moment == "validation" and trainer.global_step == 8:
            self._send()

    def on_step_end(self, trainer, task, step):
        if self.moment == "save" and step == 6:
            self._send()


@pytest.mark.parametrize("moment, stop", [("validation", 8), ("save", 6)])
def test_a_signal_during_validation_or_a_save_stops_at_that_step_and_resumes_equal(
    tmp_path, straight, moment, stop
):
    """The signal lands mid-validation (which finishes first) or while the step's checkpoint is
    still being written (the stop waits for it rather than saving it twice)."""
    checkpoint = ModelCheckpoint(tmp_path, "train/loss", every_n_steps=3)
    task, data, trainer = build(3, [checkpoint, SignalDuring(moment)], val_every_n_steps=4)
    val = js.training.ArrayLoader(*blobs(32, seed=1), batch_size=16)
    with pytest.raises(Preempted) as stopped:
        trainer.fit(task, data, val)
    assert (stopped.value.step, stopped.value.saved) == (stop, [tmp_path / str(stop)])
    validated = sorted({row["step"] for row in trainer.history if "val/loss" in row})
    assert validated == [4, 6, 8][: 3 if moment == "validation" else 2]  # every 4, epoch ends
    resumed_at, final = resume(tmp_path)
    assert resumed_at == stop
    assert_same(straight, final)


def test_without_a_step_checkpoint_the_signal_still_stops_and_says_nothing_was_saved(capsys):
    task, data, trainer = build(None, [Pace(0.0, (signal.SIGUSR1, 2), False)])
    with pytest.raises(
        Preempted,
        match=r"after step 2 \(not saved \(no ModelCheckpoint.*no Trainer\(save_on_signal",
    ):
        trainer.fit(task, data)
    assert trainer.global_step == 2
    assert "exiting with code 138" in capsys.readouterr().err


def test_save_on_signal_saves_the_step_without_a_model_checkpoint(tmp_path, straight):
    task, data, trainer = build(
        None, [Pace(0.0, (signal.SIGUSR1, 6), False)], save_on_signal=tmp_path / "stop"
    )
    with pytest.raises(Preempted) as stopped:
        trainer.fit(task, data)
    assert stopped.value.saved == [tmp_path / "stop" / "6"]
    assert f"(saved {tmp_path / 'stop' / '6'}); exiting with code 138" in str(stopped.value)
    resumed_at, final = resume(tmp_path / "stop")
    assert resumed_at == 6
    assert_same(straight, final)
    task, data, trainer = build(None, save_on_signal=tmp_path / "stop")  # a fit from step 0
    with pytest.raises(FileExistsError, match=r"already holds steps \[6\], after step 0"):
        trainer.fit(task, data)
    with pytest.raises(TypeError, match="save_on_signal must be a directory path or None"):
        build(None, save_on_signal=3)


def test_a_signal_after_the_last_step_goes_to_the_previous_handler_once_the_fit_ends():
    received = []

    class Late(Callback):
        def on_fit_end(self, trainer, task):  # after the fit's last step boundary
            os.kill(os.getpid(), signal.SIGUSR1)
            received.append("during the fit")  # recorded by the fit's handler, not delivered

    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        task, data, trainer = build(None, [Late()])
        trainer.max_steps = 3
        history = trainer.fit(task, data)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert history[-1]["step"] == 3 and not trainer.should_stop
    assert received == ["during the fit", signal.SIGUSR1]


def test_handlers_are_only_installed_in_the_main_thread_for_the_fit():
    seen = {}

    class Look(Callback):
        def on_step_end(self, trainer, task, step):
            seen[threading.current_thread().name] = signal.getsignal(signal.SIGTERM)
            trainer.stop()

    before = signal.getsignal(signal.SIGTERM)
    task, data, trainer = build(None, [Look()])
    trainer.fit(task, data)
    assert seen["MainThread"] != before  # the fit's handler
    assert signal.getsignal(signal.SIGTERM) == before
    thread = threading.Thread(target=trainer.fit, args=(task, data), name="other")
    thread.start()
    thread.join(TIMEOUT)
    assert seen["other"] == before  # signal.signal works only in the main thread: untouched


LAUNCH = [sys.executable, "-m", "js.training.launch", "--processes", "2", "--stop-timeout", "120"]


@pytest.mark.parametrize(  # one in the default run; the other two ways are slow
    "how",
    [
        "one-rank",
        pytest.param("launcher", marks=pytest.mark.slow),
        pytest.param("read-steps", marks=pytest.mark.slow),
    ],
)
@pytest.mark.process
@pytest.mark.slow
def test_two_processes_stop_at_the_same_step_and_resume_equal(tmp_path, how):
    """A signal to one rank (JAX's preemption notice reaches the other) or a SIGTERM to the
    launcher (passed on to both): both save one step together, and a resumed 2-process job ends
    where an uninterrupted one does. Without JAX's preemption service (read-steps), a signal to
    one rank stops both at the next log step, 8."""
    launch = [*LAUNCH, "signal_job.py"]
    env = dict(os.environ, JS_COMPILATION_CACHE="0", PYTHONUNBUFFERED="1")
    if how == "read-steps":
        env["JAX_ENABLE_PREEMPTION_SERVICE"] = "false"
    run = [*launch, "cut", str(tmp_path / "ckpt"), "--pause", "0.1"]
    if how != "launcher":
        run += ["--self", "SIGUSR1@6"]
    job = subprocess.Popen(run, cwd=JOBS, env=env, stdout=subprocess.PIPE, text=True)
    if how == "launcher":
        wait_for(job, "[1] step 3 ")
        job.send_signal(signal.SIGTERM)
    stdout, _ = job.communicate(timeout=TIMEOUT)
    steps = {
        line[:3]: int(line.split("after step ")[1].split()[0])
        for line in stdout.splitlines()
        if "js.training:" in line
    }
    assert steps.keys() == {"[0]", "[1]"} and len(set(steps.values())) == 1, stdout
    if how == "read-steps":
        assert steps["[0]"] == 8 and job.returncode == 138, stdout
        return
    if how == "one-rank":
        assert "[1] js.training: SIGUSR1 received" in stdout  # the rank signalled
        assert "[0] js.training: SIGTERM received" in stdout  # JAX's notice
        assert job.returncode in (143, 138), stdout
    else:
        assert "[launch] received SIGTERM" in stdout and job.returncode == 143, stdout
    outputs = [str(tmp_path / name) for name in ("resumed.npz", "straight.npz")]
    run = [*launch, "resume", str(tmp_path / "ckpt"), *outputs]
    again = subprocess.run(run, cwd=JOBS, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert again.returncode == 0, again.stdout
    assert f"resumed at step {steps['[0]']}" in again.stdout
    resumed, expected = (dict(np.load(path)) for path in outputs)
    assert_same(expected, resumed)


@pytest.mark.process
@pytest.mark.slow
def test_max_time_stops_two_processes_at_the_same_step_by_process_0s_clock(tmp_path):
    """``max_time`` in a 2-process job: process 1's clock stands still, so only process 0's can
    end the fit; both stop after the same step (a read step, where they agree anyway), both
    save it together, and the job exits 0."""
    path = tmp_path / "ckpt"
    run = [*LAUNCH, "signal_job.py", "cut", str(path), "--max-time", "1", "--every", "5"]
    env = dict(os.environ, JS_COMPILATION_CACHE="0", PYTHONUNBUFFERED="1")
    job = subprocess.run(run, cwd=JOBS, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert job.returncode == 0, job.stdout + job.stderr[-3000:]
    steps = {
        line[:3]: int(line.split("reached after step ")[1].split()[0])
        for line in job.stdout.splitlines()
        if "stopping: max_time 0:00:01 reached after step " in line
    }
    assert steps.keys() == {"[0]", "[1]"} and len(set(steps.values())) == 1, job.stdout
    step = steps["[0]"]
    assert step % 4 == 0 and step < 40, job.stdout  # a log step (every 4), before the last
    for rank in ("[0]", "[1]"):
        assert f"{rank} max_time stopped the fit at step {step}" in job.stdout
    assert f"saved {path / str(step)}" in job.stdout  # the stop's save, not an every-5 one
    assert str(step) in os.listdir(path)
