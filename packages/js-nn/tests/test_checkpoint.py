"""js.nn.checkpoint with js-nn alone (no js-train, no js-optim installed in this suite): save,
load_weights on a checkpoint directory, the optimizer protocol, the old module path."""

from __future__ import annotations

import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.nn as nn
from js.nn import checkpoint
from js.nn.checkpoint import format as ckpt_format


def _linear(seed: int) -> nn.Linear:
    return nn.Linear(3, 2, rngs=js.Rngs(params=seed))


def test_load_weights_reads_the_metadata_once_and_never_imports_js_train(monkeypatch, tmp_path):
    saved = _linear(0)
    assert checkpoint.save_checkpoint(tmp_path, {"model": saved, "epoch": 4}) == 0
    reads = []
    real = ckpt_format.read_json

    def counted(path):
        reads.append(str(path))
        return real(path)

    monkeypatch.setattr(ckpt_format, "read_json", counted)
    model = _linear(1)
    assert nn.load_weights(model, tmp_path) == js.IncompatibleKeys([], [])
    assert [r for r in reads if r.endswith("meta/metadata")] == [str(tmp_path / "0/meta/metadata")]
    for key, value in saved.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[key], value)
    assert "js.training" not in sys.modules and "js.optim" not in sys.modules


def test_load_weights_on_a_checkpoint_with_js_train_absent(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "js.training", None)  # importing it would now fail
    checkpoint.save_checkpoint(tmp_path, {"model": _linear(0)})
    nn.load_weights(_linear(1), tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"load_weights: no complete checkpoint in"):
        nn.load_weights(_linear(1), tmp_path / "empty")
    with pytest.raises(
        ValueError,
        match=r"load_weights\('.*', step 0\) does not fit the "
        r"objects; nothing was loaded\.\n  'model': 'weight': expected \[4, 3\]",
    ):
        nn.load_weights(nn.Linear(3, 4, rngs=js.Rngs(params=0)), tmp_path)


class _Slots:
    """An optimizer's protocol without js-optim: a flat ``state_dict(as_numpy=...)`` of live
    arrays and a ``load_state_dict`` that takes the same flat dict back."""

    def __init__(self, value: float):
        self.arrays = {"adam.mu.weight": jnp.full((2, 3), value), "step_count": jnp.uint32(3)}
        self.loaded = None

    def state_dict(self, *, as_numpy: bool = True):
        if not as_numpy:
            return dict(self.arrays)
        return {key: np.asarray(value) for key, value in self.arrays.items()}

    def load_state_dict(self, state_dict):
        self.loaded = state_dict


class _Nested:
    """A stateful object with a nested state dict (no ``as_numpy``): given back nested."""

    def __init__(self, value: int):
        self.state = {"position": {"batch": np.int64(value)}}

    def state_dict(self):
        return self.state

    def load_state_dict(self, state_dict):
        self.state = state_dict


def test_objects_are_recognised_by_their_protocol(tmp_path):
    assert checkpoint.format.native(_Slots(1.0)) and not checkpoint.format.native(_Nested(0))
    checkpoint.save_checkpoint(tmp_path, {"opt": _Slots(1.0), "loader": _Nested(7)})
    opt, loader = _Slots(0.0), _Nested(0)
    restored = checkpoint.load_checkpoint(tmp_path, {"opt": opt, "loader": loader})
    assert restored["step"] == 0
    assert sorted(opt.loaded) == ["adam.mu.weight", "step_count"]  # flat, as saved
    np.testing.assert_array_equal(opt.loaded["adam.mu.weight"], np.ones((2, 3), np.float32))
    assert loader.state == {"position": {"batch": 7}}  # nested, in the object's own layout


class _Position:
    """A ``json`` kind object: get_state/set_state with a JSON state of any size."""

    def __init__(self, state, refuse: str | None = None):
        self.state, self.refuse = state, refuse

    def get_state(self):
        return self.state

    def set_state(self, state):
        self.state = state

    def check_state(self, state):
        return self.refuse


