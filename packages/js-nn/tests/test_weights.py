"""save_weights / load_weights / weights_info: safetensors files in the js layout, no torch."""

from __future__ import annotations

import errno
import os
import pickle
import subprocess
import sys
import tempfile
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
import js.nn as nn


class Net(js.Module):
    def __init__(self, rngs):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, rngs=rngs)
        self.bn = nn.BatchNorm2d(4)
        self.up = nn.ConvTranspose2d(4, 2, 2, stride=2, rngs=rngs)
        self.head = nn.Linear(2 * 8 * 8, 3, rngs=rngs)

    def forward(self, x):
        h = self.up(jax.nn.relu(self.bn(self.conv(x))))  # [B, 2, 8, 8]
        return self.head(h.reshape(h.shape[0], -1))  # [B, 3]


X = jax.random.normal(jax.random.key(0), (2, 1, 4, 4))


def _trained(seed=0) -> Net:
    model = Net(js.Rngs(params=seed))
    model(X)  # one train-mode call moves BatchNorm's running statistics off their init
    return model.eval()


def _same_state(a: js.Module, b: js.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)


def test_round_trip_is_bit_identical_and_keeps_buffers(tmp_path):
    model = _trained()
    path = tmp_path / "net.safetensors"
    nn.save_weights(Net(js.Rngs(params=3)), path)
    nn.save_weights(model, path)  # replaces the file, through a renamed temporary one
    assert [p.name for p in tmp_path.iterdir()] == ["net.safetensors"]
    fresh = Net(js.Rngs(params=1)).eval()
    assert nn.load_weights(fresh, path) == js.IncompatibleKeys([], [])
    _same_state(model, fresh)
    assert not np.allclose(fresh.bn.running_mean.value, 0.0)  # buffers travelled too
    np.testing.assert_array_equal(fresh(X), model(X))


def test_metadata_records_layout_and_version_and_keeps_the_users(tmp_path):
    path = tmp_path / "net.safetensors"
    nn.save_weights(_trained(), path, metadata={"epoch": "2", "data": "digits"})
    info = nn.weights_info(path)
    assert info.layout == "js" and info.js_version == js.__version__
    assert info.metadata == {"epoch": "2", "data": "digits"}
    assert info.tensors["conv.weight"] == ((4, 1, 3, 3), "F32")
    assert info.tensors["bn.running_var"] == ((4,), "F32")


def test_a_state_dict_saves_like_its_module(tmp_path):
    model = _trained()
    nn.save_weights(model.state_dict(), tmp_path / "sd.safetensors")
    fresh = Net(js.Rngs(params=2))
    nn.load_weights(fresh, tmp_path / "sd.safetensors")
    _same_state(model, fresh)


def test_prefix_is_added_on_save_and_stripped_on_load(tmp_path):
    model, path = _trained(), tmp_path / "nested.safetensors"
    nn.save_weights(model, path, prefix="model.")
    assert all(name.startswith("model.") for name in nn.weights_info(path).tensors)
    fresh = Net(js.Rngs(params=1))
    nn.load_weights(fresh, path, prefix="model.")
    _same_state(model, fresh)
    with pytest.raises(KeyError, match=r"no tensor .* starts with prefix 'encoder\.'.*'model\.'"):
        nn.load_weights(fresh, path, prefix="encoder.")


def test_names_outside_the_prefix_are_ignored_and_reported(tmp_path):
    model = _trained()
    sd = {f"model.{k}": v for k, v in model.state_dict().items()}
    sd["lm_head.weight"] = np.zeros((2, 2), np.float32)
    nn.save_weights(sd, tmp_path / "hf.safetensors")
    fresh = Net(js.Rngs(params=1))
    keys = nn.load_weights(fresh, tmp_path / "hf.safetensors", prefix="model.")  # strict
    assert keys == js.IncompatibleKeys([], [])
    assert keys.ignored_keys == ["lm_head.weight"]
    _same_state(model, fresh)
    sd["head.bias"] = np.zeros(3, np.float32)  # both 'model.head.bias' and 'head.bias'
    nn.save_weights(sd, tmp_path / "both.safetensors")
    with pytest.raises(ValueError, match=r"holds both 'model\.head\.bias' and 'head\.bias'"):
        nn.load_weights(fresh, tmp_path / "both.safetensors", prefix="model.")


