"""Task(lr_scheduler=...): the Trainer steps js.optim.lr_scheduler schedulers as Lightning does
(per epoch or per step, every `frequency`), feeds ReduceLROnPlateau its monitor, logs `lr`,
and a checkpoint restores the schedule: the runs equal hand-written loops and torch's rates."""

from __future__ import annotations

import numpy as np
import pytest
from js_train_testing import MLP, blobs

import js
import js.optim
from js.optim import lr_scheduler
from js.training import (
    ArrayLoader,
    ModelCheckpoint,
    Task,
    Trainer,
    load_checkpoint,
    save_checkpoint,
    steps,
)

torch = pytest.importorskip("torch")

LRS = (0.1, 0.05)
BATCHES = 5  # 40 examples, batch 8


def _optimizer(model):
    """SGD with momentum, two groups: the first layer at 0.1, the rest at 0.05."""
    named = list(model.named_parameters())
    first = [(n, p) for n, p in named if n.startswith("fc1.")]
    rest = [(n, p) for n, p in named if not n.startswith("fc1.")]
    return js.optim.SGD(
        [{"params": first, "lr": LRS[0]}, {"params": rest, "lr": LRS[1]}], lr=LRS[0], momentum=0.9
    )


def _torch_optimizer():
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    return torch.optim.SGD(
        [{"params": [a], "lr": LRS[0]}, {"params": [b], "lr": LRS[1]}], lr=LRS[0], momentum=0.9
    )


def _loader(shuffle=False):
    x, y = blobs(n=40)
    return ArrayLoader(x, y, batch_size=8, shuffle=shuffle, seed=3)


def _val():
    x, y = blobs(n=16, seed=1)  # other centres: the validation loss rises, the rate falls
    return ArrayLoader(x, y, batch_size=8)


def _reference(build, epochs, interval="epoch", frequency=1):
    """The hand-written loop: classification_step per batch, scheduler.step() at its interval."""
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    optimizer = _optimizer(model)
    scheduler = build(lr_scheduler, optimizer)
    loader, step = _loader(), 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        model.train()
        for batch in loader:
            steps.classification_step(model, optimizer, batch)
            step += 1
            if interval == "step" and step % frequency == 0:
                scheduler.step()
        if interval == "epoch" and (epoch + 1) % frequency == 0:
            scheduler.step()
    return model.state_dict()


def _fit(build, config=None, **trainer_options):
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    optimizer = _optimizer(model)
    scheduler = build(lr_scheduler, optimizer)
    task = Task(model, optimizer, lr_scheduler={"scheduler": scheduler, **(config or {})})
    val = trainer_options.pop("val_data", None)
    history = Trainer(verbose=False, **trainer_options).fit(task, _loader(), val)
    return model.state_dict(), history, scheduler


def _torch_rates(build, count):
    """torch's rates of both groups before each of ``count`` scheduler steps."""
    optimizer = _torch_optimizer()
    scheduler = build(torch.optim.lr_scheduler, optimizer)
    rates = []
    for _ in range(count):
        rates.append(scheduler.get_last_lr())
        optimizer.step()
        scheduler.step()
    return rates


def _same(a: dict, b: dict) -> None:
    for key, value in a.items():
        np.testing.assert_array_equal(value, b[key], err_msg=key)


def test_epoch_interval_equals_the_hand_written_loop_and_torch_rates():
    build = lambda m, o: m.StepLR(o, step_size=1, gamma=0.5)  # noqa: E731
    params, history, scheduler = _fit(build, max_epochs=3)
    _same(params, _reference(build, epochs=3))
    # one row per epoch, reported before the epoch's scheduler step: the epoch's own rates
    expected = _torch_rates(build, 3)
    assert [[row["lr"], row["lr/pg1"]] for row in history] == expected
    assert scheduler.last_epoch == 3


def test_step_interval_equals_the_hand_written_loop_and_torch_rates():
    build = lambda m, o: m.OneCycleLR(o, max_lr=[0.2, 0.1], total_steps=10)  # noqa: E731
    params, history, _ = _fit(build, {"interval": "step"}, max_steps=10, log_every_n_steps=1)
    _same(params, _reference(build, epochs=2, interval="step"))
    # a step's row comes after the scheduler stepped: the rate of the next step (as a traced lr)
    expected = _torch_rates(build, 10)[1:]
    assert [[row["lr"], row["lr/pg1"]] for row in history][:-1] == expected