def test_json_states_are_saved_in_the_meta_checked_and_restored_first(tmp_path):
    saved = {"next_index": 3, "workers": [{"i": 1}, {"i": 2}], "text": "x" * 100}
    checkpoint.save_checkpoint(tmp_path, {"model": _linear(0), "loader": _Position(saved)})
    info = checkpoint.checkpoint_info(tmp_path)[0]["objects"]["loader"]
    assert info == {"kind": "json", "value": saved}
    model, position = _linear(1), _Position({"next_index": 0})
    checkpoint.load_checkpoint(tmp_path, {"model": model, "loader": position})
    assert position.state == saved  # a state of another size than the live one
    np.testing.assert_array_equal(model.state_dict()["weight"], _linear(0).state_dict()["weight"])
    model, refusing = _linear(1), _Position({}, refuse="another pipeline. Fix: pass the same one")
    with pytest.raises(ValueError, match=r"'loader': another pipeline\. Fix: pass the same one"):
        checkpoint.load_checkpoint(tmp_path, {"model": model, "loader": refusing})
    assert refusing.state == {}  # refused before anything was restored
    np.testing.assert_array_equal(model.state_dict()["weight"], _linear(1).state_dict()["weight"])
    with pytest.raises(
        ValueError, match=r"'loader': expected a state, the checkpoint holds a json"
    ):
        checkpoint.load_checkpoint(tmp_path, {"loader": _Nested(0)})
    with pytest.raises(TypeError, match=r"'bad': get_state\(\) returned a bytes"):
        checkpoint.save_checkpoint(tmp_path, {"bad": _Position(b"{}")})


def test_export_weights_is_js_nn_s_and_the_old_module_path_still_imports(tmp_path):
    checkpoint.save_checkpoint(tmp_path / "c", {"model": _linear(0), "epoch": 0})
    assert nn.export_weights(tmp_path / "c", tmp_path / "w.safetensors") == 0
    model = _linear(1)
    nn.load_weights(model, tmp_path / "w.safetensors")
    np.testing.assert_array_equal(model.state_dict()["weight"], _linear(0).state_dict()["weight"])
    from js.nn.checkpoint_format import CheckpointError, host_digest, read_checkpoint

    assert CheckpointError is nn.CheckpointError and read_checkpoint is nn.read_checkpoint
    assert host_digest(np.zeros(0, np.float32)) == "0" * 16


@pytest.mark.process
@pytest.mark.slow
def test_saving_and_loading_a_checkpoint_imports_neither_js_train_nor_js_optim(tmp_path):
    linear = "nn.Linear(2, 2, rngs=js.Rngs(params={}))"
    code = (
        "import sys, js, js.nn as nn\n"
        "from js.nn.checkpoint import save_checkpoint\n"
        "assert not any(m.startswith('orbax') for m in sys.modules)\n"
        f"save_checkpoint({str(tmp_path)!r}, {{'model': {linear.format(0)}}})\n"
        f"nn.load_weights({linear.format(1)}, {str(tmp_path)!r})\n"
        "print(sorted(m for m in sys.modules if m.startswith(('js.training', 'js.optim'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_save_and_load_argument_errors(tmp_path):
    model = _linear(0)
    with pytest.raises(ValueError, match=r"save_checkpoint: step must be an int >= 0, got -1"):
        checkpoint.save_checkpoint(tmp_path, {"model": model}, step=-1)
    with pytest.raises(
        TypeError,
        match=r"save_checkpoint: step must be an int >= 0, got 1\.5 "
        r"\(a float\)\. Fix: pass an integer, e\.g\. step=1",
    ):
        checkpoint.save_checkpoint(tmp_path, {"model": model}, step=1.5)
    assert not list(tmp_path.iterdir())  # refused before the directory was touched
    with pytest.raises(
        TypeError,
        match=r"'loader' is a object: neither stateful .* Fix: save an object with "
        r"state_dict/load_state_dict or get_state/set_state, or a JSON value; for a data "
        r"pipeline .* js\.training\.save_checkpoint/load_checkpoint with the Trainer",
    ):
        checkpoint.save_checkpoint(tmp_path, {"model": model, "loader": object()})
    assert not list(tmp_path.iterdir())
    with pytest.raises(FileNotFoundError, match=r"load_checkpoint: no checkpoint directory at"):
        checkpoint.load_checkpoint(tmp_path / "none", {"model": model})
    checkpoint.save_checkpoint(tmp_path, {"model": model, "epoch": 1})
    with pytest.raises(
        ValueError,
        match=r"load_checkpoint\('.*', step 0\) does not fit the "
        r"objects; nothing was loaded\.\n  objects not in the checkpoint: "
        r"\['net'\]",
    ):
        checkpoint.load_checkpoint(tmp_path, {"net": _linear(1)})


def _edit_meta(step_dir, edit) -> None:
    import json

    path = step_dir / "meta" / "metadata"
    meta = json.loads(path.read_text())
    edit(meta["items"]["model"])
    path.write_text(json.dumps(meta))


def _readers(path):
    """The three readers of a step's arrays, each as a call."""
    return {
        "load_checkpoint": lambda: checkpoint.load_checkpoint(path, {"model": _linear(1)}),
        "load_weights": lambda: nn.load_weights(_linear(1), path),
        "read_checkpoint": lambda: checkpoint.read_checkpoint(path),
    }


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda item: item["entries"]["weight"].update(packed=["float64", 0]),
            r"entry 'weight' is packed in float64, a buffer the item lacks",
        ),
        (
            lambda item: item["packed"].update(float32=10**12),
            r"the packed float32 buffer claims 1000000000000 numbers, its entries hold 8",
        ),
        (
            lambda item: item["entries"]["bias"].update(packed=["float32", 7]),
            r"entry 'bias' lies outside the packed float32 buffer",
        ),
    ],
)
def test_metadata_that_misplaces_packed_arrays_is_a_checkpoint_error(tmp_path, edit, problem):
    """Each used to load into "operands could not be broadcast", KeyError: 'float64', or
    "MemoryError: Unable to allocate 3.64 TiB"; checkpoint_info saw no problem."""
    checkpoint.save_checkpoint(tmp_path, {"model": _linear(0), "epoch": 1})
    _edit_meta(tmp_path / "0", edit)
    (info,) = checkpoint.checkpoint_info(tmp_path)
    assert info["problem"] is not None and "meta/metadata" in info["problem"]
    assert problem.replace("\\", "") in info["problem"]
    for name, read in _readers(tmp_path).items():
        with pytest.raises(checkpoint.CheckpointError, match=problem):
            read()
        assert name  # every reader refuses the step the same way