def test_strict_load_reports_everything_and_loads_nothing(tmp_path):
    sd = _trained().state_dict()
    sd.pop("head.bias")
    sd["head.extra"] = np.zeros(1, np.float32)
    sd["conv.weight"] = np.zeros((4, 1, 5, 5), np.float32)
    sd["bn.running_mean"] = sd["bn.running_mean"].astype(np.float16)
    nn.save_weights(sd, tmp_path / "bad.safetensors")
    model = Net(js.Rngs(params=1))
    with pytest.raises(
        ValueError,
        match=(
            r"(?s)nothing was loaded.*missing keys: 'head\.bias'.*unexpected keys: 'head\.extra'.*"
            r"'conv\.weight': expected \[4, 1, 3, 3\] float32, got \[4, 1, 5, 5\] float32.*"
            r"'bn\.running_mean': expected \[4\] float32, got \[4\] float16"
        ),
    ):
        nn.load_weights(model, tmp_path / "bad.safetensors")
    _same_state(model, Net(js.Rngs(params=1)))


def test_strict_false_returns_missing_and_unexpected(tmp_path):
    model = _trained()
    sd = model.state_dict()
    sd.pop("head.bias")
    sd["extra.weight"] = np.ones(2, np.float32)
    nn.save_weights(sd, tmp_path / "partial.safetensors")
    fresh = Net(js.Rngs(params=1))
    keys = nn.load_weights(fresh, tmp_path / "partial.safetensors", strict=False)
    assert keys == js.IncompatibleKeys(["head.bias"], ["extra.weight"])
    np.testing.assert_array_equal(fresh.head.weight.value, model.head.weight.value)


