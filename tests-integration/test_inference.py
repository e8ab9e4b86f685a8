"""From training to inference, end to end: the digits CNN trained with the full js, then run
in an environment with only js-core + js-nn + js-models (weight file, checkpoint directory, a
file PyTorch wrote, a Hugging Face folder) and in one with only JAX (the exported artifact).

Three venvs, each built once for the module: ``full`` (the js metapackage and scikit-learn, for
the digits data), ``inference`` (js-core + js-nn + js-models) and ``jax`` (jax, jaxlib, numpy and
the flatbuffers that jax.export's deserializer needs; no js, no flax). torch and transformers are
used only in this test process, to write the PyTorch and Hugging Face fixtures.
"""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
from support import Venv, run

# Every test installs wheels into fresh virtual environments and runs Python there.
pytestmark = [pytest.mark.integration, pytest.mark.process]

# The model, shared by the full and the inference venvs (js-core + js-nn only).
MODEL = '''
import jax
import js
import js.nn as nn


class DigitsCNN(js.Module):
    """docs/examples/digits.py's model: [B, 1, 8, 8] -> logits [B, 10]."""

    def __init__(self, *, rngs):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, rngs=rngs)
        self.bn2 = nn.BatchNorm2d(64)
        self.pool = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(64 * 4 * 4, 10, rngs=rngs)

    def forward(self, x, *, rngs=None):
        x = jax.nn.relu(self.bn1(self.conv1(x)))
        x = self.pool(jax.nn.relu(self.bn2(self.conv2(x))))
        return self.fc(self.drop(self.flatten(x), rngs=rngs))


logits_of = js.jit(lambda model, x: model(x))
'''

TRAIN = """
import sys
sys.path.insert(0, {work!r})
import numpy as np
import js, js.nn as nn, js.optim
from sklearn.datasets import load_digits
from js.training import ArrayLoader, ModelCheckpoint, Task, Trainer, load_checkpoint
from digits_model import DigitsCNN, logits_of

digits = load_digits()
x = (digits.images / 16.0).astype(np.float32)[:, None]  # [1797, 1, 8, 8]
y = digits.target.astype(np.int32)
order = np.random.default_rng(0).permutation(len(y))
test, val, train = np.split(order, [360, 540])

def task_of(model):
    return Task(model, js.optim.Adam(model.parameters(), lr=2e-3), rngs=js.Rngs(dropout=1))

model = DigitsCNN(rngs=js.Rngs(params=0))
task = task_of(model)
checkpoint = ModelCheckpoint({work!r} + "/ckpt", monitor="val/loss", mode="min")
Trainer(2, callbacks=[checkpoint], verbose=False).fit(
    task, ArrayLoader(x[train], y[train], batch_size=64, shuffle=True, seed=0),
    ArrayLoader(x[val], y[val], batch_size=256))
model.eval()
logits = np.asarray(logits_of(model, x[test]))
print("accuracy", float(np.mean(logits.argmax(1) == y[test])))
np.save({work!r} + "/x_test.npy", x[test])
np.save({work!r} + "/logits_last.npy", logits)
nn.save_weights(model, {work!r} + "/digits.safetensors", metadata={{"epochs": "2"}})
with open({work!r} + "/digits.jax", "wb") as file:
    file.write(js.export(model, x[test][:2]).serialize())

best = DigitsCNN(rngs=js.Rngs(params=1))
load_checkpoint(checkpoint.path, {{**task_of(best).checkpoint_objects(), "epoch": 0}})
np.save({work!r} + "/logits_best.npy", np.asarray(logits_of(best.eval(), x[test])))
print("best step", checkpoint.best_step, "last step", checkpoint.last_step)
"""

INFERENCE_PROLOGUE = """
import sys
sys.path.insert(0, {work!r})
from importlib.metadata import PackageNotFoundError, version
import numpy as np
import js, js.nn as nn
from digits_model import DigitsCNN, logits_of

# js-losses comes with js-nn (js.nn.functional's losses are js.losses'), nothing else of js
for absent in ("js-train", "js-optim", "torch"):
    try:
        version(absent)
    except PackageNotFoundError:
        continue
    raise AssertionError(absent + " is installed in the inference venv")
x = np.load({work!r} + "/x_test.npy")
"""


