"""WeightAveraging / EMAWeightAveraging: Lightning 2.6's callbacks on js's Trainer."""

import numpy as np
import pytest
from js_train_testing import MLP, blobs, make_optimizer

import js
import js.optim
from js.optim.swa_utils import AveragedModel
from js.training import (
    ArrayLoader,
    Callback,
    EMAWeightAveraging,
    ModelCheckpoint,
    Task,
    Trainer,
    WeightAveraging,
    load_checkpoint,
)


class Trajectory(Callback):
    """Records the model's state after every dispatch (a test-only host read)."""

    def __init__(self):
        self.states = []

    def on_step_end(self, trainer, task, step):
        self.states.append(task.model.state_dict())


def _task(seed=0, dropout=False):
    model = MLP(p=0.2 if dropout else 0.0, rngs=js.Rngs(params=seed))
    return Task(model, make_optimizer(model), rngs=js.Rngs(dropout=seed + 1) if dropout else None)


def _loaders():
    x, y = blobs(n=48)
    return ArrayLoader(x, y, batch_size=8, shuffle=True, seed=3), ArrayLoader(x, y, batch_size=24)


def _equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key, value in a.items():
        np.testing.assert_array_equal(np.asarray(b[key]), np.asarray(value), err_msg=key)


def test_validation_and_the_end_of_fit_use_the_averaged_weights():
    trajectory = Trajectory()
    plain = _task()
    plain_trainer = Trainer(max_steps=6, val_every_n_steps=3, callbacks=[trajectory], verbose=False)
    plain_history = plain_trainer.fit(plain, *_loaders())

    averaging = WeightAveraging()
    task = _task()
    trainer = Trainer(max_steps=6, val_every_n_steps=3, callbacks=[averaging], verbose=False)
    history = trainer.fit(task, *_loaders())

    # the same training: validation with the averaged weights left the trained ones alone
    _equal(plain.optimizer.state_dict(), task.optimizer.state_dict())
    assert trainer.transfers == plain_trainer.transfers  # no extra device reads
    assert [row["step"] for row in history] == [3.0, 6.0]

    # the averages of the recorded states (parameters and buffers: use_buffers=True)
    reference, holder = _task(seed=9), _task(seed=9)
    average = AveragedModel(holder.model, use_buffers=True)
    averages = []
    for state in trajectory.states:
        holder.model.load_state_dict(state)
        average.update_parameters(holder.model)
        averages.append(average.module.state_dict())
    _, val = _loaders()
    for row in history:
        reference.model.load_state_dict(averages[int(row["step"]) - 1])
        expected = Trainer(max_steps=1, verbose=False).validate(reference, val)
        assert row["val/loss"] == pytest.approx(expected["val/loss"], rel=1e-6)
        assert row["val/accuracy"] == expected["val/accuracy"]
    assert plain_history[0]["val/loss"] != pytest.approx(history[0]["val/loss"], rel=1e-6)

    # the fit ends with the averaged weights, copies of the average's
    _equal(averages[-1], task.model.state_dict())
    _equal(averages[-1], averaging.averaged_model.module.state_dict())
    assert int(averaging.averaged_model.n_averaged.value) == 6
    model_arrays = {id(v.value) for _, v in task.model.named_parameters()}
    assert not model_arrays & {id(v.value) for _, v in averaging.averaged_model.named_parameters()}


def _run(tmp_path, *, stop_at=None, resume=False, k=1):
    """12 steps with dropout over a shuffled loader of 6 batches an epoch, a validation every 5
    steps, an EMA updated every other step, a checkpoint every 4 steps (listed first: the
    update due at a saved step is still in the checkpoint)."""
    task = _task(dropout=True)
    train, val = _loaders()
    averaging = EMAWeightAveraging(decay=0.9, update_every_n_steps=2, update_starting_at_epoch=1)
    checkpoint = ModelCheckpoint(tmp_path, monitor="val/loss", every_n_steps=4)
    trainer = Trainer(
        max_steps=stop_at or 12,
        val_every_n_steps=5,
        callbacks=[checkpoint, averaging],
        verbose=False,
        steps_per_execution=k,
    )
    if resume:
        objects = {**task.checkpoint_objects(), **averaging.checkpoint_objects(trainer, task)}
        load_checkpoint(tmp_path, {**objects, "trainer": trainer, "loader": train}, which="last")
    history = trainer.fit(task, train, val, resume=resume)
    return task, averaging, history