def test_files_that_are_not_safetensors_are_refused_and_never_executed(tmp_path):
    good = tmp_path / "good.safetensors"
    nn.save_weights(_trained(), good)
    data = good.read_bytes()
    (tmp_path / "truncated").write_bytes(data[: len(data) - 7])
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "header").write_bytes(data[:8] + b"{not json" + data[17:])

    class Boom:
        def __reduce__(self):  # unpickling this would call exit()
            return (exit, (3,))

    (tmp_path / "pickle").write_bytes(pickle.dumps(Boom()))
    with zipfile.ZipFile(tmp_path / "archive", "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({}))
    model = Net(js.Rngs(params=1))
    for name in ("truncated", "empty", "header"):
        with pytest.raises(ValueError, match=r"not a readable safetensors file \(damaged or trunc"):
            nn.load_weights(model, tmp_path / name)
    with pytest.raises(ValueError, match=r"is a Python pickle, not a safetensors file; js never "):
        nn.load_weights(model, tmp_path / "pickle")
    with pytest.raises(ValueError, match=r"is a zip archive \(torch\.save's format\)"):
        nn.weights_info(tmp_path / "archive")
    with pytest.raises(FileNotFoundError, match=r"no weight file at .*missing\.safetensors"):
        nn.load_weights(model, tmp_path / "missing.safetensors")
    _same_state(model, Net(js.Rngs(params=1)))


def test_bad_arguments_are_clear_errors(tmp_path):
    model, path = _trained(), tmp_path / "w.safetensors"
    with pytest.raises(ValueError, match=r"layout must be one of \('js', 'torch'\), got 'tf'"):
        nn.save_weights(model, path, layout="tf")
    with pytest.raises(ValueError, match=r"prefix must be '' or a dotted name ending in '\.'"):
        nn.save_weights(model, path, prefix="model")
    with pytest.raises(
        TypeError,
        match=r"metadata must be a dict\[str, str\], got entries "
        r"\[\"'epoch': int\"\]",
    ):
        nn.save_weights(model, path, metadata={"epoch": 2})
    with pytest.raises(ValueError, match=r"metadata keys \['js\.layout'\] are written by js"):
        nn.save_weights(model, path, metadata={"js.layout": "x"})
    with pytest.raises(TypeError, match=r"expects a js\.Module \(or, with layout='js', a state"):
        nn.save_weights(model.state_dict(), path, layout="torch")
    with pytest.raises(TypeError, match=r"load_weights expects a js\.Module to fill, got dict"):
        nn.load_weights({}, path)
    assert not path.exists()  # nothing was written by the refused calls
    nn.save_weights(model, path)
    with pytest.raises(ValueError, match=r"written with layout='js', but layout='torch' was"):
        nn.load_weights(model, path, layout="torch")
    with pytest.raises(ValueError, match=r"step= and name= select inside a checkpoint directory"):
        nn.load_weights(model, path, step=3)
    with pytest.raises(NotImplementedError, match=r"is a checkpoint directory, which holds js"):
        nn.load_weights(model, tmp_path, layout="torch")


def test_zero_dimensional_and_integer_buffers_round_trip(tmp_path):
    class Counter(js.Module):
        def __init__(self):
            super().__init__()
            self.count = js.Buffer(jnp.asarray(7, jnp.int32))
            self.scale = js.Parameter(jnp.asarray(0.5))

    nn.save_weights(Counter(), tmp_path / "c.safetensors")
    back = Counter()
    back.count.value = jnp.asarray(0, jnp.int32)
    nn.load_weights(back, tmp_path / "c.safetensors")
    assert int(back.count.value) == 7 and nn.weights_info(tmp_path / "c.safetensors").tensors[
        "count"
    ] == ((), "I32")


@pytest.mark.process
@pytest.mark.slow
def test_import_js_nn_imports_no_orbax():
    """The checkpoint reader imports orbax only when it reads (a fresh interpreter)."""
    code = "import sys, js.nn; print(sorted(m for m in sys.modules if m.startswith('orbax')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_unwritable_targets_are_named_before_anything_is_written(tmp_path):
    """Each used to fail naming a ``.tmpXXXX`` or ``<path>.partial`` file, or to leave one
    behind (``path=None`` wrote ``None.partial`` into the working directory)."""
    model = _trained()
    with pytest.raises(FileNotFoundError, match=r"cannot write .*w\.safetensors: its directory "):
        nn.save_weights(model, tmp_path / "missing" / "w.safetensors")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"file is not a directory"):
        nn.save_weights(model, tmp_path / "file" / "w.safetensors")
    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError, match=r"dir is a directory\. Fix: name a file inside"):
        nn.save_weights(model, tmp_path / "dir")
    with pytest.raises(TypeError, match=r"path must be a file path .* got NoneType"):
        nn.save_weights(model, None)  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["dir", "file"]


def test_a_directory_no_one_can_write_names_the_target_not_the_temporary_file(
    tmp_path, monkeypatch
):
    """It named the hidden ``/dir/.name.safetensors.qofe4un1.partial``. The operating
    system's refusal of the temporary file (EACCES) is raised in its place, so the test runs
    anywhere: root writes into a read-only directory, and sysfs, which refuses even root, is
    mounted read-only (EROFS) in a container."""

    def refused(*, prefix, suffix, **where):  # tempfile.mkstemp, refused as the OS refuses
        name = os.path.join(where["dir"], f"{prefix}qofe4un1{suffix}")
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    target = tmp_path / "w.safetensors"
    with pytest.raises(PermissionError) as caught:
        nn.save_weights({"w": np.zeros(2, np.float32)}, target)
    assert str(caught.value) == (
        f"[Errno 13] save_weights: could not write {target}: Permission denied. Fix: choose a "
        f"directory you can write, or make {tmp_path} writable"
    )
    assert caught.value.errno == 13 and caught.value.__cause__ is None