def _venv(tmp_path_factory, name: str, constraints, packages: list[str]) -> Venv:
    venv = Venv(tmp_path_factory.mktemp(name) / "venv")
    run([sys.executable, "-m", "uv", "venv", "--quiet", "--python", sys.executable, venv.path])
    run(
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "install",
            "--python",
            venv.python,
            "-c",
            constraints,
            *packages,
        ]
    )
    return venv


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    folder = tmp_path_factory.mktemp("handoff")
    (folder / "digits_model.py").write_text(MODEL)
    return folder


@pytest.fixture(scope="module")
def trained(work, wheelhouse, tmp_path_factory, third_party_constraints):
    """The full js trains 2 epochs and writes weights, checkpoints, the artifact, logits."""
    from support import THIRD_PARTY

    full = _venv(tmp_path_factory, "full", third_party_constraints, [*THIRD_PARTY, "scikit-learn"])
    full.install("js", find_links=[wheelhouse])
    output = full.python_code(TRAIN.format(work=str(work))).stdout
    print(output)  # the accuracy and the best step, shown with pytest -s
    accuracy = float(output.split("accuracy ")[1].split()[0])
    assert accuracy > 0.8, output
    return work


@pytest.fixture(scope="module")
def inference(wheelhouse, tmp_path_factory, third_party_constraints):
    from support import THIRD_PARTY

    venv = _venv(tmp_path_factory, "inference", third_party_constraints, THIRD_PARTY)
    venv.install("js-core", "js-nn", "js-models", find_links=[wheelhouse])
    return venv


@pytest.mark.slow
def test_a_weight_file_loads_bit_identically_with_only_core_and_nn(trained, inference):
    script = INFERENCE_PROLOGUE + textwrap.dedent(
        """
        assert not any(m.startswith("orbax") for m in sys.modules), "import js.nn imported orbax"
        model = DigitsCNN(rngs=js.Rngs(params=7)).eval()
        nn.load_weights(model, {work!r} + "/digits.safetensors")
        loaded = sorted(m for m in sys.modules if m.startswith(("orbax", "js.training")))
        assert not loaded, loaded
        np.testing.assert_array_equal(logits_of(model, x), np.load({work!r} + "/logits_last.npy"))
        print("a: bit-identical", nn.weights_info({work!r} + "/digits.safetensors").metadata)
        """
    )
    output = inference.python_code(script.format(work=str(trained))).stdout
    assert "a: bit-identical {'epochs': '2'}" in output, output


@pytest.mark.slow
def test_b_the_model_checkpoint_directory_loads_directly(trained, inference):
    script = INFERENCE_PROLOGUE + textwrap.dedent(
        """
        assert not any(m.startswith("orbax") for m in sys.modules), "import js.nn imported orbax"
        model = DigitsCNN(rngs=js.Rngs(params=8)).eval()
        nn.load_weights(model, {work!r} + "/ckpt")  # js.training/2, verified by js-nn alone
        np.testing.assert_array_equal(logits_of(model, x), np.load({work!r} + "/logits_best.npy"))
        step, arrays = nn.read_checkpoint({work!r} + "/ckpt", which="last")
        assert sorted(arrays) == sorted(model.state_dict()), sorted(arrays)
        print("b: bit-identical to the best checkpoint; last step", step)
        """
    )
    output = inference.python_code(script.format(work=str(trained))).stdout
    assert "b: bit-identical to the best checkpoint" in output, output


@pytest.mark.slow
def test_c_an_environment_with_only_jax_runs_the_exported_model(
    trained, tmp_path_factory, third_party_constraints
):
    venv = _venv(
        tmp_path_factory,
        "jax-only",
        third_party_constraints,
        ["jax", "jaxlib", "numpy", "flatbuffers"],
    )
    script = textwrap.dedent(
        """
        import importlib.util
        import jax, numpy as np
        for absent in ("js", "flax", "optax", "orbax"):
            assert importlib.util.find_spec(absent) is None, absent + " is installed"
        with open({work!r} + "/digits.jax", "rb") as file:
            exported = jax.export.deserialize(bytearray(file.read()))
        logits = np.asarray(exported.call(np.load({work!r} + "/x_test.npy")))
        expected = np.load({work!r} + "/logits_last.npy")
        assert (logits.argmax(1) == expected.argmax(1)).all()
        print("c: max diff", float(np.max(np.abs(logits - expected))))
        """
    )
    output = venv.python_code(script.format(work=str(trained))).stdout
    print(output)
    assert float(output.split("c: max diff ")[1]) < 1e-5, output


