import jax.numpy as jnp
import numpy as np
import pytest
from js_train_testing import FixedTask, blobs

from js.training import ArrayLoader, Callback, EarlyStopping, Task, Trainer


class Recorder(Callback):
    def __init__(self):
        self.calls, self.metrics = [], []

    def on_fit_start(self, trainer, task):
        self.calls.append("fit_start")

    def on_epoch_start(self, trainer, task, epoch):
        self.calls.append(f"epoch_start {epoch}")

    def on_validation_end(self, trainer, task, metrics):
        self.calls.append("validation_end")

    def on_epoch_end(self, trainer, task, metrics):
        self.calls.append("epoch_end")
        self.metrics.append(metrics)

    def on_fit_end(self, trainer, task):
        self.calls.append("fit_end")


class ListRun:
    def __init__(self):
        self.logged, self.closed = [], False

    def log(self, metrics, step):
        self.logged.append((step, metrics))

    def close(self):
        self.closed = True


def test_history_is_count_weighted_and_named_by_split():
    x = np.array([1.0, 1.0, 1.0, 4.0], np.float32)  # batches of 3 and 1: means 1 and 4
    y = np.array([1, 0, 1, 1], np.int32)
    trainer = Trainer(2, verbose=False)
    history = trainer.fit(FixedTask(), ArrayLoader(x, y, batch_size=3), [(x, y)])
    assert [h["epoch"] for h in history] == [0.0, 1.0]
    first = history[0]
    assert first["train/loss"] == pytest.approx((1.0 * 3 + 4.0 * 1) / 4)  # not (1 + 4) / 2
    assert first["train/count"] == 4.0
    assert first["train/accuracy"] == pytest.approx(0.75)
    assert first["val/loss"] == 2.0 and "val/accuracy" not in first
    assert all(isinstance(v, float) for v in first.values())


def test_one_device_read_per_epoch_and_split():
    x, y = np.ones(40, np.float32), np.ones(40, np.int32)
    trainer = Trainer(3, verbose=False, progress=False)
    trainer.fit(FixedTask(), ArrayLoader(x, y, batch_size=4), ArrayLoader(x, y, batch_size=8))
    assert trainer.transfers == 6  # per epoch, 10 train steps, 5 val steps: one read each


def test_phases_callbacks_and_run_get_the_same_metrics(capsys):
    task, recorder, run = FixedTask(), Recorder(), ListRun()
    x, y = np.ones(4, np.float32), np.ones(4, np.int32)
    history = Trainer(2, callbacks=[recorder], run=run).fit(task, [(x, y)], [(x, y)])
    assert task.phases == ["train", "eval", "train", "eval"]
    assert recorder.calls == [
        "fit_start",
        "epoch_start 0",
        "validation_end",
        "epoch_end",
        "epoch_start 1",
        "validation_end",
        "epoch_end",
        "fit_end",
    ]
    assert recorder.metrics == history == [m for _, m in run.logged]
    assert [step for step, _ in run.logged] == [1, 2] and run.closed  # the global step
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith(
        "epoch 1  step 2  train/loss 1  train/accuracy 100%"
    )


def test_default_task_trains_a_dropout_classifier(make_task, data):
    task = make_task()
    x, y = data
    history = Trainer(4, verbose=False).fit(
        task, ArrayLoader(x, y, batch_size=16, shuffle=True), ArrayLoader(x, y, batch_size=48)
    )
    assert history[-1]["train/loss"] < history[0]["train/loss"]
    assert history[-1]["val/accuracy"] > 0.8
    assert not task.model.training  # left in eval mode by the last validation


class ValLosses(FixedTask):
    """val/loss from a list, one value per epoch."""

    def __init__(self, losses):
        super().__init__()
        self.losses = iter(losses)

    def validation_step(self, model, batch):
        return {"loss": jnp.float32(next(self.losses)), "count": 1}


def test_early_stopping_stops_and_says_why(capsys):
    stopper = EarlyStopping("val/loss", patience=1, mode="min")
    x = np.ones(2, np.float32)
    history = Trainer(10, callbacks=[stopper]).fit(ValLosses(range(1, 11)), [(x, x)], [(x, x)])
    assert len(history) == 2 and stopper.stopped_epoch == 1  # Lightning: epoch 1 is 1 too many
    out = capsys.readouterr().out
    assert (
        "stopping: EarlyStopping: val/loss did not improve for 1 epoch (best 1, patience 1)" in out
    )


