import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from js_train_testing import MLP, FixedTask, Scores, make_optimizer, saved_steps

import js
from js.training import ArrayLoader, ModelCheckpoint, Trainer, load_checkpoint, save_checkpoint


def fresh_objects(seed=0):
    model = MLP(rngs=js.Rngs(params=seed))
    return {
        "model": model,
        "optimizer": make_optimizer(model),
        "rngs": js.Rngs(dropout=seed + 7),
        "epoch": 0,
    }


def trained_task(make_task, data, epochs=1):
    task = make_task()
    Trainer(epochs, verbose=False).fit(task, ArrayLoader(*data, batch_size=32))
    return task


def test_round_trip_restores_every_object_and_plain_value(tmp_path, make_task, data):
    task = trained_task(make_task, data)
    saved = {**task.checkpoint_objects(), "epoch": 4, "note": {"lr": [0.1, 0.01]}}
    assert save_checkpoint(tmp_path / "ck", saved) == 0
    target = {**fresh_objects(), "note": None}
    target["rngs"] = js.Rngs(dropout=99)
    restored = load_checkpoint(tmp_path / "ck", target)
    assert restored["epoch"] == 4 and restored["note"] == {"lr": [0.1, 0.01]}
    assert restored["step"] == 0 and restored["model"] is target["model"]
    for name in ("model", "optimizer", "rngs"):
        want, got = saved[name].state_dict(), target[name].state_dict()
        assert want.keys() == got.keys()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{name}.{key}")
    assert int(target["optimizer"].step_count) == int(task.optimizer.step_count) > 0


def test_steps_count_up_and_which_selects_one(tmp_path):
    objects = fresh_objects()
    for epoch in range(3):
        objects["epoch"] = epoch
        save_checkpoint(tmp_path, objects)
    assert load_checkpoint(tmp_path, fresh_objects(), which=1)["epoch"] == 1
    assert load_checkpoint(tmp_path, fresh_objects(), which="last")["epoch"] == 2
    assert load_checkpoint(tmp_path, fresh_objects())["epoch"] == 2  # no metrics: best = last


def test_strict_load_reports_every_mismatch_and_loads_nothing(tmp_path, make_task, data):
    task = trained_task(make_task, data)
    save_checkpoint(tmp_path, {**task.checkpoint_objects(), "epoch": 1})
    wide = MLP(hidden=8, rngs=js.Rngs(params=1))
    target = {
        "model": wide,
        "optimizer": make_optimizer(wide),
        "rngs": js.Rngs(dropout=3),
        "extra": 0,
    }
    before = {k: v.copy() for k, v in wide.state_dict().items()}
    rngs_before = target["rngs"].state_dict()
    with pytest.raises(ValueError, match="nothing was loaded") as error:
        load_checkpoint(tmp_path, target)
    text = str(error.value)
    assert "objects not in the checkpoint: ['extra'] (it holds ['epoch', 'model', " in text
    assert "'model': 'fc1.weight': expected [8, 4] float32, checkpoint has [16, 4] float32" in text
    assert "'optimizer':" in text
    for key, value in wide.state_dict().items():  # the model was not half-loaded
        np.testing.assert_array_equal(value, before[key])
    np.testing.assert_array_equal(
        target["rngs"].state_dict()["dropout.count"], rngs_before["dropout.count"]
    )


def test_missing_and_unexpected_arrays_and_kinds_are_reported(tmp_path):
    save_checkpoint(tmp_path, {"rngs": js.Rngs(dropout=0, noise=1), "model": 3})
    with pytest.raises(ValueError) as error:
        load_checkpoint(
            tmp_path, {"rngs": js.Rngs(dropout=0, other=1), "model": MLP(rngs=js.Rngs(params=0))}
        )
    text = str(error.value)
    assert "'rngs': 'other.key' missing from the checkpoint" in text
    assert "'rngs': unexpected 'noise.key' in the checkpoint" in text
    assert "'model': expected a module, the checkpoint holds a value" in text