def test_k_steps_per_dispatch_end_at_the_scheduler_steps():
    build = lambda m, o: m.ExponentialLR(o, gamma=0.7)  # noqa: E731
    config = {"interval": "step", "frequency": 2}
    params, history, scheduler = _fit(build, config, max_epochs=2, steps_per_execution=4)
    reference = _reference(build, epochs=2, interval="step", frequency=2)
    for key, value in params.items():
        np.testing.assert_allclose(value, reference[key], rtol=2e-6, atol=1e-7, err_msg=key)
    assert scheduler.last_epoch == 5  # 10 steps, one scheduler step every 2


def test_k_steps_per_dispatch_with_a_scheduler_every_step_is_refused():
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    optimizer = _optimizer(model)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=3)
    task = Task(model, optimizer, lr_scheduler={"scheduler": scheduler, "interval": "step"})
    trainer = Trainer(max_steps=8, steps_per_execution=4, verbose=False)
    with pytest.raises(ValueError, match=r"steps_per_execution=4\) runs 4 optimizer steps"):
        trainer.fit(task, _loader())
    assert scheduler.last_epoch == 0


def test_reduce_on_plateau_gets_the_monitored_validation_loss():
    build = lambda m, o: m.ReduceLROnPlateau(o, patience=1, factor=0.5)  # noqa: E731
    _, history, _ = _fit(build, {"monitor": "val/loss"}, max_epochs=6, val_data=_val())
    optimizer = _torch_optimizer()
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=1, factor=0.5)
    for row in history:
        assert [row["lr"], row["lr/pg1"]] == theirs.get_last_lr()
        theirs.step(row["val/loss"])
    assert theirs.get_last_lr() != [LRS[0], LRS[1]]  # the schedule reduced at least once


def test_reduce_on_plateau_names_the_metrics_when_its_monitor_is_missing():
    build = lambda m, o: m.ReduceLROnPlateau(o)  # noqa: E731
    with pytest.raises(KeyError, match=r"conditioned on metric 'train/f1' which is not available"):
        _fit(build, {"monitor": "train/f1"}, max_epochs=1)
    with pytest.warns(UserWarning, match="did not step"):
        _fit(build, {"monitor": "train/f1", "strict": False}, max_epochs=1)
    with pytest.raises(KeyError, match="'val/loss', which needs val_data"):
        _fit(build, {"monitor": "val/loss"}, max_epochs=1)
    with pytest.raises(ValueError, match=r"produces it every None steps \(val_every_n_steps\)"):
        _fit(build, {"monitor": "val/loss", "interval": "step"}, max_steps=4, val_data=_val())


@pytest.mark.parametrize(
    "config, error, message",
    [
        ({"name": "lr-SGD"}, KeyError, r"unknown keys \['name'\]"),
        ({"interval": "batch"}, ValueError, "interval must be 'epoch' or 'step', got 'batch'"),
        ({"frequency": 0}, ValueError, "frequency must be an int >= 1, got 0"),
        ({"monitor": 3}, TypeError, "monitor must be a metric name"),
        ({"strict": "yes"}, TypeError, "strict must be True or False"),
    ],
)
def test_bad_scheduler_configurations_fail_when_the_task_is_built(config, error, message):
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    optimizer = _optimizer(model)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=2)
    with pytest.raises(error, match=message):
        Task(model, optimizer, lr_scheduler={"scheduler": scheduler, **config})


def test_a_scheduler_must_be_of_the_tasks_optimizer():
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    optimizer = _optimizer(model)
    other = lr_scheduler.StepLR(_optimizer(model), step_size=2)
    with pytest.raises(ValueError, match="built on another optimizer"):
        Task(model, optimizer, lr_scheduler=other)
    with pytest.raises(KeyError, match="has no 'scheduler'"):
        Task(model, optimizer, lr_scheduler={"interval": "step"})
    with pytest.raises(ValueError, match="ReduceLROnPlateau steps on a monitored metric"):
        Task(model, optimizer, lr_scheduler=lr_scheduler.ReduceLROnPlateau(optimizer))
    with pytest.raises(TypeError, match="expected a scheduler"):
        Task(model, optimizer, lr_scheduler=lambda step: 0.1)


# -- checkpoints ---------------------------------------------------------------------------


