"""Checkpoints a careful user can trust: damaged parts, foreign parts, half-loads, two writers,
partial restores and checkpoint_info (issue 10). Every failure here reproduces on the format
before digests and locks; a second writer runs in a real child process. The cases that need
nothing of js-train or js-optim (a flipped byte, the digests, a killed and a second writer of
the lock) are js-nn's: packages/js-nn/tests/test_checkpoint_trust.py."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from js_train_testing import MLP, make_optimizer

import js
from js.training import (
    CheckpointError,
    ModelCheckpoint,
    Trainer,
    checkpoint_info,
    load_checkpoint,
    save_checkpoint,
)

SRC = [str(p) for p in Path(__file__).resolve().parents[2].glob("*/src")]


def objects(seed=0, epoch=0):
    model = MLP(rngs=js.Rngs(params=seed))
    return {
        "model": model,
        "optimizer": make_optimizer(model),
        "rngs": js.Rngs(dropout=seed),
        "epoch": epoch,
    }


def state(objs):
    return {
        name: {k: np.array(v) for k, v in obj.state_dict().items()}
        for name, obj in objs.items()
        if name != "epoch"
    }


def assert_state(objs, expected):
    for name, arrays in state(objs).items():
        for key, value in arrays.items():
            np.testing.assert_array_equal(value, expected[name][key], err_msg=f"{name}.{key}")


def two_steps(path):
    saved = [objects(seed, epoch=seed) for seed in (0, 1)]
    for objs in saved:
        save_checkpoint(path, objs)
    return saved


@pytest.mark.parametrize("damage", ["truncate", "empty", "flip", "delete"])
def test_a_damaged_meta_names_the_step_and_another_step_still_loads(tmp_path, damage):
    saved = two_steps(tmp_path)
    meta = tmp_path / "1" / "meta" / "metadata"
    text = meta.read_bytes()
    if damage == "delete":
        meta.unlink()
    else:
        broken = {
            "truncate": text[: len(text) // 2],
            "empty": b"",
            "flip": text[:10] + b"\xff" + text[11:],
        }[damage]
        meta.write_bytes(broken)
    target = objects(seed=5)
    before = state(target)
    with pytest.raises(
        CheckpointError,
        match=rf"checkpoint {tmp_path}, step 1: the metadata "
        r"file meta/metadata (is missing|cannot be read).*Fix: load another step "
        r"\(which=...\): steps 0 are present",
    ) as error:
        load_checkpoint(tmp_path, target, which="last")
    assert (error.value.step, error.value.part) == (1, "the metadata file meta/metadata")
    assert_state(target, before)
    assert load_checkpoint(tmp_path, target, which=0)["epoch"] == 0
    assert_state(target, state(saved[0]))


def test_a_damaged_or_missing_item_names_the_item(tmp_path):
    two_steps(tmp_path)
    (tmp_path / "1" / "state_optimizer" / "_METADATA").write_text("{not json")
    target = objects(seed=5)
    before = state(target)
    with pytest.raises(
        CheckpointError,
        match=r"step 1: item 'state_optimizer' \(the arrays of "
        r"'optimizer'\) cannot be read .*Fix: load another step",
    ):
        load_checkpoint(tmp_path, target, which="last")
    assert_state(target, before)  # the model item read before it was not copied either
    for item in (tmp_path / "1" / "state_rngs").iterdir():
        item.unlink() if item.is_file() else None
    with pytest.raises(CheckpointError, match=r"step 1: item 'state_rngs'"):
        load_checkpoint(tmp_path, {"rngs": target["rngs"]}, which=1)


def test_a_changed_array_does_not_match_its_digest(tmp_path):
    """The digest check itself: the meta records other contents than the item holds."""
    save_checkpoint(tmp_path, objects())
    meta_file = tmp_path / "0" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    entry = meta["items"]["optimizer"]["entries"]["adam.mu.fc1.weight"]
    entry["digest"] = "0123456789abcdef"
    meta_file.write_text(json.dumps(meta))
    target = objects(seed=4)
    before = state(target)
    with pytest.raises(
        CheckpointError,
        match=r"step 0: array 'optimizer.adam.mu.fc1.weight' "
        r"does not match its recorded digest: the checkpoint is damaged",
    ):
        load_checkpoint(tmp_path, target)
    assert_state(target, before)


def test_a_meta_from_another_save_is_refused(tmp_path):
    two_steps(tmp_path)  # same structure, other arrays and epoch
    (tmp_path / "1" / "meta" / "metadata").write_bytes(
        (tmp_path / "0" / "meta" / "metadata").read_bytes()
    )
    target = objects(seed=5)
    before = state(target)
    with pytest.raises(
        CheckpointError,
        match=r"step 1: item 'state_model' belongs to another "
        r"save .*the step mixes two saves",
    ):
        load_checkpoint(tmp_path, target, which=1)
    assert_state(target, before)


def test_a_meta_without_values_is_refused_before_anything_is_loaded(tmp_path):
    save_checkpoint(tmp_path, objects(epoch=3))
    meta_file = tmp_path / "0" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    del meta["values"]
    meta_file.write_text(json.dumps(meta))
    target = objects(seed=5)
    before = state(target)
    with pytest.raises(
        CheckpointError,
        match=r"meta/metadata lacks its 'values' or 'items' "
        r"record.*Fix: save it again; no other step is present",
    ):
        load_checkpoint(tmp_path, target)
    assert_state(target, before)
    del meta["kinds"]
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"has no valid 'kinds' record"):
        load_checkpoint(tmp_path, target)


def test_damaged_metrics_of_an_older_step_do_not_block_other_steps(tmp_path):
    model, x = MLP(rngs=js.Rngs(params=0)), np.ones((4, 4), np.float32)

    class Scored(js.training.Task):
        scores = iter([1.0, 3.0, 2.0])

        def training_step(self, model, optimizer, rngs, batch):
            return {"loss": np.float32(next(self.scores)), "count": 1}

        def validation_step(self, model, batch):  # unused: the fits have no validation data
            return {"count": 1}

        def checkpoint_objects(self):
            return {"model": model}

    # perf_metrics=False: the perf analysis traces training_step once more, taking a score
    checkpoint = ModelCheckpoint(tmp_path, monitor="train/loss")
    Trainer(3, callbacks=[checkpoint], verbose=False, perf_metrics=False).fit(
        Scored(model, make_optimizer(model)), [(x, x)]
    )
    assert sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()) == [0, 2]
    (tmp_path / "0" / "metrics" / "metrics").write_text("{broken")
    assert load_checkpoint(tmp_path, {"model": model, "epoch": -1}, which="last")["epoch"] == 2
    with pytest.warns(UserWarning, match=r"the metrics of steps \[0\] cannot be read"):
        assert load_checkpoint(tmp_path, {"model": model, "epoch": -1})["epoch"] == 2
    with pytest.raises(
        CheckpointError,
        match=r"the metrics of steps \[0\] cannot be read, and "
        r"ModelCheckpoint ranks every step by them. Fix: delete those steps",
    ):
        Trainer(4, callbacks=[ModelCheckpoint(tmp_path, monitor="train/loss")], verbose=False).fit(
            Scored(model, make_optimizer(model)), [(x, x)], start_epoch=3
        )
    assert not (tmp_path / ".js-writer.lock").exists()  # released on the refusal
    info = checkpoint_info(tmp_path)
    assert [i["step"] for i in info] == [0, 2] and info[0]["problem"].startswith("metrics")
    assert info[1]["metrics"]["train/loss"] == 2.0 and info[1]["problem"] is None
    assert info[1]["objects"] == {
        "model": {"kind": "module", "arrays": 8},
        "epoch": {"kind": "value", "value": 2},
    }


def test_partial_restore_reads_only_the_named_objects(tmp_path, make_task, data):
    task = make_task()
    checkpoint = ModelCheckpoint(tmp_path, monitor="train/loss")
    x, y = data
    Trainer(1, callbacks=[checkpoint], verbose=False).fit(
        task, js.training.ArrayLoader(x, y, batch_size=32)
    )
    for item in ("state_optimizer", "state_rngs"):  # never read by a model-only restore
        for part in sorted((tmp_path / "0" / item).rglob("*"), reverse=True):
            part.unlink() if part.is_file() else part.rmdir()
    model = MLP(rngs=js.Rngs(params=9))
    restored = load_checkpoint(tmp_path, {"model": model})
    assert restored == {"model": model, "step": 0}
    for key, value in task.model.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[key], value)
    with pytest.raises(
        ValueError,
        match=r"objects not in the checkpoint: \['ema'\] \(it holds "
        r"\['epoch', 'model', 'optimizer', 'rngs'\]\)",
    ):
        load_checkpoint(tmp_path, {"model": model, "ema": MLP(rngs=js.Rngs(params=1))})


def test_checkpoint_info_lists_steps_without_reading_arrays(tmp_path):
    two_steps(tmp_path)
    for part in (tmp_path / "0" / "state_model").rglob("*"):
        if part.is_file():
            part.write_bytes(b"")  # arrays unreadable: info does not notice, it never reads them
    info = checkpoint_info(tmp_path)
    assert [i["step"] for i in info] == [0, 1]
    assert info[0]["objects"] == {
        "model": {"kind": "module", "arrays": 8},
        "optimizer": {
            "kind": "state",
            "arrays": 17,
        },  # Adam: + lr, betas, eps, weight_decay - adam.count
        "rngs": {"kind": "rngs", "arrays": 2},
        "epoch": {"kind": "value", "value": 0},
    }
    assert info[0]["metrics"] is None and info[1]["problem"] is None
    (tmp_path / "1" / "meta" / "metadata").write_text("")
    assert "step 1: the metadata file" in checkpoint_info(tmp_path)[1]["problem"]
    with pytest.raises(FileNotFoundError, match="checkpoint_info: no checkpoint directory at"):
        checkpoint_info(tmp_path / "nowhere")


def test_a_refused_save_creates_nothing(tmp_path):
    class Ragged:
        def state_dict(self):
            return {"w": object()}

        def load_state_dict(self, state):
            pass

    with pytest.raises(TypeError, match=r"'bad': state_dict entry 'w' is a object, not an array"):
        save_checkpoint(tmp_path / "a", {"model": MLP(rngs=js.Rngs(params=0)), "bad": Ragged()})
    with pytest.raises(TypeError, match="neither stateful"):
        save_checkpoint(tmp_path / "b", {"f": print})
    with pytest.raises(
        TypeError,
        match=r"save_checkpoint lock_timeout must be a number of "
        r"seconds >= 0, got '5' \(a str\)",
    ):
        save_checkpoint(tmp_path / "b", {"epoch": 0}, lock_timeout="5")
    with pytest.raises(
        ValueError,
        match=r"ModelCheckpoint lock_timeout must be >= 0 seconds, "
        r"got -1",
    ):
        ModelCheckpoint(tmp_path / "b", lock_timeout=-1)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.process
@pytest.mark.slow
def test_a_failed_load_prints_no_traceback_on_stderr(tmp_path):
    two_steps(tmp_path)
    (tmp_path / "1" / "state_model" / "_METADATA").write_text("")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from js_train_testing import MLP
        import js
        from js.training import CheckpointError, load_checkpoint
        try:
            load_checkpoint({str(tmp_path)!r}, {{"model": MLP(rngs=js.Rngs(params=0))}}, which=1)
        except CheckpointError as error:
            print("refused:", error.part)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.stdout.strip() == "refused: item 'state_model' (the arrays of 'model')"
    assert "Traceback" not in done.stderr and "Event loop" not in done.stderr, done.stderr


HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from js.nn.checkpoint.lock import DirectoryLock
    lock = DirectoryLock(Path(sys.argv[1]), "holder").acquire()
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    lock.release()
    print("released", flush=True)
""")