def test_argument_errors(tmp_path):
    with pytest.raises(TypeError, match=r"non-empty \{name: object\} dict"):
        save_checkpoint(tmp_path, {})
    with pytest.raises(ValueError, match="names must be non-empty strings without '.', got 'a.b'"):
        save_checkpoint(tmp_path, {"a.b": 1})
    with pytest.raises(TypeError, match="'f' is a builtin_function_or_method: neither stateful"):
        save_checkpoint(tmp_path, {"f": print})
    with pytest.raises(FileNotFoundError, match="no checkpoint directory at"):
        load_checkpoint(tmp_path / "nowhere", {"epoch": 0})
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no complete checkpoint in"):
        load_checkpoint(tmp_path / "empty", {"epoch": 0})
    save_checkpoint(tmp_path / "one", {"epoch": 0})
    with pytest.raises(ValueError, match=r"no step 5 in .*; steps: \[0\]"):
        load_checkpoint(tmp_path / "one", {"epoch": 0}, which=5)
    with pytest.raises(ValueError, match="which must be 'best', 'last' or a step number"):
        load_checkpoint(tmp_path / "one", {"epoch": 0}, which="first")
    assert load_checkpoint(tmp_path / "one", {"epoch": 1}, which=np.int64(0))["step"] == 0
    with pytest.raises(TypeError, match=r"save_checkpoint: step must be an int >= 0, got True"):
        save_checkpoint(tmp_path / "two", {"epoch": 0}, step=True)
    assert not (tmp_path / "two").exists()  # refused before anything is written
    with pytest.raises(ValueError, match="ModelCheckpoint mode must be 'min' or 'max'"):
        ModelCheckpoint(tmp_path, mode="best")


def test_a_checkpoint_in_another_format_is_refused(tmp_path):
    import orbax.checkpoint as ocp

    from js.nn.checkpoint.format import manager as _manager
    from js.training import CheckpointError

    manager = _manager(tmp_path, ranked=False)  # a step whose meta names a future format
    meta = {"format": "js.training/9", "kinds": {"epoch": "value"}, "values": {"epoch": 0}}
    manager.save(0, args=ocp.args.Composite(meta=ocp.args.JsonSave(meta)))
    manager.wait_until_finished()
    manager.close()
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint .*, step 0: the metadata file "
        r"meta/metadata has format 'js.training/9', expected 'js.training/2'. "
        r"Fix: load it with the js release that wrote it",
    ):
        load_checkpoint(tmp_path, {"epoch": 0})


def test_model_checkpoint_keeps_the_best_and_the_last(tmp_path, make_task, data):
    class Scored(FixedTask):
        scores = iter([3.0, 1.0, 2.0, 2.5])

        def validation_step(self, model, batch):
            return {"loss": np.float32(next(self.scores)), "count": 1}

        def checkpoint_objects(self):
            return {"model": model}

    model = MLP(rngs=js.Rngs(params=0))
    checkpoint = ModelCheckpoint(tmp_path, monitor="val/loss", mode="min")
    x = np.ones(2, np.float32)
    Trainer(4, callbacks=[checkpoint], verbose=False).fit(Scored(), [(x, x)], [(x, x)])
    assert sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()) == [1, 3]
    assert checkpoint.best_step == 1 and checkpoint.best_value == 1.0
    assert checkpoint.best_path == tmp_path / "1" and checkpoint.last_step == 3
    assert load_checkpoint(tmp_path, {"model": model, "epoch": 0})["epoch"] == 1
    assert load_checkpoint(tmp_path, {"model": model, "epoch": 0}, which="last")["epoch"] == 3


def test_a_directory_holding_later_steps_is_refused_before_training(tmp_path):
    model, x = MLP(rngs=js.Rngs(params=0)), np.ones(2, np.float32)

    def fit(epochs, checkpoint, scores, start_epoch=0):
        task = Scores(scores, model)
        Trainer(epochs, callbacks=[checkpoint], verbose=False).fit(
            task, [(x, x)], [(x, x)], start_epoch=start_epoch
        )
        return task

    fit(2, ModelCheckpoint(tmp_path), [1.0, 2.0])
    assert saved_steps(tmp_path) == [0, 1]  # the best and the last
    task = Scores([], model)  # an epoch would call next() on an empty iterator
    with pytest.raises(
        FileExistsError,
        match=r"already holds steps \[0, 1\] \(an earlier run's\), "
        r"at or after epoch 0.*start_epoch.*another directory.*overwrite=True",
    ):
        Trainer(2, callbacks=[ModelCheckpoint(tmp_path)], verbose=False).fit(
            task, [(x, x)], [(x, x)]
        )
    with pytest.raises(FileExistsError, match=r"holds steps \[1\] .* at or after epoch 1"):
        Trainer(3, callbacks=[ModelCheckpoint(tmp_path)], verbose=False).fit(
            task, [(x, x)], [(x, x)], start_epoch=1
        )
    assert saved_steps(tmp_path) == [0, 1]

    resumed = ModelCheckpoint(tmp_path)  # continuing after the last step is what resume does
    fit(3, resumed, [0.5], start_epoch=2)
    assert saved_steps(tmp_path) == [2] and resumed.best_step == 2 and resumed.last_step == 2

    fresh = ModelCheckpoint(tmp_path, overwrite=True)  # the old steps go, the new ones stay
    fit(1, fresh, [9.0])
    assert saved_steps(tmp_path) == [0] and fresh.best_step == 0
    assert load_checkpoint(tmp_path, {"model": model, "epoch": -1}, which="last")["epoch"] == 0


