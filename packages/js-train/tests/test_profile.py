"""Trainer(profile=(start, end)): a jax.profiler trace of those global steps, read back with
jax's own reader (jax.profiler.ProfileData), layers named."""

from __future__ import annotations

import re

import jax
import pytest

from js.training import ArrayLoader, Callback, CSVRun, Trainer


def traced_steps(xplane) -> list[int]:
    """The step numbers of the trace's step annotations, and the programs it ran."""
    data = jax.profiler.ProfileData.from_file(str(xplane))
    steps, programs = [], set()
    for plane in data.planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                if event.name == "train" and "step_num" in stats:
                    steps.append(int(stats["step_num"]))
                if "hlo_module" in stats:
                    programs.add(stats["hlo_module"])
    return sorted(steps), programs


def only_trace(directory):
    (xplane,) = directory.glob("plugins/profile/*/*.xplane.pb")
    assert xplane.stat().st_size > 0
    return xplane


def test_profile_records_the_steps_of_its_window_with_layer_names(make_task, data, tmp_path):
    x, y = data
    trainer = Trainer(
        max_steps=6,
        profile=(2, 4),
        profile_dir=tmp_path / "trace",
        log_every_n_steps=3,
        progress=False,
        verbose=False,
    )
    trainer.fit(make_task(), ArrayLoader(x, y, batch_size=16))
    xplane = only_trace(tmp_path / "trace")
    assert trainer.profiler is not None and trainer.profiler.traces == [xplane.parent]
    steps, programs = traced_steps(xplane)
    assert steps == [2, 3]  # the window [2, 4): one annotation per dispatched step
    assert any("program" in name for name in programs)  # the compiled training step ran
    # every js.Module call is a named scope: the ops of the step carry the layers' names
    raw = xplane.read_bytes()
    for layer in (b"MLP\\)?/Linear/dot_general", b"MLP\\)?/BatchNorm1d/"):
        assert re.search(layer, raw), layer
    # the block at the trace's end waits for the device; it reads nothing back
    plain = Trainer(max_steps=6, log_every_n_steps=3, progress=False, verbose=False)
    plain.fit(make_task(), ArrayLoader(x, y, batch_size=16))
    assert trainer.transfers == plain.transfers
    assert [row["train/loss"] for row in trainer.history] == [
        row["train/loss"] for row in plain.history
    ]


def test_profile_stops_when_the_fit_ends_or_raises_before_end_step(make_task, data, tmp_path):
    x, y = data
    loader = ArrayLoader(x, y, batch_size=16)
    short = Trainer(max_steps=3, profile=(1, 10), profile_dir=tmp_path / "short", verbose=False)
    short.fit(make_task(), loader)
    assert traced_steps(only_trace(tmp_path / "short"))[0] == [1, 2]

    class Fail(Callback):
        def on_step_end(self, trainer, task, step):
            if step == 2:
                raise RuntimeError("step 2 failed")

    failing = Trainer(
        max_steps=6, callbacks=[Fail()], profile=(0, 5), profile_dir=tmp_path / "failed"
    )
    with pytest.raises(RuntimeError, match="step 2 failed"):
        failing.fit(make_task(), loader)
    assert traced_steps(only_trace(tmp_path / "failed"))[0] == [0, 1]
    jax.profiler.start_trace(str(tmp_path / "again"))  # no trace was left running
    jax.profiler.stop_trace()


def test_profile_goes_to_the_run_directory_by_default(make_task, data, tmp_path):
    x, y = data
    trainer = Trainer(max_steps=2, profile=(1, 2), run=CSVRun(tmp_path / "run"), verbose=False)
    trainer.fit(make_task(), ArrayLoader(x, y, batch_size=16))
    assert traced_steps(only_trace(tmp_path / "run"))[0] == [1]


def test_a_fit_outside_the_window_says_no_trace_was_recorded(make_task, data, tmp_path):
    x, y = data
    trainer = Trainer(max_epochs=1, profile=(50, 60), profile_dir=tmp_path, verbose=False)
    with pytest.warns(UserWarning, match=r"ran steps 0 to 6, outside the profile's window"):
        trainer.fit(make_task(), ArrayLoader(x, y, batch_size=16))
    assert not (tmp_path / "plugins").exists()


@pytest.mark.parametrize(
    ("profile", "error", "message"),
    [
        ((5, 5), ValueError, r"records the steps in \[start_step, end_step\), none here. Fix: "),
        ((6, 2), ValueError, r"end_step > start_step, e.g. profile=\(6, 7\) for one step"),
        ((-1, 3), ValueError, r"start_step must be >= 0 \(a global step\), got -1"),
        (5, TypeError, r"must be a pair \(start_step, end_step\) of ints.*got 5. Fix: e.g."),
        ((1, 2, 3), TypeError, r"must be a pair \(start_step, end_step\)"),
        ((1.0, 2), TypeError, r"must be a pair \(start_step, end_step\)"),
        ((20, 30), ValueError, r"starts at step 20, but max_steps=10 ends training before it"),
    ],
)
def test_bad_profile_windows_are_refused_when_the_trainer_is_made(profile, error, message):
    with pytest.raises(error, match=message):
        Trainer(max_steps=10, profile=profile)


def test_profile_dir_without_profile_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"profile_dir=.* but no profile: nothing would be"):
        Trainer(max_steps=10, profile_dir=tmp_path)
    with pytest.raises(TypeError, match="profile_dir must be a directory path, got int"):
        Trainer(max_steps=10, profile=(1, 2), profile_dir=3)  # type: ignore[arg-type]
