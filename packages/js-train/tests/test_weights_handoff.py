"""From a training checkpoint to inference: js.nn.load_weights on a checkpoint directory, and
js.training.export_weights to a safetensors file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from js_train_testing import MLP

import js
import js.nn as nn
import js.training
from js.training import (
    ArrayLoader,
    CheckpointError,
    ModelCheckpoint,
    Trainer,
    export_weights,
    save_checkpoint,
)

X = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)


@pytest.fixture
def ckpt(tmp_path, make_task, data):
    """A ModelCheckpoint directory of 3 epochs (model, optimizer, rngs, epoch) and its task."""
    task = make_task()
    checkpoint = ModelCheckpoint(tmp_path / "ckpt", monitor="train/loss", mode="max")
    Trainer(3, callbacks=[checkpoint], verbose=False).fit(task, ArrayLoader(*data, batch_size=32))
    return checkpoint, task


@pytest.fixture(params=["load_weights", "read_checkpoint"])
def load(request):
    """Both readers of a checkpoint: load_weights (arrays restored onto the model's devices,
    digests checked there) and read_checkpoint (NumPy, digests checked on the host)."""
    if request.param == "load_weights":
        return lambda model, path, step=None: nn.load_weights(model, path, step=step)

    def by_read_checkpoint(model, path, step=None):
        model.load_state_dict(nn.read_checkpoint(path, which="best" if step is None else step)[1])

    return by_read_checkpoint


def _outputs(model):
    return np.asarray(model.eval()(X))


def test_load_weights_reads_the_best_step_or_the_one_asked(ckpt):
    checkpoint, task = ckpt
    # mode="max" on train/loss: the best is the first epoch (highest loss), the last differs.
    assert checkpoint.best_step == 0 and checkpoint.last_step == 2
    model = MLP(rngs=js.Rngs(params=5))
    assert nn.load_weights(model, checkpoint.path) == js.IncompatibleKeys([], [])
    reference = MLP(rngs=js.Rngs(params=6))
    js.training.load_checkpoint(
        checkpoint.path, {**task.checkpoint_objects(), "model": reference, "epoch": 0}
    )
    np.testing.assert_array_equal(_outputs(model), _outputs(reference))
    nn.load_weights(model, checkpoint.path, step=2)
    np.testing.assert_array_equal(_outputs(model), _outputs(task.model))


def test_checkpoint_errors_name_what_is_there(ckpt, tmp_path):
    checkpoint, _ = ckpt
    model = MLP(rngs=js.Rngs(params=5))
    before = model.state_dict()
    with pytest.raises(ValueError, match=r"load_weights: no step 7 in .*; steps: \[0, 2\]"):
        nn.load_weights(model, checkpoint.path, step=7)
    with pytest.raises(KeyError, match=r"holds no array entry 'net'; it holds model \(module\)"):
        nn.load_weights(model, checkpoint.path, name="net")
    with pytest.raises(KeyError, match=r"the entry 'optimizer' is a state, not a model"):
        nn.load_weights(model, checkpoint.path, name="optimizer")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"load_weights: no complete checkpoint in"):
        nn.load_weights(model, tmp_path / "empty")
    with pytest.raises(ValueError, match=r"fc2\.weight"):
        nn.load_weights(MLP(classes=4, rngs=js.Rngs(params=5)), checkpoint.path)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])


def _rewrite_meta(step_dir, change):
    meta_file = step_dir / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    change(meta)
    meta_file.write_text(json.dumps(meta))


def test_a_damaged_checkpoint_is_refused_by_both_readers(tmp_path, load):
    """The reader shared by js-nn and js-train checks the save id and every digest."""
    path = tmp_path / "c"
    for seed in (0, 1):
        save_checkpoint(path, {"model": MLP(rngs=js.Rngs(params=seed)), "epoch": seed})
    (path / "1" / "meta" / "metadata").write_bytes((path / "0" / "meta" / "metadata").read_bytes())
    model = MLP(rngs=js.Rngs(params=5))
    before = model.state_dict()
    with pytest.raises(CheckpointError, match=r"step 1: item 'state_model' belongs to another"):
        load(model, path, step=1)

    def corrupt(meta):
        meta["items"]["model"]["entries"]["fc1.bias"]["digest"] = "0123456789abcdef"

    _rewrite_meta(path / "0", corrupt)
    with pytest.raises(
        CheckpointError,
        match=r"step 0: array 'model\.fc1\.bias' does not match its recorded digest: the "
        r"checkpoint is damaged\. Fix: load another step \(which=\.\.\.\): steps 1 are",
    ):
        load(model, path, step=0)
    (path / "0" / "state_model" / "_METADATA").write_text("{not json")
    with pytest.raises(
        CheckpointError, match=r"step 0: item 'state_model' \(the arrays of 'model'\) cannot be"
    ):
        load(model, path, step=0)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])


def test_an_old_format_checkpoint_is_a_clear_error(tmp_path, load):
    save_checkpoint(tmp_path / "c", {"model": MLP(rngs=js.Rngs(params=0)), "epoch": 0})
    _rewrite_meta(tmp_path / "c" / "0", lambda meta: meta.update(format="js.training/1"))
    with pytest.raises(
        CheckpointError,
        match=r"meta/metadata has the old format 'js\.training/1' \(js-train 0\.1\), expected "
        r"'js\.training/2'\. Fix: load it with the js release that wrote it",
    ):
        load(MLP(rngs=js.Rngs(params=1)), tmp_path / "c")


def test_read_checkpoint_gives_verified_numpy_arrays(ckpt):
    checkpoint, task = ckpt
    step, arrays = nn.read_checkpoint(checkpoint.path, which="last")
    assert step == 2 and set(arrays) == set(task.model.state_dict())
    for key, value in task.model.state_dict().items():
        assert isinstance(arrays[key], np.ndarray)
        np.testing.assert_array_equal(arrays[key], value)
    step, moments = nn.read_checkpoint(checkpoint.path, name="optimizer", which=0)
    assert step == 0 and any(key.startswith("adam.mu.") for key in moments)
    with pytest.raises(FileNotFoundError, match=r"read_checkpoint: no checkpoint directory at"):
        nn.read_checkpoint(checkpoint.path / "none")
    with pytest.raises(ValueError, match=r"read_checkpoint which must be 'best', 'last' or a"):
        nn.read_checkpoint(checkpoint.path, which="first")
    assert js.training.CheckpointError is nn.CheckpointError  # one error type for both readers


def test_export_weights_writes_a_file_js_nn_loads(ckpt, tmp_path):
    checkpoint, task = ckpt
    path = tmp_path / "model.safetensors"
    assert export_weights(checkpoint.path, path, which="last", metadata={"run": "t"}) == 2
    assert nn.weights_info(path).metadata == {"run": "t", "step": "2"}
    model = MLP(rngs=js.Rngs(params=5))
    nn.load_weights(model, path)
    np.testing.assert_array_equal(_outputs(model), _outputs(task.model))
    assert export_weights(checkpoint.path, path) == 0  # the best


def test_export_weights_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"export_weights: no checkpoint directory at"):
        export_weights(tmp_path / "none", tmp_path / "w.safetensors")
    save_checkpoint(tmp_path / "c", {"net": MLP(rngs=js.Rngs(params=0)), "epoch": 1})
    with pytest.raises(KeyError, match=r"holds no array entry 'model'; it holds net \(module\)"):
        export_weights(tmp_path / "c", tmp_path / "w.safetensors")
    assert not (tmp_path / "w.safetensors").exists()
    export_weights(tmp_path / "c", tmp_path / "w.safetensors", name="net")
    assert "fc1.weight" in nn.weights_info(tmp_path / "w.safetensors").tensors