def test_a_skipped_save_raises_instead_of_passing_silently(tmp_path):
    model = MLP(rngs=js.Rngs(params=0))
    checkpoint, trainer = ModelCheckpoint(tmp_path, monitor="train/loss"), Trainer(1)
    task = Scores([], model)
    checkpoint.on_fit_start(trainer, task)
    try:
        checkpoint.on_epoch_end(trainer, task, {"epoch": 1.0, "train/loss": 1.0})
        with pytest.raises(FileExistsError, match=r"epoch 0 was not saved: .* holds steps \[1\]"):
            checkpoint.on_epoch_end(trainer, task, {"epoch": 0.0, "train/loss": 0.5})
    finally:
        checkpoint.on_fit_end(trainer, task)
    save_checkpoint(tmp_path / "plain", {"epoch": 0}, step=3)
    for step in (3, 2):
        with pytest.raises(FileExistsError, match=rf"step {step} was not saved: .* steps \[3\]"):
            save_checkpoint(tmp_path / "plain", {"epoch": 1}, step=step)
    assert save_checkpoint(tmp_path / "plain", {"epoch": 1}) == 4


def test_checkpoint_objects_must_not_hold_epoch(tmp_path):
    class WithEpoch(FixedTask):
        def checkpoint_objects(self):
            return {"epoch": 1}

    x = np.ones(2, np.float32)
    with pytest.raises(ValueError, match="ModelCheckpoint adds 'epoch' itself"):
        Trainer(1, callbacks=[ModelCheckpoint(tmp_path, monitor="train/loss")], verbose=False).fit(
            WithEpoch(), [(x, x)]
        )


KILLED_SAVE = textwrap.dedent("""
    import sys
    import numpy as np
    from js.training import save_checkpoint

    class Big:  # a stateful object whose second save takes long enough to be killed
        def __init__(self, n): self.w = np.full(n, 1.0, np.float32)
        def state_dict(self): return {"w": self.w}
        def load_state_dict(self, state): self.w = state["w"]

    save_checkpoint(sys.argv[1], {"big": Big(1000), "epoch": 0})
    print("first saved", flush=True)
    save_checkpoint(sys.argv[1], {"big": Big(150_000_000), "epoch": 1})
    print("second saved", flush=True)
""")


@pytest.mark.process
@pytest.mark.slow
def test_a_process_killed_during_a_save_leaves_the_previous_checkpoint(tmp_path):
    path = tmp_path / "ck"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_SAVE, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "first saved"
        deadline = time.monotonic() + 60
        while not any("tmp" in p.name for p in path.iterdir()):  # the second save has begun
            assert time.monotonic() < deadline and child.poll() is None, "save never started"
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    assert not (path / "1").exists()  # the interrupted step never became visible

    class Small:
        w = None

        def state_dict(self):
            return {"w": np.zeros(1000, np.float32)}

        def load_state_dict(self, state):
            self.w = state["w"]

    small = Small()
    restored = load_checkpoint(path, {"big": small, "epoch": None}, which="last")
    assert restored["epoch"] == 0 and restored["step"] == 0
    np.testing.assert_array_equal(small.w, np.ones(1000, np.float32))


def test_resumed_training_matches_uninterrupted_training_bit_for_bit(tmp_path, make_task, data):
    x, y = data

    def loaders():  # shuffled every epoch; dropout draws from task.rngs; BatchNorm has buffers
        return ArrayLoader(x, y, batch_size=16, shuffle=True, seed=5), ArrayLoader(
            x, y, batch_size=48
        )

    straight = make_task(seed=0)
    expected = Trainer(4, verbose=False).fit(straight, *loaders())

    first = make_task(seed=0)
    checkpoint = ModelCheckpoint(tmp_path, monitor="val/loss")
    Trainer(2, callbacks=[checkpoint], verbose=False).fit(first, *loaders())
    resumed = make_task(seed=42)  # different initial weights and dropout stream: all restored
    restored = load_checkpoint(
        tmp_path, {**resumed.checkpoint_objects(), "epoch": -1}, which="last"
    )
    assert restored["epoch"] == 1
    history = Trainer(4, verbose=False).fit(resumed, *loaders(), start_epoch=restored["epoch"] + 1)

    keys = ("epoch", "train/loss", "train/accuracy", "val/loss", "val/accuracy")
    assert [[h[k] for k in keys] for h in history] == [[h[k] for k in keys] for h in expected[2:]]
    for key, value in straight.model.state_dict().items():
        np.testing.assert_array_equal(resumed.model.state_dict()[key], value, err_msg=key)
    assert int(resumed.optimizer.step_count) == int(straight.optimizer.step_count)