@pytest.mark.parametrize("patience, stopped", [(0, 2), (1, 2), (2, 3), (3, 4), (4, None)])
def test_early_stopping_counts_epochs_without_improvement_like_lightning(patience, stopped):
    # best at epoch 1; epochs 2, 3, 4 do not improve (a tie is no improvement); 5 improves.
    # Lightning and Keras stop after the patience-th epoch without improvement: 1 + patience
    losses = [3.0, 1.0, 2.0, 1.0, 1.5, 0.5, 9.0]
    stopper = EarlyStopping("val/loss", patience=patience)
    x = np.ones(2, np.float32)
    history = Trainer(6, callbacks=[stopper], verbose=False).fit(
        ValLosses(losses), [(x, x)], [(x, x)]
    )
    assert stopper.stopped_epoch == stopped
    assert len(history) == (6 if stopped is None else stopped + 1)


def test_start_epoch_numbers_epochs_and_sets_the_loader_epoch():
    loader = ArrayLoader(np.ones(4, np.float32), np.ones(4, np.int32), batch_size=2, shuffle=True)
    history = Trainer(5, verbose=False).fit(FixedTask(), loader, start_epoch=3)
    assert [h["epoch"] for h in history] == [3.0, 4.0] and loader.epoch == 5


@pytest.mark.parametrize("interval, reads", [(1e9, 1), (0.0, 5)])
def test_progress_reads_the_device_at_most_once_per_interval(interval, reads):
    x = np.ones(8, np.float32)
    trainer = Trainer(1, progress=True, verbose=False)
    trainer.progress_interval_s = interval
    trainer.fit(FixedTask(), ArrayLoader(x, x.astype(np.int32), batch_size=2))
    assert trainer.transfers == reads  # 4 steps: the epoch's read, plus one per redraw


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "epochs, error, message",
    [
        (0, ValueError, "got 0$"),
        (1.5, TypeError, r"got 1\.5 \(a float\)\. Fix: pass an integer, e\.g\. max_epochs=1"),
        (True, TypeError, r"got True \(a bool\)"),  # an int to Python, never meant as a count
    ],
)
def test_max_epochs_must_be_a_positive_int(epochs, error, message):
    with pytest.raises(error, match="Trainer: max_epochs must be an int >= 1, " + message):
        Trainer(epochs)


def test_numpy_integers_count_as_ints():
    trainer = Trainer(np.int64(2), steps_per_execution=np.int32(2), verbose=False)
    assert (trainer.max_epochs, trainer.steps_per_execution) == (2, 2)
    assert type(trainer.max_epochs) is int
    assert EarlyStopping(patience=np.int64(1)).patience == 1
    x = np.ones(2, np.float32)
    history = trainer.fit(FixedTask(), [(x, x)], start_epoch=np.int64(1))
    assert [h["epoch"] for h in history] == [1.0]


@pytest.mark.parametrize(
    "start, error, message",
    [
        (-1, ValueError, "got -1$"),
        (True, TypeError, r"got True \(a bool\)"),
        (1.0, TypeError, r"got 1\.0 \(a float\)"),
    ],
)
def test_start_epoch_must_be_an_int(start, error, message):
    x = np.ones(2, np.float32)
    with pytest.raises(error, match="fit: start_epoch must be an int >= 0, " + message):
        Trainer(2).fit(FixedTask(), [(x, x)], start_epoch=start)


def test_callbacks_must_be_callbacks():
    with pytest.raises(TypeError, match="callbacks must be Callback instances, got function"):
        Trainer(1, callbacks=[lambda: None])


def test_run_needs_log():
    with pytest.raises(TypeError, match=r"run must have a log\(metrics, step\) method"):
        Trainer(1, run=object())


def test_two_checkpoints_on_one_path_conflict(tmp_path):
    from js.training import ModelCheckpoint

    with pytest.raises(ValueError, match="two checkpoint callbacks writing to the same path"):
        Trainer(1, callbacks=[ModelCheckpoint(tmp_path), ModelCheckpoint(tmp_path, mode="max")])