@pytest.mark.slow
def test_d_a_file_pytorch_wrote_loads_with_the_torch_layout(work, inference):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    tnn = torch.nn
    torch.manual_seed(0)
    t_model = tnn.Sequential(
        tnn.Conv2d(1, 4, 3, padding=1),
        tnn.BatchNorm2d(4),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.ConvTranspose2d(4, 2, 2, stride=2),
        tnn.Flatten(),
        tnn.Linear(2 * 8 * 8, 10),
    )
    t_model.train()(torch.randn(8, 1, 8, 8))  # move BatchNorm's running statistics
    x = np.random.default_rng(0).standard_normal((5, 1, 8, 8)).astype(np.float32)
    with torch.no_grad():
        np.save(work / "torch_out.npy", t_model.eval()(torch.from_numpy(x)).numpy())
    np.save(work / "torch_x.npy", x)
    st_torch.save_file(t_model.state_dict(), work / "torch_cnn.safetensors")
    script = INFERENCE_PROLOGUE + textwrap.dedent(
        """
        model = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1, rngs=js.Rngs(params=0)), nn.BatchNorm2d(4), nn.ReLU(),
            nn.MaxPool2d(2), nn.ConvTranspose2d(4, 2, 2, stride=2, rngs=js.Rngs(params=1)),
            nn.Flatten(), nn.Linear(2 * 8 * 8, 10, rngs=js.Rngs(params=2))).eval()
        nn.load_weights(model, {work!r} + "/torch_cnn.safetensors", layout="torch")
        out = np.asarray(model(np.load({work!r} + "/torch_x.npy")))
        print("d: max diff", float(np.max(np.abs(out - np.load({work!r} + "/torch_out.npy")))))
        """
    )
    output = inference.python_code(script.format(work=str(work))).stdout
    print(output)
    assert float(output.split("d: max diff ")[1]) < 1e-5, output


@pytest.mark.slow
def test_e_a_hugging_face_folder_runs_without_orbax_torch_optim_or_train(work, inference):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=97, n_positions=64)
    reference = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # biases and norms away from their initial zeros and ones
        for name, param in reference.named_parameters():
            if name.endswith(("bias", "ln_1.weight", "ln_2.weight", "ln_f.weight")):
                param.add_(0.1 * torch.randn_like(param))
    reference.save_pretrained(work / "gpt2")
    ids = np.random.default_rng(1).integers(0, 97, (2, 9))
    mask = np.ones((2, 9), np.int64)
    mask[1, :3] = 0  # the second row is left-padded
    with torch.no_grad():
        out = reference(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    np.save(work / "gpt2_ids.npy", ids)
    np.save(work / "gpt2_mask.npy", mask)
    np.save(work / "gpt2_logits.npy", out.logits.numpy())
    with torch.inference_mode():  # greedy continuation of the padded batch, 8 new tokens
        generated = reference.generate(
            torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            max_new_tokens=8,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    np.save(work / "gpt2_generated.npy", generated.numpy())
    script = INFERENCE_PROLOGUE + textwrap.dedent(
        """
        import js.models
        model = js.models.from_pretrained({work!r} + "/gpt2")
        ids, mask = np.load({work!r} + "/gpt2_ids.npy"), np.load({work!r} + "/gpt2_mask.npy")
        logits = np.asarray(model(ids, attention_mask=mask))
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=8, eos_token_id=[])
        same = np.array_equal(tokens, np.load({work!r} + "/gpt2_generated.npy"))
        print("e: generate equals transformers:", same)
        loaded = sorted(
            m for m in sys.modules
            if m.split(".")[0] in ("orbax", "torch") or m.startswith(("js.optim", "js.training"))
        )
        assert not loaded, loaded
        expected = np.load({work!r} + "/gpt2_logits.npy")
        valid = mask.astype(bool)
        diff = np.abs(logits - expected)[valid].max() / np.abs(expected).max()
        print("e:", type(model).__name__, "relative diff", float(diff))
        """
    )
    output = inference.python_code(script.format(work=str(work))).stdout
    print(output)
    assert "e: GPT2LMHeadModel" in output, output
    assert "e: generate equals transformers: True" in output, output
    assert float(output.split("relative diff ")[1]) < 1e-4, output