def _run(path, build, config, *, stop_at=None, resume_from=None, every=4):
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    optimizer = _optimizer(model)
    task = Task(
        model, optimizer, lr_scheduler={"scheduler": build(lr_scheduler, optimizer), **config}
    )
    loader = _loader(shuffle=True)
    checkpoint = ModelCheckpoint(path, monitor="train/loss", every_n_steps=every)
    trainer = Trainer(
        max_steps=stop_at or 12, log_every_n_steps=2, callbacks=[checkpoint], verbose=False
    )
    if resume_from is not None:
        objects = {**task.checkpoint_objects(), "trainer": trainer, "loader": loader}
        load_checkpoint(path, objects, which=resume_from)
    history = trainer.fit(task, loader, resume=resume_from is not None)
    return model.state_dict(), history


@pytest.mark.parametrize(
    "name, cut, every",
    [
        ("step", 8, 4),  # mid-epoch 1
        ("epoch", 8, 4),  # mid-epoch 1, the epoch scheduler stepped once
        ("epoch", 5, 5),  # saved at epoch 0's last step, before its end (and its scheduler step)
    ],
)
def test_a_resumed_fit_continues_the_schedule(tmp_path, name, cut, every):
    build, config = {
        "step": (lambda m, o: m.OneCycleLR(o, max_lr=0.3, total_steps=12), {"interval": "step"}),
        "epoch": (lambda m, o: m.StepLR(o, step_size=1, gamma=0.5), {}),
    }[name]
    params, history = _run(tmp_path / "whole", build, config, every=every)
    _run(tmp_path / "cut", build, config, stop_at=cut, every=every)
    again, resumed = _run(tmp_path / "cut", build, config, resume_from=cut, every=every)
    _same(again, params)
    after = [row for row in history if row["step"] > cut]
    resumed = [row for row in resumed if row["step"] > cut]
    assert [row["step"] for row in resumed] == [row["step"] for row in after]
    for a, b in zip(after, resumed, strict=True):
        assert {k: v for k, v in a.items() if not k.startswith(("time", "perf/"))} == {
            k: v for k, v in b.items() if not k.startswith(("time", "perf/"))
        }


class Halve:
    """A callable object: LambdaLR saves its __dict__."""

    def __init__(self):
        self.base = 0.5

    def __call__(self, epoch):
        return self.base**epoch


SAVED = {
    "SequentialLR": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, 0.2, total_iters=3), m.CosineAnnealingLR(o, T_max=6)], milestones=[3]
    ),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=0.3, total_steps=20, three_phase=True),
    "LambdaLR": lambda m, o: m.LambdaLR(o, [Halve(), lambda e: 1.0 / (e + 1)]),
    "ReduceLROnPlateau": lambda m, o: m.ReduceLROnPlateau(
        o, patience=0, cooldown=1, min_lr=[0.02, 0.0]
    ),
}


@pytest.mark.parametrize("name", list(SAVED))
def test_a_checkpoint_restores_the_scheduler_and_the_rates(tmp_path, name):
    """save_checkpoint / load_checkpoint of task.checkpoint_objects(): a fresh scheduler
    continues the saved one's rates exactly (as torch's continues)."""
    build = SAVED[name]
    step = (lambda s, i: s.step(1.0 + (i % 3 == 0))) if name == "ReduceLROnPlateau" else None
    step = step or (lambda s, i: s.step())
    tasks = []
    for _ in range(2):
        model = MLP(p=0.0, rngs=js.Rngs(params=0))
        optimizer = _optimizer(model)
        scheduler = build(lr_scheduler, optimizer)
        config = {"monitor": "val/loss"} if name == "ReduceLROnPlateau" else {}
        tasks.append(Task(model, optimizer, lr_scheduler={"scheduler": scheduler, **config}))
    saved, fresh = tasks
    if name == "LambdaLR":
        saved.lr_scheduler.lr_lambdas[0].base = 0.8  # saved with the object's __dict__
    for i in range(7):
        step(saved.lr_scheduler, i)
    save_checkpoint(tmp_path, saved.checkpoint_objects())
    load_checkpoint(tmp_path, fresh.checkpoint_objects(), which="last")
    for i in range(7, 14):
        assert fresh.lr_scheduler.get_last_lr() == saved.lr_scheduler.get_last_lr()
        rates = [g["lr"] for g in fresh.optimizer.param_groups]
        assert rates == [g["lr"] for g in saved.optimizer.param_groups]
        step(saved.lr_scheduler, i), step(fresh.lr_scheduler, i)