def test_a_step_whose_item_directory_is_gone_is_reported_and_refused(tmp_path):
    import shutil

    checkpoint.save_checkpoint(tmp_path, {"model": _linear(0), "epoch": 1})
    shutil.rmtree(tmp_path / "0" / "state_model")
    (info,) = checkpoint.checkpoint_info(tmp_path)
    assert "item 'state_model' (the arrays of 'model')" in info["problem"]
    assert "is missing" in info["problem"]
    for read in _readers(tmp_path).values():
        with pytest.raises(checkpoint.CheckpointError, match=r"item 'state_model'"):
            read()


DAMAGED_READS = """
import glob, os, sys
import js, js.nn as nn
from js.nn import checkpoint
path = sys.argv[1]
checkpoint.save_checkpoint(path, {"model": nn.Linear(300, 300, rngs=js.Rngs(params=0))})
for name in glob.glob(path + "/0/state_model/**", recursive=True):
    if os.path.isfile(name) and os.path.getsize(name) > 1000:
        open(name, "wb").close()  # the arrays' data files emptied
def fresh():
    return nn.Linear(300, 300, rngs=js.Rngs(params=1))
refused = 0
for _ in range(4):
    for read in (
        lambda: checkpoint.load_checkpoint(path, {"model": fresh()}),
        lambda: checkpoint.read_checkpoint(path),
        lambda: nn.load_weights(fresh(), path),
    ):
        try:
            read()
        except checkpoint.CheckpointError:
            refused += 1
import gc, time
gc.collect()
time.sleep(0.5)  # tensorstore's late callbacks
print("refused", refused)
"""


@pytest.mark.process
@pytest.mark.slow
def test_damaged_arrays_are_refused_with_nothing_on_stderr(tmp_path):
    """Each refusal was right, but orbax's abandoned reads printed "Event loop is closed",
    "Exception ignored in <coroutine>" and "Future exception was never retrieved" tracebacks
    to stderr afterwards, a varying number per run."""
    done = subprocess.run(
        [sys.executable, "-c", DAMAGED_READS, str(tmp_path / "ckpt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.strip() == "refused 12", done.stdout + done.stderr
    for noise in ("Traceback", "Event loop", "never retrieved", "Exception ignored"):
        assert noise not in done.stderr, done.stderr


FULL_DISK = """
import resource, signal, sys
import js, js.nn as nn
from js.nn import checkpoint
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
path = sys.argv[1]
checkpoint.save_checkpoint(path, {"model": nn.Linear(10, 10, rngs=js.Rngs(params=0))})
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    checkpoint.save_checkpoint(path, {"model": nn.Linear(1000, 1000, rngs=js.Rngs(params=0))})
except OSError as error:
    print(type(error).__name__, error)
print("steps", [info["step"] for info in checkpoint.checkpoint_info(path)])
"""


@pytest.mark.process
@pytest.mark.slow
def test_a_full_disk_is_an_os_error_naming_the_directory(tmp_path):
    """It raised orbax's "ValueError: OUT_OF_RANGE: Error writing ... OCDBT" without the
    directory, and orbax's writer threads printed 11 tracebacks of it."""
    path = tmp_path / "ckpt"
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(path)], capture_output=True, text=True, timeout=300
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"OSError save_checkpoint: step 1 could not be written in {path} ")
    assert "Fix: free space on that disk" in lines[0]
    assert lines[1] == "steps [0]"  # the earlier step is intact, no step 1
    assert "Traceback" not in done.stderr and "ERROR:absl" not in done.stderr, done.stderr
