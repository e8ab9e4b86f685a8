"""Trainer limits and guards: max_time (a stop at a step boundary that saves, then resumes bit
for bit) and on_nonfinite='stop' (checked on the reads the Trainer makes anyway)."""

import datetime

import jax.numpy as jnp
import numpy as np
import pytest
from js_train_testing import MLP, FixedTask, blobs, make_optimizer

import js
from js.training import ArrayLoader, Callback, ModelCheckpoint, Task, Trainer, load_checkpoint
from js.training._options import check_max_time


def _task():
    model = MLP(rngs=js.Rngs(params=0))
    return Task(model, make_optimizer(model), rngs=js.Rngs(dropout=7))


def _loader(poison_step=None):
    """5 shuffled batches of 8 an epoch; with ``poison_step``, the batch of that global step
    (from 1) has NaN inputs, which make its loss NaN and, through the update, the model's."""
    x, y = blobs(n=40)
    loader = ArrayLoader(x, y, batch_size=8, shuffle=True, seed=3)
    if poison_step is None:
        return loader

    class Poisoned:  # the same batches, the one of poison_step poisoned; a position to save
        def __init__(self):
            self.seen = 0

        def __len__(self):
            return len(loader)

        def __iter__(self):
            for x_batch, y_batch in loader:
                self.seen += 1
                if self.seen == poison_step:
                    x_batch = np.full_like(x_batch, np.nan)
                yield x_batch, y_batch

        def set_epoch(self, epoch):
            loader.set_epoch(epoch)

        def state_dict(self):
            return loader.state_dict()

        def load_state_dict(self, state):
            loader.load_state_dict(state)

    return Poisoned()


def _state(task):
    return task.model.state_dict(), task.optimizer.state_dict()


def _assert_same(a, b):
    for one, other in zip(a, b, strict=True):
        assert one.keys() == other.keys()
        for key, value in one.items():
            np.testing.assert_array_equal(other[key], value, err_msg=key)


# -- max_time --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, seconds",
    [
        (datetime.timedelta(minutes=1, seconds=30), 90.0),
        ({"hours": 1, "minutes": 30}, 5400.0),
        ("01:02:03:04", 93784.0),
        ("00:00:00:05", 5.0),
        (12, 12.0),
        (0.5, 0.5),
        (np.float32(2.0), 2.0),
        (None, None),
    ],
)
def test_max_time_takes_lightnings_forms_and_seconds(value, seconds):
    assert check_max_time(value) == seconds
    assert Trainer(1, max_time=value).max_time == seconds


@pytest.mark.parametrize(
    "value, error, message",
    [
        ("1:30", ValueError, r"'1:30' is not 'DD:HH:MM:SS'"),
        ("00:00:-1:00", ValueError, "is not 'DD:HH:MM:SS'"),
        ({"hour": 1}, ValueError, r"takes numbers under weeks, days, .*, not \['hour'\]"),
        ({"hours": "1"}, ValueError, "a dict takes numbers under"),
        (0, ValueError, "a finite duration above 0"),
        (-5.0, ValueError, "a finite duration above 0"),
        (datetime.timedelta(0), ValueError, "a finite duration above 0"),
        (float("inf"), ValueError, "a finite duration above 0"),
        (True, TypeError, "max_time got a bool"),
        ([60], TypeError, "max_time got a list"),
    ],
)
def test_a_bad_max_time_fails_when_built(value, error, message):
    with pytest.raises(error, match=message):
        Trainer(1, max_time=value)


def _timed(tmp_path, *, max_time=None, resume=False, every=4):
    """12 steps (2.4 epochs) saving every ``every``; the fake clock reads the global step, so
    max_time=n stops after n steps of the fit (no wall-clock timing on a shared machine)."""
    task, loader = _task(), _loader()
    checkpoint = ModelCheckpoint(tmp_path, monitor="train/loss", every_n_steps=every)
    trainer = Trainer(
        max_steps=12, log_every_n_steps=2, callbacks=[checkpoint], max_time=max_time, verbose=False
    )
    trainer._clock = lambda: float(trainer.global_step)
    if resume:
        objects = {**task.checkpoint_objects(), "trainer": trainer, "loader": loader}
        load_checkpoint(tmp_path, objects, which="last")
    history = trainer.fit(task, loader, resume=resume)
    return task, trainer, checkpoint, history