def test_a_name_too_long_names_the_target_and_a_long_one_still_saves(tmp_path):
    """The temporary file's name adds 18 characters: a 240-character name failed, naming the
    temporary file; a name over the limit is refused naming the target."""
    long = tmp_path / ("w" * 228 + ".safetensors")
    nn.save_weights({"w": np.ones(2, np.float32)}, long)
    assert nn.weights_info(long).tensors == {"w": ((2,), "F32")}
    too_long = tmp_path / ("w" * 300 + ".safetensors")
    with pytest.raises(OSError, match=r"save_weights: could not write (.*)") as caught:
        nn.save_weights({"w": np.ones(2, np.float32)}, too_long)
    assert str(caught.value) == (
        f"[Errno 36] save_weights: could not write {too_long}: File name too long. Fix: "
        "choose a shorter file name"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [long.name]  # nothing left behind


@pytest.mark.parametrize(
    ("value", "shown"),
    [(object(), "object"), ("text", "str"), ([[1.0], [1.0, 2.0]], "list")],
)
def test_a_state_dict_value_that_is_not_an_array_is_named(tmp_path, value, shown):
    state = {"ok": np.zeros(2, np.float32), "bad.entry": value}
    with pytest.raises(TypeError, match=rf"entry 'bad\.entry' is a {shown}, not an array"):
        nn.save_weights(state, tmp_path / "w.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_float8_arrays_round_trip(tmp_path):
    """float8 saved, but loading raised "module 'numpy' has no attribute 'float8_e4m3fn'"."""

    class Scaled(js.Module):
        def __init__(self, fill):
            super().__init__()
            self.scale = js.Buffer(jnp.full((3,), fill, jnp.float8_e4m3fn))
            self.w = js.Parameter(jnp.arange(4.0, dtype=jnp.float8_e5m2) * fill)
            self.b = js.Parameter(jnp.ones(2) * fill)

    path = tmp_path / "f8.safetensors"
    nn.save_weights(Scaled(1.5), path)
    assert nn.weights_info(path).tensors["scale"] == ((3,), "F8_E4M3")
    back = Scaled(0.0)
    nn.load_weights(back, path)
    _same_state(back, Scaled(1.5))
    assert back.scale.value.dtype == jnp.float8_e4m3fn


@pytest.mark.process
@pytest.mark.slow
def test_a_full_disk_is_an_os_error_naming_the_target(tmp_path):
    """Under a file size limit safetensors raised "File too large (os error 27)" without a path;
    nothing is left behind and the previous file is intact."""
    path = tmp_path / "w.safetensors"
    nn.save_weights({"small": np.zeros(4, np.float32)}, path)
    before = path.read_bytes()
    script = f"""
import resource, signal, numpy as np, js.nn as nn
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    nn.save_weights({{"big": np.zeros(1 << 16, np.float32)}}, {str(path)!r})
except OSError as error:
    print(type(error).__name__, error)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.stdout.startswith(f"OSError save_weights: could not write {path}: "), out
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]


CONCURRENT = """
import sys, numpy as np, js.nn as nn
path, value = sys.argv[1], float(sys.argv[2])
for _ in range(200):
    nn.save_weights({"w": np.full(256, value, np.float32)}, path)
print("ok")
"""


@pytest.mark.process
@pytest.mark.slow
def test_two_processes_saving_to_one_path_both_succeed(tmp_path):
    """Both wrote ``<path>.partial``: some saves raised FileNotFoundError in the process whose
    data was on disk while the other was told it succeeded."""
    path = tmp_path / "w.safetensors"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT, str(path), str(value)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for value in (1.0, 2.0)
    ]
    results = [child.communicate(timeout=300) for child in children]
    assert [out.strip() for out, _ in results] == ["ok", "ok"], results
    from safetensors.numpy import load_file

    saved = load_file(str(path))["w"]  # one writer's whole file
    assert saved.tolist() in ([1.0] * 256, [2.0] * 256)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]
