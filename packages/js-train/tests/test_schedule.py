"""The step-based schedule: max_steps (endless data too), val/log every n steps, rows with step
and epoch, one device read per log, mid-epoch checkpoints that resume bit for bit."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from js_train_testing import MLP, FixedTask, blobs, make_optimizer

import js
from js.training import (
    ArrayLoader,
    Callback,
    CSVRun,
    ModelCheckpoint,
    Task,
    Trainer,
    load_checkpoint,
)
from js.training._runs import read_csv
from js.training._schedule import Position, Schedule


class Steps(Callback):
    def __init__(self):
        self.steps, self.validations = [], []

    def on_step_end(self, trainer, task, step):
        self.steps.append(step)

    def on_validation_end(self, trainer, task, metrics):
        self.validations.append(int(metrics["step"]))


def _endless(x, y):
    for i in itertools.count():
        yield x + i % 3, y


def test_max_steps_over_an_endless_generator():
    x, y = np.ones(4, np.float32), np.ones(4, np.int32)
    steps = Steps()
    trainer = Trainer(
        max_steps=10, log_every_n_steps=4, val_every_n_steps=5, callbacks=[steps], verbose=False
    )
    history = trainer.fit(FixedTask(), _endless(x, y), [(x, y)])
    assert trainer.global_step == 10 and steps.steps == list(range(1, 11))
    assert [row["step"] for row in history] == [4.0, 5.0, 8.0, 10.0]
    assert all(row["epoch"] == 0.0 for row in history)  # the epoch never ended
    assert history[0]["train/loss"] == pytest.approx((1 + 2 + 3 + 1) / 4)  # steps 1-4
    assert history[2]["train/loss"] == pytest.approx((2 + 3 + 1 + 2) / 4)  # steps 5-8
    assert "val/loss" in history[1] and "train/loss" not in history[1]
    assert history[-1]["train/count"] == 40.0  # the last row: the (unfinished) epoch's
    assert steps.validations == [5, 10]


def test_one_device_read_per_log_and_validation():
    x, y = np.ones(4, np.float32), np.ones(4, np.int32)
    trainer = Trainer(max_steps=100, log_every_n_steps=50, verbose=False, progress=False)
    trainer.fit(FixedTask(), _endless(x, y))
    assert trainer.transfers == 2  # steps 50 and 100 (the last row reuses step 100's read)
    trainer = Trainer(
        max_steps=100, log_every_n_steps=50, val_every_n_steps=25, verbose=False, progress=False
    )
    trainer.fit(FixedTask(), _endless(x, y), [(x, y)] * 3)
    assert trainer.transfers == 2 + 4  # plus one per validation (25, 50, 75, 100)


def test_epochs_and_steps_together_and_rows_name_their_step_and_epoch():
    x, y = np.arange(10, dtype=np.float32), np.ones(10, np.int32)
    trainer = Trainer(3, max_steps=12, log_every_n_steps=3, verbose=False)
    history = trainer.fit(FixedTask(), ArrayLoader(x, y, batch_size=2))  # 5 steps an epoch
    assert [(row["epoch"], row["step"]) for row in history] == [
        (0, 3),
        (0, 5),
        (1, 6),
        (1, 9),
        (1, 10),
        (2, 12),
    ]
    assert "time/epoch_s" in history[1] and "time/epoch_s" not in history[0]
    assert history[1]["train/count"] == 10.0  # the epoch row covers the epoch
    assert history[2]["train/count"] == 2.0  # the log after an epoch end: its one step
    assert trainer.epoch == 2 and trainer.global_step == 12


def test_limit_val_batches_and_samples_per_second():
    x, y = np.ones(4, np.float32), np.ones(4, np.int32)
    trainer = Trainer(1, limit_val_batches=2, verbose=False)
    history = trainer.fit(FixedTask(), [(x, y)], [(x, y)] * 5)
    assert history[-1]["val/count"] == 8.0 and history[-1]["time/samples_per_s"] > 0


def test_a_schedule_is_logged_as_lr(data):
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    schedule = js.optim.linear_warmup(0.1, 10)
    task = Task(model, js.optim.SGD(model.parameters(), lr=schedule))
    x, y = data
    history = Trainer(max_steps=6, log_every_n_steps=3, verbose=False).fit(
        task, ArrayLoader(x, y, batch_size=8)
    )
    assert [row["lr"] for row in history] == pytest.approx([0.03, 0.06])  # lr(step_count)


def test_steps_per_execution_keeps_logs_on_their_steps():
    model = MLP(p=0.0, rngs=js.Rngs(params=0))

    class Real(Task):
        pass

    trainer = Trainer(max_steps=10, log_every_n_steps=3, steps_per_execution=2, verbose=False)
    xs, ys = blobs(n=64)
    history = trainer.fit(Real(model, make_optimizer(model)), ArrayLoader(xs, ys, batch_size=4))
    assert [row["step"] for row in history] == [3.0, 6.0, 9.0, 10.0]
    assert trainer.global_step == 10


def _run(tmp_path, *, stop_at=None, resume_from=None, every=4):
    """MLP with dropout, shuffled loader of 5 batches an epoch, 12 steps, saves every 4."""
    model = MLP(rngs=js.Rngs(params=0))
    task = Task(model, js.optim.accumulate(make_optimizer(model), every=2), rngs=js.Rngs(dropout=7))
    x, y = blobs(n=40)
    loader = ArrayLoader(x, y, batch_size=8, shuffle=True, seed=3)
    checkpoint = ModelCheckpoint(tmp_path, monitor="train/loss", every_n_steps=every)
    trainer = Trainer(
        max_steps=stop_at or 12, log_every_n_steps=2, callbacks=[checkpoint], verbose=False
    )
    if resume_from is not None:
        load_checkpoint(
            tmp_path,
            {**task.checkpoint_objects(), "trainer": trainer, "loader": loader},
            which=resume_from,
        )
    history = trainer.fit(task, loader, resume=resume_from is not None)
    return model.state_dict(), task.optimizer.state_dict(), history


@pytest.mark.parametrize(
    "cut, every, source",
    [
        (8, 4, "cut"),  # 3 batches into epoch 1
        (10, 5, "cut"),  # max_steps stopped on epoch 1's last batch (the loader not run out)
        (10, 5, "whole"),  # saved after epoch 1's end: the resume starts epoch 2
    ],
)
def test_mid_epoch_checkpoint_resumes_bit_for_bit(tmp_path, cut, every, source):
    params, opt, history = _run(tmp_path / "whole", every=every)
    if source == "cut":
        _run(tmp_path / "cut", stop_at=cut, every=every)
    again, again_opt, resumed = _run(tmp_path / source, resume_from=cut, every=every)
    for key, value in params.items():
        np.testing.assert_array_equal(again[key], value, err_msg=key)
    for key, value in opt.items():
        np.testing.assert_array_equal(again_opt[key], value, err_msg=key)
    assert int(opt["step_count"]) == 6  # 12 steps, accumulated 2 per update
    after = [row for row in history if row["step"] > cut]
    resumed = [row for row in resumed if row["step"] > cut]
    assert (
        [row["step"] for row in resumed]
        == [row["step"] for row in after]
        == [s for s in (10, 12) if s > cut]
    )
    for a, b in zip(after, resumed, strict=True):  # the epoch row's totals were restored too
        assert {k: v for k, v in a.items() if not k.startswith(("time", "perf/"))} == {
            k: v for k, v in b.items() if not k.startswith(("time", "perf/"))
        }


def test_a_resume_needs_a_restored_loader(tmp_path):
    # A partial restore may leave the loader out; the mid-epoch resume then refuses the loader
    # that is not where the Trainer stopped, before any step runs.
    _run(tmp_path, stop_at=8)
    model = MLP(rngs=js.Rngs(params=0))
    task = Task(model, js.optim.accumulate(make_optimizer(model), every=2), rngs=js.Rngs(dropout=7))
    trainer = Trainer(max_steps=12, verbose=False)
    load_checkpoint(tmp_path, {**task.checkpoint_objects(), "trainer": trainer}, which="last")
    before = model.state_dict()
    x, y = blobs(n=40)
    fresh = ArrayLoader(x, y, batch_size=8, shuffle=True, seed=3)
    fresh.load_state_dict({"epoch": 0, "batch": 0})
    with pytest.raises(ValueError, match=r"resumes epoch 1 mid-way, but train_data is at epoch 0"):
        trainer.fit(task, fresh, resume=True)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])


# -- options fail when the Trainer is built ------------------------------------------------


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({}, ValueError, "Trainer needs max_epochs or max_steps"),
        ({"max_steps": 0}, ValueError, "Trainer: max_steps must be an int >= 1, got 0"),
        (
            {"max_steps": 10, "val_every_n_steps": 20},
            ValueError,
            "val_every_n_steps=20 is more than max_steps=10",
        ),
        (
            {"max_steps": 10, "log_every_n_steps": 11},
            ValueError,
            "log_every_n_steps=11 is more than max_steps=10",
        ),
        (
            {"max_epochs": 1, "limit_val_batches": 1.5},
            TypeError,
            r"limit_val_batches must be an int >= 1, got 1\.5",
        ),
    ],
)
def test_conflicting_or_bad_schedules_fail_when_built(options, error, message):
    with pytest.raises(error, match=message):
        Trainer(**options)


def test_a_generator_needs_max_steps_and_no_epochs():
    x = np.ones(2, np.float32)
    with pytest.raises(TypeError, match="one-shot iterator.*Trainer\\(max_steps=\\.\\.\\.\\)"):
        Trainer(2, max_steps=5).fit(FixedTask(), _endless(x, x))


def test_validate_and_predict(make_task, data):
    task = make_task()
    x, y = data
    trainer = Trainer(1, verbose=False)
    metrics = trainer.validate(task, ArrayLoader(x, y, batch_size=32))
    assert set(metrics) == {"val/loss", "val/count", "val/accuracy"} and trainer.transfers == 1
    assert metrics["val/count"] == 96.0 and not task.model.training
    logits = trainer.predict(task, ArrayLoader(x, y, batch_size=32))
    assert isinstance(logits, np.ndarray) and logits.shape == (96, 3)
    np.testing.assert_allclose(logits, np.asarray(task.model(jnp.asarray(x))), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="predict: the data yielded no batches"):
        trainer.predict(task, [])
    with pytest.raises(ValueError, match="validation: the data yielded no batches"):
        trainer.validate(task, [])


def test_a_mid_epoch_resume_refuses_a_loader_at_another_epoch(tmp_path):
    _run(tmp_path, stop_at=8)
    model = MLP(rngs=js.Rngs(params=0))
    task = Task(model, js.optim.accumulate(make_optimizer(model), every=2), rngs=js.Rngs(dropout=7))
    x, y = blobs(n=40)
    loader = ArrayLoader(x, y, batch_size=8, shuffle=True, seed=3)
    trainer = Trainer(max_steps=12, verbose=False)
    load_checkpoint(
        tmp_path, {**task.checkpoint_objects(), "trainer": trainer, "loader": loader}, which=8
    )
    assert trainer.state_dict()["epoch"] == 1 and trainer.global_step == 8
    fresh = ArrayLoader(x, y, batch_size=8, shuffle=True, seed=3)
    with pytest.raises(
        ValueError,
        match=r"resumes epoch 1 mid-way, but train_data is at "
        r"epoch 0, batch 0\. Fix: restore the loader",
    ):
        trainer.fit(task, fresh, resume=True)


def test_a_validation_due_at_an_epoch_end_runs_once():
    x, y = np.ones(4, np.float32), np.ones(4, np.int32)
    steps = Steps()
    Trainer(2, val_every_n_steps=2, callbacks=[steps], verbose=False).fit(
        FixedTask(), [(x, y)] * 4, [(x, y)]
    )
    assert steps.validations == [2, 4, 6, 8]


@pytest.mark.parametrize("every, error", [(0, ValueError), (2.5, TypeError)])
def test_model_checkpoint_every_n_steps_is_checked(tmp_path, every, error):
    with pytest.raises(error, match="ModelCheckpoint: every_n_steps must be an int >= 1"):
        ModelCheckpoint(tmp_path, every_n_steps=every)


def test_step_checkpoints_rank_by_the_latest_validation(tmp_path):
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    x, y = blobs(n=32)
    checkpoint = ModelCheckpoint(tmp_path, monitor="val/loss", every_n_steps=2)
    trainer = Trainer(max_steps=6, val_every_n_steps=2, callbacks=[checkpoint], verbose=False)
    history = trainer.fit(
        Task(model, make_optimizer(model)),
        ArrayLoader(x, y, batch_size=8),
        ArrayLoader(x, y, batch_size=32),
    )
    # a save at an epoch's end (step 4) or the last step comes after that step's validation
    assert max(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()) == 6
    losses = {int(row["step"]): row["val/loss"] for row in history if "val/loss" in row}
    assert checkpoint.best_step == min(losses, key=losses.get) and checkpoint.last_step == 6


# -- a row carries its own interval; an epoch end on a log step has both -------------------


def test_a_log_at_max_steps_reports_its_interval_and_the_epoch_beside_it():
    x, y = np.ones(4, np.float32), np.ones(4, np.int32)
    trainer = Trainer(max_steps=12, log_every_n_steps=4, verbose=False)
    history = trainer.fit(FixedTask(), _endless(x, y))  # losses 1, 2, 3, 1, 2, 3, ...
    assert [row["step"] for row in history] == [4.0, 8.0, 12.0]
    last = history[-1]
    assert last["train/loss"] == pytest.approx((3 + 1 + 2 + 3) / 4)  # its own interval: 9-12
    assert last["train/count"] == 16.0
    assert last["train/loss_epoch"] == pytest.approx(2.0) and last["train/count_epoch"] == 48.0
    assert "train/loss_epoch" not in history[1]  # a log alone: only its interval
    assert history[1]["train/loss"] == pytest.approx((2 + 3 + 1 + 2) / 4)  # steps 5-8


def test_an_epoch_end_on_a_log_step_keeps_its_interval_and_adds_the_epoch(tmp_path):
    x = np.array([1, 1, 3, 5], np.float32)  # steps of one example: losses 1, 1, 3, 5
    run = CSVRun(tmp_path)
    seen = []

    class Monitor(Callback):
        def on_epoch_end(self, trainer, task, metrics):
            seen.append(metrics["train/loss"])

    history = Trainer(2, log_every_n_steps=2, run=run, verbose=False, callbacks=[Monitor()]).fit(
        FixedTask(), ArrayLoader(x, np.ones(4, np.int32), batch_size=1)
    )
    assert [row["step"] for row in history] == [2.0, 4.0, 6.0, 8.0]
    end = history[1]
    assert end["train/loss"] == pytest.approx(4.0)  # its own interval: steps 3-4
    assert end["train/loss_epoch"] == pytest.approx(2.5)  # steps 1-4
    assert "time/epoch_s" in end and "time/epoch_s" not in history[0]
    assert seen == pytest.approx([2.5, 2.5])  # on_epoch_end compares epochs: the epoch's means
    columns = read_csv(tmp_path / "metrics.csv")
    assert columns["train/loss"] == pytest.approx([1.0, 4.0, 1.0, 4.0])
    assert columns["train/loss_epoch"][1::2] == pytest.approx([2.5, 2.5])
    assert all(v != v for v in columns["train/loss_epoch"][0::2])  # empty on log-only rows


def test_an_epoch_row_without_a_log_has_the_epoch_in_the_plain_columns():
    x = np.array([1, 1, 3, 5], np.float32)
    history = Trainer(1, log_every_n_steps=3, verbose=False).fit(
        FixedTask(), ArrayLoader(x, np.ones(4, np.int32), batch_size=1)
    )
    assert [row["step"] for row in history] == [3.0, 4.0]
    assert history[0]["train/loss"] == pytest.approx(5 / 3)  # steps 1-3
    assert history[1]["train/loss"] == pytest.approx(2.5)  # steps 1-4: its interval is the epoch
    assert "train/loss_epoch" not in history[1]


# -- the Schedule alone --------------------------------------------------------------------


@pytest.mark.parametrize(
    "step, steps, due",
    [
        (1, 1, (False, False, False)),
        (3, 1, (True, False, False)),  # val every 3
        (4, 2, (True, True, False)),  # steps 3-4 of one dispatch cross both
        (5, 1, (True, False, True)),  # the data's 5 batches: the epoch's end validates
        (12, 1, (True, True, True)),  # max_steps, mid-epoch 2: an epoch end too
    ],
)
def test_the_schedule_says_what_a_dispatch_reaches(step, steps, due):
    schedule = Schedule(
        max_steps=12, val_every_n_steps=3, log_every_n_steps=4, validates=True, length=5
    )
    start = 10 if step == 12 else 0
    assert tuple(schedule.after(Position(step=step, epoch_start_step=start), steps)) == due


def test_the_schedule_knows_a_complete_epoch_from_one_cut_short():
    schedule = Schedule(max_steps=12, length=5)
    assert schedule.ran_out(Position(step=5), stopped=True)  # all 5 batches: complete
    assert not schedule.ran_out(Position(step=3), stopped=True)  # a stop mid-epoch
    assert not schedule.ran_out(Position(step=12, epoch_start_step=10), stopped=False)
    assert Schedule(max_epochs=1).ran_out(Position(step=3), stopped=False)  # no length: ran out
    assert schedule.remaining(Position(step=7, epoch_start_step=5)) == 3
    assert schedule.room(Position(step=7)) == 5 and schedule.bar_total(Position(step=7)) == 5
    assert Schedule(max_epochs=2, length=5).bar_total(Position(step=7, epoch_start_step=5)) == 3


def test_a_list_resumed_at_its_epochs_last_step_only_ends_that_epoch():
    # a list has no position of its own; the Trainer's says the epoch's 4 batches are done
    x, y = np.ones(4, np.float32), np.ones(4, np.int32)
    saved = []

    class Save(Callback):
        def on_step_end(self, trainer, task, step):
            saved.append(trainer.state_dict())  # as ModelCheckpoint(every_n_steps=4) saves

    Trainer(max_steps=4, callbacks=[Save()], verbose=False).fit(FixedTask(), [(x, y)] * 4)
    assert (saved[-1]["epoch"], saved[-1]["step"], saved[-1]["count"]) == (0, 4, 16.0)
    steps = Steps()
    trainer = Trainer(2, callbacks=[steps], verbose=False)
    trainer.load_state_dict(saved[-1])
    history = trainer.fit(FixedTask(), [(x, y)] * 4, resume=True)
    assert [(row["epoch"], row["step"]) for row in history] == [(0, 4), (1, 8)]
    assert steps.steps == [5, 6, 7, 8] and history[0]["train/count"] == 16.0