def test_one_shot_iterators_are_refused_for_several_epochs():
    batches = iter([(np.ones(2), np.ones(2))])
    with pytest.raises(TypeError, match="train_data is a one-shot iterator"):
        Trainer(2).fit(FixedTask(), batches)
    with pytest.raises(TypeError, match="val_data must be an iterable of batches, got int"):
        Trainer(1).fit(FixedTask(), [], 3)


def test_empty_data_is_an_error():
    with pytest.raises(ValueError, match="epoch 0 train: the data yielded no batches"):
        Trainer(1).fit(FixedTask(), [])


def test_steps_must_return_loss_and_count():
    class NoCount(FixedTask):
        def training_step(self, model, optimizer, rngs, batch):
            return {"loss": jnp.float32(1.0)}

    with pytest.raises(KeyError, match=r"must return a dict with 'loss' and 'count'.*\['loss'\]"):
        Trainer(1).fit(NoCount(), [(1, 1)])


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: EarlyStopping(mode="up"), "EarlyStopping mode must be 'min' or 'max', got 'up'"),
        (lambda: EarlyStopping(patience=-1), "EarlyStopping: patience must be an int >= 0"),
    ],
)
def test_early_stopping_options_fail_when_built(build, message):
    with pytest.raises(ValueError, match=message):
        build()
    with pytest.raises(TypeError, match=r"patience must be an int >= 0, got True \(a bool\)"):
        EarlyStopping(patience=True)


class NoSteps(FixedTask):
    def training_step(self, model, optimizer, rngs, batch):
        raise AssertionError("a step ran before the monitor check")


@pytest.mark.parametrize("monitor", ["val/loss", "val_loss", "train/f1"])
def test_a_monitor_that_cannot_exist_fails_before_training(tmp_path, monitor):
    from js.training import ModelCheckpoint

    x = np.ones(2, np.float32)
    with pytest.raises(
        KeyError,
        match=rf"EarlyStopping monitors '{monitor}', but the epoch's "
        r"metrics are \['epoch', .*'train/loss'.*val/\.\.\. needs val_data",
    ):
        Trainer(2, callbacks=[EarlyStopping(monitor)], verbose=False).fit(NoSteps(), [(x, x)])
    checkpoint = ModelCheckpoint(tmp_path / "ck", monitor=monitor)
    with pytest.raises(KeyError, match=rf"ModelCheckpoint monitors '{monitor}'"):
        Trainer(2, callbacks=[checkpoint], verbose=False).fit(NoSteps(), [(x, x)])
    assert not (tmp_path / "ck").exists()


def test_a_monitor_missing_at_the_epoch_end_names_what_exists():
    x = np.ones(2, np.float32)  # train/accuracy exists only when steps return 'correct'
    with pytest.raises(KeyError, match=r"EarlyStopping monitors 'val/accuracy'.*'val/loss'"):
        Trainer(2, callbacks=[EarlyStopping("val/accuracy")], verbose=False).fit(
            FixedTask(), [(x, x)], [(x, x)]
        )


def test_task_checks_its_arguments(make_task):
    model = make_task().model
    with pytest.raises(TypeError, match="Task model must be a js.Module, got int"):
        Task(1, None)
    with pytest.raises(TypeError, match=r"Task optimizer must have a step\(grads\) method"):
        Task(model, object())
    with pytest.raises(TypeError, match="Task rngs must be a js.Rngs or None, got int"):
        Task(model, make_task().optimizer, rngs=3)
    with pytest.raises(ValueError, match="phase must be 'train' or 'eval', got 'test'"):
        make_task().set_phase("test")
    assert set(make_task().checkpoint_objects()) == {"model", "optimizer", "rngs"}
    assert set(make_task(dropout=False).checkpoint_objects()) == {"model", "optimizer"}


# -- the documented hook order -------------------------------------------------------------


