"""ModelCheckpoint(save_top_k=k) (issue 24): which steps stay on disk after every save, in both
modes, with NaN and ties, with every_n_steps, across resumes, beside steps it did not write;
best_k_models / best_path agree with the disk and with load_checkpoint(which='best')."""

import math

import numpy as np
import pytest
from js_train_testing import MLP, Scores, saved_steps

import js
from js.training import Callback, ModelCheckpoint, Trainer, load_checkpoint, save_checkpoint

NAN = math.nan


class Watch(Callback):
    """After each of the checkpoint's saves (it runs first): the steps on disk once the save
    and its pruning are complete, and what the checkpoint reports."""

    def __init__(self, checkpoint):
        self.checkpoint, self.disk, self.reported = checkpoint, [], []

    def on_fit_start(self, trainer, task):
        self.opened = {int(p.name): v for p, v in self.checkpoint.best_k_models.items()}

    def _record(self):
        self.checkpoint._manager.wait_until_finished()  # the save, then the pruning, complete
        self.disk.append(saved_steps(self.checkpoint.path))
        models = self.checkpoint.best_k_models
        self.reported.append(([int(p.name) for p in models], list(models.values())))

    def on_step_end(self, trainer, task, step):
        if self.checkpoint.every_n_steps is not None and self.checkpoint.last_step == step:
            self._record()

    def on_epoch_end(self, trainer, task, metrics):
        if self.checkpoint.every_n_steps is None:
            self._record()


def ranked(values, last, k, mode):
    """The steps kept for their score after saving ``last``, best first: NaN ranks last, a tie
    goes to the later step (every earlier step competes: a step once out of the k best never
    comes back, as more steps only push it further down)."""

    def rank(step):
        v = values[step]
        return (-math.inf if math.isnan(v) else v if mode == "max" else -v), step

    order = sorted(range(last + 1), key=rank, reverse=True)
    return order if k == -1 else order[:k]


def fit_epochs(path, values, k, mode="min", start_epoch=0, **kw):
    model, x = MLP(rngs=js.Rngs(params=0)), np.ones(2, np.float32)
    checkpoint = ModelCheckpoint(path, monitor="val/loss", mode=mode, save_top_k=k, **kw)
    watch = Watch(checkpoint)
    Trainer(start_epoch + len(values), callbacks=[checkpoint, watch], verbose=False).fit(
        Scores(values, model), [(x, x)], [(x, x)], start_epoch=start_epoch
    )
    return checkpoint, watch, model


def best_epoch(path, model, which="best"):
    return load_checkpoint(path, {"model": model, "epoch": -1}, which=which)["epoch"]


def test_two_best_and_the_last_by_hand(tmp_path):
    checkpoint, watch, model = fit_epochs(tmp_path, [3.0, 1.0, 4.0, 1.0, 5.0, 0.5], k=2)
    # epoch 3 ties epoch 1 (1.0) and wins as the later; epoch 5 (0.5) then pushes epoch 1 out
    assert watch.disk == [[0], [0, 1], [0, 1, 2], [1, 3], [1, 3, 4], [3, 5]]
    assert watch.reported[3] == ([3, 1], [1.0, 1.0])
    assert checkpoint.best_k_models == {tmp_path / "5": 0.5, tmp_path / "3": 1.0}
    assert (checkpoint.best_step, checkpoint.best_value) == (5, 0.5)
    assert checkpoint.best_path == tmp_path / "5" and checkpoint.last_step == 5
    assert best_epoch(tmp_path, model) == 5


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("k", [0, 1, 2, 3, -1])
def test_the_k_best_and_the_last_stay_after_every_epoch(tmp_path, k, mode):
    values = [3.0, 1.0, NAN, 1.0, 5.0, 0.5, NAN]
    checkpoint, watch, model = fit_epochs(tmp_path, values, k, mode)
    for last, (disk, (steps, scores)) in enumerate(zip(watch.disk, watch.reported, strict=True)):
        top = ranked(values, last, k, mode)
        assert disk == sorted({*top, last}), f"after epoch {last}"
        assert steps == top
        np.testing.assert_equal(scores, [values[s] for s in top])  # NaN equals NaN here
    top = ranked(values, len(values) - 1, k, mode)
    assert checkpoint.best_step == (top[0] if top else None)
    assert best_epoch(tmp_path, model) == (top[0] if top else len(values) - 1)
    assert best_epoch(tmp_path, model, "last") == len(values) - 1
    if k == 1:  # by hand: NaN (epoch 2) ranks below every number in either mode
        by_hand = [[0], [1], [1, 2], [3]] if mode == "min" else [[0], [0, 1], [0, 2], [0, 3]]
        assert watch.disk[:4] == by_hand


def test_save_top_k_zero_keeps_only_the_last(tmp_path):
    checkpoint, watch, model = fit_epochs(tmp_path, [2.0, 1.0, 3.0], k=0)
    assert watch.disk == [[0], [1], [2]]
    assert checkpoint.best_k_models == {} and checkpoint.best_step is None
    assert checkpoint.best_value is None and checkpoint.best_path is None
    assert best_epoch(tmp_path, model) == 2  # the only step there


def test_all_nan_keeps_the_latest_as_best(tmp_path):
    checkpoint, watch, model = fit_epochs(tmp_path, [NAN, NAN, NAN], k=1)
    assert watch.disk == [[0], [1], [2]]  # the ties go to the later step
    assert checkpoint.best_step == 2 and math.isnan(checkpoint.best_value)
    assert best_epoch(tmp_path, model) == 2


