"""From a training checkpoint to inference: js.nn.load_weights on a checkpoint directory, and
js.training.export_weights to a safetensors file."""

from __future__ import annotations

import numpy as np
import pytest
from js_train_testing import MLP

import js
import js.nn as nn
import js.training
from js.nn import _checkpoint_read
from js.training import ArrayLoader, ModelCheckpoint, Trainer, export_weights, save_checkpoint

X = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)


@pytest.fixture
def ckpt(tmp_path, make_task, data):
    """A ModelCheckpoint directory of 3 epochs (model, optimizer, rngs, epoch) and its task."""
    task = make_task()
    checkpoint = ModelCheckpoint(tmp_path / "ckpt", monitor="train/loss", mode="max")
    Trainer(3, callbacks=[checkpoint], verbose=False).fit(task, ArrayLoader(*data, batch_size=32))
    return checkpoint, task


@pytest.fixture(params=["orbax", "js-train"])
def route(request, monkeypatch):
    """Both ways load_weights reads a checkpoint: js-train's partial restore, when this js-train
    has it (``checkpoint_info``), and js-nn's own minimal orbax read (what a js-nn-only install
    uses)."""
    if request.param == "orbax":
        monkeypatch.setattr(_checkpoint_read, "_training", lambda: None)
    elif not hasattr(js.training, "checkpoint_info"):
        pytest.skip("this js-train has no partial restore: js-nn reads through orbax")
    return request.param


def _outputs(model):
    return np.asarray(model.eval()(X))


def test_load_weights_reads_the_best_step_or_the_one_asked(ckpt, route):
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


def test_checkpoint_errors_name_what_is_there(ckpt, tmp_path, route):
    checkpoint, _ = ckpt
    model = MLP(rngs=js.Rngs(params=5))
    before = model.state_dict()
    if route == "orbax":
        with pytest.raises(KeyError, match=r"has no step 7; steps: \[0, 2\]"):
            nn.load_weights(model, checkpoint.path, step=7)
        with pytest.raises(KeyError, match=r"holds no model entry 'net' \(format 'js\.train"):
            nn.load_weights(model, checkpoint.path, name="net")
        (tmp_path / "empty").mkdir()
        with pytest.raises(FileNotFoundError, match=r"holds no complete js checkpoint step"):
            nn.load_weights(model, tmp_path / "empty")
    with pytest.raises(ValueError, match=r"fc2\.weight"):
        nn.load_weights(MLP(classes=4, rngs=js.Rngs(params=5)), checkpoint.path)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])


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
    with pytest.raises(KeyError, match=r"holds no model entry 'model' \(module entries: \['net'\]"):
        export_weights(tmp_path / "c", tmp_path / "w.safetensors")
    assert not (tmp_path / "w.safetensors").exists()
    export_weights(tmp_path / "c", tmp_path / "w.safetensors", name="net")
    assert "fc1.weight" in nn.weights_info(tmp_path / "w.safetensors").tensors