class Order(Callback):
    """Records every hook, and ``log`` from the run, with the step it saw."""

    def __init__(self, stop_at=None):
        self.calls, self.stop_at, self.saved = [], stop_at, {}

    def on_fit_start(self, trainer, task):
        self.calls.append("fit_start")

    def on_epoch_start(self, trainer, task, epoch):
        self.calls.append(f"epoch_start {epoch}")

    def on_step_end(self, trainer, task, step):
        self.calls.append(f"step_end {step}")
        self.saved[step] = trainer.state_dict(), trainer.loader_position().state_dict()
        if step == self.stop_at:
            trainer.stop()

    def on_validation_end(self, trainer, task, metrics):
        self.calls.append(f"validation_end {int(metrics['step'])}")

    def on_epoch_end(self, trainer, task, metrics):
        self.calls.append(f"epoch_end {int(metrics['step'])}")

    def on_fit_end(self, trainer, task):
        self.calls.append("fit_end")

    def log(self, metrics, step):  # the run
        self.calls.append(f"log {step}")


def _order(task=None, *, stop_at=None, state=None, **options):
    """A fit over 4 batches an epoch (and 1 validation batch) that records its hooks."""
    x, y = blobs(n=16)
    loader = ArrayLoader(x, y, batch_size=4)
    order = Order(stop_at)
    trainer = Trainer(callbacks=[order], run=order, verbose=False, **options)
    if state is not None:
        trainer.load_state_dict(state[0])
        loader.load_state_dict(state[1])
    trainer.fit(task or FixedTask(), loader, [(x, y)], resume=state is not None)
    return order


def test_hooks_fire_once_each_in_the_documented_order():
    # a step's validation, then on_step_end, then its row to the run (once: it closes no
    # epoch), or at the epoch's last step its row to the run, then on_step_end, then its end
    order = _order(max_steps=7, val_every_n_steps=3, log_every_n_steps=2)
    assert order.calls == [
        "fit_start",
        "epoch_start 0",
        "step_end 1",
        "step_end 2",
        "log 2",
        "validation_end 3",
        "step_end 3",
        "log 3",
        "validation_end 4",
        "log 4",
        "step_end 4",
        "epoch_end 4",  # the epoch's last step
        "epoch_start 1",
        "step_end 5",
        "validation_end 6",
        "step_end 6",
        "log 6",
        "validation_end 7",
        "log 7",
        "step_end 7",
        "epoch_end 7",  # max_steps, mid-epoch
        "fit_end",
    ]


def test_a_stop_mid_epoch_ends_the_epoch_at_that_step():
    order = _order(max_epochs=3, log_every_n_steps=2, stop_at=2)
    assert order.calls == [
        "fit_start",
        "epoch_start 0",
        "step_end 1",
        "step_end 2",
        # the step's row gains the epoch's validation and means, and is logged once
        "validation_end 2",
        "log 2",
        "epoch_end 2",
        "fit_end",
    ]


def test_resumes_fire_the_rest_of_the_order():
    first = _order(max_steps=8, log_every_n_steps=2)
    # mid-epoch (after step 6): the epoch continues at its third batch
    order = _order(max_steps=8, log_every_n_steps=2, state=first.saved[6])
    assert order.calls == [
        "fit_start",
        "epoch_start 1",
        "step_end 7",
        "validation_end 8",
        "log 8",
        "step_end 8",
        "epoch_end 8",
        "fit_end",
    ]
    # saved by on_step_end at an epoch's last step, before its end: only the end is left
    order = _order(max_epochs=2, state=first.saved[4])
    assert order.calls == [
        "fit_start",
        "epoch_start 0",
        "validation_end 4",
        "log 4",
        "epoch_end 4",
        "epoch_start 1",
        "step_end 5",
        "step_end 6",
        "step_end 7",
        "validation_end 8",
        "log 8",
        "step_end 8",
        "epoch_end 8",
        "fit_end",
    ]


def test_k_steps_per_dispatch_keep_the_order(make_task):
    # K=2: on_step_end once per dispatch of 2 steps, after the validation they reach
    order = _order(make_task(), max_epochs=1, steps_per_execution=2, val_every_n_steps=2)
    assert order.calls == [
        "fit_start",
        "epoch_start 0",
        "validation_end 2",
        "step_end 2",
        "log 2",
        "validation_end 4",
        "log 4",
        "step_end 4",
        "epoch_end 4",
        "fit_end",
    ]