def test_a_checkpoint_resumes_the_average_bit_for_bit(tmp_path):
    task, averaging, history = _run(tmp_path / "whole")
    _run(tmp_path / "cut", stop_at=8)
    again, again_averaging, resumed = _run(tmp_path / "cut", resume=True)

    _equal(task.model.state_dict(), again.model.state_dict())
    _equal(task.optimizer.state_dict(), again.optimizer.state_dict())
    _equal(averaging.averaged_model.state_dict(), again_averaging.averaged_model.state_dict())
    # steps 1, 3, 5, 7, 9, 11 (indices 0, 2, ...) and the end of epoch 1 (after step 12)
    assert int(averaging.averaged_model.n_averaged.value) == 7
    after = [
        {k: v for k, v in row.items() if not k.startswith(("time", "perf/"))}
        for row in history
        if row["step"] > 8
    ]
    assert after == [
        {k: v for k, v in row.items() if not k.startswith(("time", "perf/"))} for row in resumed
    ]

    # the checkpoints of step 12 agree too: the trained weights and the average
    for name in ("model", "averaged_model"):
        saved = {}
        for path in (tmp_path / "whole", tmp_path / "cut"):
            model = _task(seed=5).model
            load_checkpoint(path, {name: model}, which=12)
            saved[path] = model.state_dict()
        _equal(saved[tmp_path / "whole"], saved[tmp_path / "cut"])


def test_the_saved_average_loads_into_a_model_for_inference(tmp_path):
    task, averaging = _task(), WeightAveraging()
    checkpoint = ModelCheckpoint(tmp_path, monitor="train/loss", every_n_steps=4)
    trainer = Trainer(max_steps=8, callbacks=[averaging, checkpoint], verbose=False)
    trainer.fit(task, _loaders()[0])
    model = _task(seed=5).model
    restored = load_checkpoint(tmp_path, {"averaged_model": model}, which="last")
    assert restored["step"] == 8
    # the fit ended on step 8: the model holds the average saved there
    _equal(task.model.state_dict(), model.state_dict())
    _equal(averaging.averaged_model.module.state_dict(), model.state_dict())


def test_several_steps_per_dispatch_update_once_per_dispatch():
    averaging = WeightAveraging()
    trainer = Trainer(max_steps=6, callbacks=[averaging], steps_per_execution=3, verbose=False)
    train, _ = _loaders()
    trainer.fit(_task(), train)
    assert int(averaging.averaged_model.n_averaged.value) == 2
    assert trainer.transfers == 1  # the epoch's row only


def test_ema_should_update_is_lightnings():
    ema = EMAWeightAveraging(update_every_n_steps=3, update_starting_at_step=4)
    assert [i for i in range(12) if ema.should_update(step_idx=i)] == [6, 9]
    assert not ema.should_update(epoch_idx=5)
    assert EMAWeightAveraging(update_starting_at_epoch=2).should_update(epoch_idx=2)
    assert not EMAWeightAveraging(update_every_n_steps=0).should_update(step_idx=0)
    assert WeightAveraging().should_update(step_idx=0)
    assert not WeightAveraging().should_update(epoch_idx=0)


def test_bad_arguments_are_refused():
    with pytest.raises(NotImplementedError, match=r"WeightAveraging: device='cpu' is not"):
        WeightAveraging(device="cpu")
    with pytest.raises(TypeError, match=r"unexpected arguments \['decay'\]"):
        WeightAveraging(decay=0.9)
    with pytest.raises(ValueError, match="only one of avg_fn and multi_avg_fn"):
        WeightAveraging(avg_fn=abs, multi_avg_fn=abs)
    with pytest.raises(TypeError, match="use_buffers must be True or False"):
        WeightAveraging(use_buffers="yes")
    with pytest.raises(ValueError, match="update_every_n_steps must be an int >= 0"):
        EMAWeightAveraging(update_every_n_steps=-1)
    with pytest.raises(RuntimeError, match="there is no average yet"):
        WeightAveraging().state_dict()


def test_docstring_examples():
    import doctest

    from js.training import _weight_averaging

    assert doctest.testmod(_weight_averaging).failed == 0