@pytest.mark.parametrize("stop_after", [7, pytest.param(8, marks=pytest.mark.slow)])
def test_max_time_stops_at_a_step_saves_it_and_resumes_bit_for_bit(tmp_path, stop_after):
    straight, _, _, expected = _timed(tmp_path / "straight")

    _, trainer, checkpoint, history = _timed(tmp_path / "cut", max_time=stop_after)
    assert trainer.global_step == stop_after and trainer.should_stop
    assert trainer.stop_reason == (
        f"max_time 0:00:{stop_after:02d} reached after step {stop_after} "
        f"({float(stop_after):.1f} s into the fit)"
    )
    assert history[-1]["step"] == stop_after
    assert checkpoint.last_step == stop_after  # saved once, also when its period saved it
    assert trainer.saved_on_request == [tmp_path / "cut" / str(stop_after)]
    assert sorted(int(p.name) for p in (tmp_path / "cut").iterdir() if p.name.isdigit())[-1] == (
        stop_after
    )

    resumed, again, _, rest = _timed(tmp_path / "cut", max_time=100, resume=True)
    assert again.global_step == 12 and not again.should_stop
    _assert_same(_state(straight), _state(resumed))
    after = [row for row in expected if row["step"] > stop_after]
    assert [row["step"] for row in rest] == [row["step"] for row in after]
    if stop_after % 2:  # the first log's window after the resume starts at the resumed step
        after, rest = after[1:], rest[1:]
    for a, b in zip(after, rest, strict=True):  # the epoch's totals were restored too
        assert {k: v for k, v in a.items() if not k.startswith(("time", "perf/"))} == {
            k: v for k, v in b.items() if not k.startswith(("time", "perf/"))
        }


def test_max_time_says_why_and_where_it_saved(tmp_path, capsys):
    task, loader = _task(), _loader()
    trainer = Trainer(max_steps=12, max_time=3, progress=False)
    trainer._clock = lambda: float(trainer.global_step)
    trainer.fit(task, loader)
    assert trainer.global_step == 3
    out = capsys.readouterr().out
    assert (
        "stopping: max_time 0:00:03 reached after step 3 (3.0 s into the fit); not saved (no "
        "ModelCheckpoint(every_n_steps=...) in the callbacks)"
    ) in out

    # step 3 is also a periodic save's: saved once, and reported as the stop's
    checkpoint = ModelCheckpoint(tmp_path, monitor="train/loss", every_n_steps=3)
    trainer = Trainer(max_steps=12, callbacks=[checkpoint], max_time=3, progress=False)
    trainer._clock = lambda: float(trainer.global_step)
    trainer.fit(_task(), _loader())
    assert f"reached after step 3 (3.0 s into the fit); saved {tmp_path / '3'}" in (
        capsys.readouterr().out
    )
    assert checkpoint.last_step == 3 and trainer.saved_on_request == [tmp_path / "3"]


def test_max_time_does_not_claim_the_fits_last_step():
    # the clock runs out exactly at the last step: the fit ends as it would have, no stop
    for options in ({"max_steps": 5}, {"max_epochs": 1}):
        trainer = Trainer(**options, max_time=5, verbose=False)
        trainer._clock = lambda trainer=trainer: float(trainer.global_step)
        trainer.fit(_task(), _loader())
        assert trainer.global_step == 5 and not trainer.should_stop


def test_max_time_stops_after_the_dispatch_of_k_steps(tmp_path):
    task = _task()
    trainer = Trainer(max_steps=12, steps_per_execution=3, max_time=2, verbose=False)
    trainer._clock = lambda: float(trainer.global_step)
    trainer.fit(task, _loader())
    assert trainer.global_step == 3  # the first dispatch ran 3 steps


class Asks(Callback):
    """Asks for a save from on_epoch_end, after the fit's last step boundary."""

    def on_epoch_end(self, trainer, task, metrics):
        trainer.request_save("asked at the epoch's end")


def test_a_request_after_the_last_step_is_served_before_on_train_end(tmp_path):
    checkpoint = ModelCheckpoint(tmp_path, monitor="train/loss", every_n_steps=100)
    trainer = Trainer(max_steps=3, callbacks=[Asks(), checkpoint], verbose=False)
    trainer.fit(_task(), _loader())
    assert checkpoint.last_step == 3 and trainer.saved_on_request == [tmp_path / "3"]


# -- on_nonfinite ----------------------------------------------------------------------------


def test_on_nonfinite_is_checked():
    with pytest.raises(ValueError, match="on_nonfinite must be 'stop' or None, got 'skip'"):
        Trainer(1, on_nonfinite="skip")


def _guarded(tmp_path=None, *, poison=None, guard="stop", resume=False, max_steps=15):
    task, loader = _task(), _loader(poison)
    callbacks = []
    if tmp_path is not None:
        callbacks = [ModelCheckpoint(tmp_path, monitor="train/loss", every_n_steps=2)]
    trainer = Trainer(
        max_steps=max_steps,
        log_every_n_steps=3,
        callbacks=callbacks,
        on_nonfinite=guard,
        verbose=False,
    )
    if resume:
        assert tmp_path is not None
        objects = {**task.checkpoint_objects(), "trainer": trainer, "loader": loader}
        load_checkpoint(tmp_path, objects, which="last")
    history = trainer.fit(task, loader, resume=resume)
    return task, trainer, history, callbacks