def _child(script, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(SRC)}
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)], env=env, stdout=subprocess.PIPE, text=True
    )


@pytest.mark.process
@pytest.mark.slow
def test_a_second_writer_is_refused_at_once_or_waits(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    holder = _child(HOLD_LOCK, tmp_path, 2.0)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(
            TimeoutError,
            match=rf"save_checkpoint: {tmp_path} is being written "
            rf"by pid {holder.pid} on .*could not take the writer lock at once.*"
            r"Fix: wait for that writer to finish.*lock_timeout",
        ):
            save_checkpoint(tmp_path, {"epoch": 1})
        with pytest.raises(TimeoutError, match=r"ModelCheckpoint: .* within 0.1 s"):
            ModelCheckpoint(tmp_path, lock_timeout=0.1).on_fit_start(Trainer(1), None)
        assert save_checkpoint(tmp_path, {"epoch": 2}, lock_timeout=60) == 0  # waits for it
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()
        holder.stdout.close()
    assert not (tmp_path / ".js-writer.lock").exists()  # cleaned up after each writer


def test_a_failing_on_fit_start_after_a_checkpoint_frees_its_lock(tmp_path, make_task, data):
    """A later callback raising in on_fit_start left the ModelCheckpoint's writer lock held for
    the life of the process: the next save there failed "being written by pid <its own>"."""

    class Broken(js.training.Callback):
        def on_fit_start(self, trainer, task):
            raise RuntimeError("broken callback")

    checkpoint = ModelCheckpoint(tmp_path, monitor="train/loss")
    trainer = Trainer(1, callbacks=[checkpoint, Broken()], verbose=False)
    with pytest.raises(RuntimeError, match="broken callback"):
        trainer.fit(make_task(), js.training.ArrayLoader(*data, batch_size=32))
    assert not (tmp_path / ".js-writer.lock").exists()
    assert save_checkpoint(tmp_path, {"epoch": 0}) == 0


FULL_DISK_FIT = textwrap.dedent("""
    import resource, signal, sys
    import numpy as np
    sys.path.insert(0, sys.argv[2])
    from js_train_testing import MLP, make_optimizer
    import js
    from js.training import ArrayLoader, ModelCheckpoint, Task, Trainer
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    model = MLP(p=0.0, rngs=js.Rngs(params=0))
    x = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2_000, 2_000))
    checkpoint = ModelCheckpoint(sys.argv[1], "train/loss", every_n_steps=2)
    try:
        Trainer(max_steps=8, callbacks=[checkpoint], verbose=False).fit(
            Task(model, make_optimizer(model)), ArrayLoader(x, y, batch_size=8))
    except OSError as error:
        print(type(error).__name__, error)
""")


@pytest.mark.process
@pytest.mark.slow
def test_a_full_disk_during_a_fit_is_an_os_error_naming_the_directory(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK_FIT, str(tmp_path), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.stdout.startswith(
        f"OSError ModelCheckpoint: a step could not be written in {tmp_path} "
    ), done.stdout + done.stderr[-3000:]
    assert not (tmp_path / ".js-writer.lock").exists()  # the lock is freed
    # said once, by the OSError: not by orbax's writer, commit and abandoned threads as well
    assert "Traceback" not in done.stderr and "ERROR:absl" not in done.stderr, done.stderr[-3000:]


PRUNING_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, sys.argv[2])
    from js_train_testing import MLP, make_optimizer
    import js
    from js.training import ArrayLoader, ModelCheckpoint, Task, Trainer
    model = MLP(din=256, hidden=256, p=0.0, rngs=js.Rngs(params=0))  # a 256 KiB array leaf
    x = np.random.default_rng(0).normal(size=(64, 256)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    checkpoint = ModelCheckpoint(sys.argv[1], "train/loss", every_n_steps=1, save_top_k=1)
    Trainer(max_steps=40, callbacks=[checkpoint], verbose=False).fit(
        Task(model, make_optimizer(model)), ArrayLoader(x, y, batch_size=8))
""")

PRUNED_READER = textwrap.dedent("""
    import collections, os, sys, time
    sys.path.insert(0, sys.argv[2])
    from js_train_testing import MLP
    import js
    from js.nn.checkpoint import CheckpointError, load_checkpoint
    model = MLP(din=256, hidden=256, p=0.0, rngs=js.Rngs(params=1))
    path, done = sys.argv[1], sys.argv[3]
    while not (os.path.isdir(path) and any(name.isdigit() for name in os.listdir(path))):
        time.sleep(0.01)
    counts = collections.Counter()
    while not os.path.exists(done):
        try:
            load_checkpoint(path, {"model": model}, which="last")
            counts["loaded"] += 1
        except CheckpointError:  # the step was deleted while it was read
            counts["refused"] += 1
    print(counts["loaded"], counts["refused"], flush=True)
""")


@pytest.mark.process
@pytest.mark.slow
def test_reading_while_a_writer_prunes_loads_or_refuses_and_prints_nothing(tmp_path):
    """A reader loading the last step while ModelCheckpoint(save_top_k=1) deletes the older
    ones: every load is whole (digests checked) or a CheckpointError, and nothing else. orbax's
    abandoned reads printed tracebacks (13 in 174 loads) though the refusal says it once."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(SRC)}
    path, done, tests = tmp_path / "ckpt", tmp_path / "done", str(Path(__file__).parent)
    reader = subprocess.Popen(
        [sys.executable, "-c", PRUNED_READER, str(path), tests, str(done)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        writer = subprocess.run(
            [sys.executable, "-c", PRUNING_WRITER, str(path), tests],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        done.touch()
        out, err = reader.communicate(timeout=120)
    finally:
        reader.kill()
    assert writer.returncode == 0, writer.stderr[-3000:]
    assert reader.returncode == 0, err[-3000:]
    loaded, refused = map(int, out.split())
    assert loaded > 0, (loaded, refused)
    print(f"{loaded} loads, {refused} refused")
    for noise in ("Traceback", "Event loop", "never retrieved", "Exception ignored", "ERROR"):
        assert noise not in err, err[-3000:]
    steps = sorted(int(name) for name in os.listdir(path) if name.isdigit())
    assert steps[-1] == 40 and len(steps) <= 2, steps  # the best and the last: the rest pruned