def test_a_resumed_fit_ranks_the_earlier_steps_with_its_own(tmp_path):
    first, watch, model = fit_epochs(tmp_path, [3.0, 1.0, 2.0], k=2)
    assert watch.disk[-1] == [1, 2] and first.best_step == 1
    restored = best_epoch(tmp_path, model, "last")
    checkpoint, watch, model = fit_epochs(tmp_path, [1.5, 4.0, 0.5], k=2, start_epoch=restored + 1)
    assert watch.opened == {1: 1.0, 2: 2.0}  # the earlier steps compete from the start
    # epoch 3 (1.5) beats epoch 2 (2.0) but not epoch 1 (1.0), the earlier run's best
    assert watch.disk == [[1, 3], [1, 3, 4], [1, 5]]
    assert watch.reported[:2] == [([1, 3], [1.0, 1.5])] * 2
    assert checkpoint.best_k_models == {tmp_path / "5": 0.5, tmp_path / "1": 1.0}
    assert best_epoch(tmp_path, model) == 5


def test_an_earlier_best_stays_best_after_a_resume(tmp_path):
    fit_epochs(tmp_path, [3.0, 0.1, 2.0], k=1)
    checkpoint, watch, model = fit_epochs(tmp_path, [1.0, 0.5], k=1, start_epoch=3)
    assert watch.disk == [[1, 3], [1, 4]]
    assert checkpoint.best_step == 1 and checkpoint.best_value == pytest.approx(0.1)
    assert checkpoint.best_path == tmp_path / "1" and checkpoint.last_step == 4
    assert best_epoch(tmp_path, model) == 1


def fit_steps(path, values, k, max_steps, every=1, resume=False):
    """Two batches an epoch, a validation every 2 steps, a save every ``every`` steps."""
    model, x = MLP(rngs=js.Rngs(params=0)), np.ones(2, np.float32)
    checkpoint = ModelCheckpoint(path, save_top_k=k, every_n_steps=every)
    watch = Watch(checkpoint)
    trainer = Trainer(
        max_steps=max_steps, val_every_n_steps=2, callbacks=[checkpoint, watch], verbose=False
    )
    if resume:
        load_checkpoint(path, {"model": model, "trainer": trainer}, which="last")
    trainer.fit(Scores(values, model), [(x, x)] * 2, [(x, x)], resume=resume)
    return checkpoint, watch, model, trainer


def test_step_saves_rank_by_the_latest_validation(tmp_path):
    # validations at steps 2, 4, 6; step 1 precedes any (NaN: last); steps 3 and 5 carry the
    # validation before them and, tying with it, win as the later step
    checkpoint, watch, model, _ = fit_steps(tmp_path, [2.0, 1.0, 3.0], k=2, max_steps=6)
    assert watch.disk == [[1], [1, 2], [2, 3], [3, 4], [4, 5], [4, 5, 6]]
    assert checkpoint.best_k_models == {tmp_path / "5": 1.0, tmp_path / "4": 1.0}
    assert load_checkpoint(tmp_path, {"model": model, "trainer": Trainer(1)})["step"] == 5


def test_step_saves_across_a_resume_keep_the_step_it_continues_from(tmp_path):
    checkpoint, watch, model, _ = fit_steps(tmp_path, [2.0, 1.0], k=1, max_steps=4, every=2)
    assert watch.disk == [[2], [4]] and checkpoint.best_step == 4
    # the resume first ends epoch 1 (its validation at step 4 runs again: 5.0), then 6 and 8
    checkpoint, watch, model, trainer = fit_steps(
        tmp_path, [5.0, 3.0, 0.5], k=1, max_steps=8, every=2, resume=True
    )
    assert watch.opened == {4: 1.0}  # the step the fit resumed from, ranked
    # step 6 (3.0) is kept only as the last, beside step 4 (1.0, the earlier run's best)
    assert watch.disk == [[4, 6], [8]] and trainer.global_step == 8
    assert checkpoint.best_k_models == {tmp_path / "8": 0.5}
    assert load_checkpoint(tmp_path, {"model": model, "trainer": Trainer(1)})["step"] == 8


@pytest.mark.parametrize("k", [0, 1])
def test_steps_it_did_not_write_are_never_ranked_nor_deleted(tmp_path, k):
    model = MLP(rngs=js.Rngs(params=0))
    save_checkpoint(tmp_path, {"model": model, "epoch": 0}, step=0)  # no metrics
    checkpoint, watch, model = fit_epochs(tmp_path, [2.0, 1.0, 3.0], k=k, start_epoch=1)
    assert watch.disk == ([[0, 1], [0, 2], [0, 3]] if k == 0 else [[0, 1], [0, 2], [0, 2, 3]])
    assert [int(p.name) for p in checkpoint.best_k_models] == ([] if k == 0 else [2])


@pytest.mark.parametrize(
    "value, error, message",
    [
        (-2, ValueError, r"save_top_k must be an int >= -1, got -2. Fix: pass save_top_k=k"),
        (1.5, TypeError, r"save_top_k must be an int, got .*Fix: pass an integer"),
        (True, TypeError, r"save_top_k must be an int, got True \(a bool\)"),
        ("3", TypeError, r"save_top_k must be an int"),
    ],
)
def test_save_top_k_is_checked_when_built(tmp_path, value, error, message):
    with pytest.raises(error, match=r"ModelCheckpoint: " + message):
        ModelCheckpoint(tmp_path / "ck", save_top_k=value)
    assert not (tmp_path / "ck").exists()
    assert ModelCheckpoint(tmp_path, save_top_k=np.int64(3)).save_top_k == 3