def test_a_nonfinite_loss_stops_at_the_first_read_after_it():
    # step 7's batch is NaN: the log at step 9 reads it (steps 7-9 since the log at 6)
    _, trainer, history, _ = _guarded(poison=7)
    assert trainer.global_step == 9 and trainer.should_stop
    assert trainer.nonfinite[:2] == (7, 9) and np.isnan(trainer.nonfinite.loss)
    assert trainer.stop_reason.startswith(
        "on_nonfinite='stop': the training loss became nan in steps 7-9 (read at step 9)"
    )
    assert np.isnan(history[-1]["train/loss"]) and history[-1]["step"] == 9
    # no read of its own: as many as a fit cut there by max_steps (logs at 3, 6, 9; epoch 0's
    # end at 5)
    cut = Trainer(max_steps=9, log_every_n_steps=3, verbose=False)
    cut.fit(_task(), _loader(7))
    assert trainer.transfers == cut.transfers == 4


def test_the_guard_adds_no_read_and_changes_nothing_on_finite_losses():
    task, guarded, expected, _ = _guarded()
    plain_task, plain, history, _ = _guarded(guard=None)
    assert guarded.transfers == plain.transfers and guarded.nonfinite is None
    assert not guarded.should_stop
    _assert_same(_state(task), _state(plain_task))


def test_without_the_guard_the_fit_trains_on_and_says_where():
    _, trainer, history, _ = _guarded(poison=7, guard=None)
    assert trainer.global_step == 15 and not trainer.should_stop
    assert trainer.nonfinite[:2] == (7, 9)


def test_an_epoch_end_read_catches_it_without_logs():
    task, loader = _task(), _loader(2)
    trainer = Trainer(3, on_nonfinite="stop", verbose=False)
    trainer.fit(task, loader)
    assert trainer.epoch == 1 and trainer.global_step == 5  # epoch 0 ended, no epoch 1
    assert trainer.nonfinite[:2] == (1, 5) and "steps 1-5 (read at step 5)" in trainer.stop_reason


class InfTask(FixedTask):
    def training_step(self, model, optimizer, rngs, batch):
        x, _ = batch
        return {"loss": jnp.where(jnp.any(x > 100), jnp.inf, jnp.mean(x)), "count": len(x)}


def test_an_infinite_loss_is_caught_in_the_step_it_was_read():
    batches = [(np.full((2, 1), v, np.float32), np.zeros(2, np.int32)) for v in (1, 2, 500, 3)]
    trainer = Trainer(1, log_every_n_steps=1, on_nonfinite="stop", verbose=False)
    trainer.fit(InfTask(), batches)
    assert trainer.global_step == 3
    assert "the training loss became inf in step 3 (read at step 3)" in trainer.stop_reason


def test_no_nonfinite_step_is_saved_and_the_last_good_one_resumes(tmp_path):
    clean_task, *_ = _guarded(max_steps=15)

    # saves every 2 steps; step 7 is NaN, read at step 8 by that save's own read of the
    # Trainer's totals: not saved, and the guard stops there
    _, trainer, _, (checkpoint,) = _guarded(tmp_path, poison=7)
    assert trainer.global_step == 8 and checkpoint.skipped == [8]
    assert trainer.nonfinite[:2] == (7, 8) and "steps 7-8 (read at step 8)" in trainer.stop_reason
    assert checkpoint.last_step == 6 and checkpoint.best_step is not None
    assert checkpoint.best_step <= 6

    # resume from the last good step (6) on clean data: the same as never poisoned
    resumed, again, _, _ = _guarded(tmp_path, resume=True, max_steps=15)
    assert again.start_step == 6 and again.global_step == 15 and again.nonfinite is None
    _assert_same(_state(clean_task), _state(resumed))


class Validations:
    """One validation batch per epoch whose value is the next of ``values``."""

    def __init__(self, values):
        self.values, self.epoch = values, 0

    def __iter__(self):
        value = self.values[self.epoch]
        self.epoch += 1
        yield (np.full((1, 1), value, np.float32),)


class Accuracy(FixedTask):
    def validation_step(self, model, batch):
        value = batch[0][0, 0]
        return {"loss": value, "count": 1, "correct": value}


def test_a_nonfinite_monitored_value_never_ranks_best(tmp_path):
    batches = [(np.ones((2, 1), np.float32), np.zeros(2, np.int32))] * 2
    checkpoint = ModelCheckpoint(tmp_path, monitor="val/accuracy", mode="max")
    Trainer(3, callbacks=[checkpoint], verbose=False).fit(
        Accuracy(), batches, Validations([0.5, np.inf, 0.25])
    )
    assert checkpoint.best_step == 0 and checkpoint.last_step == 2
    restored = load_checkpoint(tmp_path, {"epoch": None})
    assert restored["epoch"] == 0  # orbax ranks it so too
