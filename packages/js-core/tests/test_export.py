"""js.export: the eval-mode forward as a jax.export.Exported that runs without js."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from core_models import MLP, Counter, Linear, Noise

import js

X = np.random.default_rng(0).standard_normal((4, 10)).astype(np.float32)


class Masked(js.Module):
    """Two inputs, only the first batched: ``x [B, 3]`` and ``mask [3]``."""

    def __init__(self):
        super().__init__()
        self.fc = Linear(3, 3, rngs=js.Rngs(params=0))
        self.counter = Counter()

    def forward(self, x, mask):
        return self.counter(self.fc(x)) * mask


def test_baked_weights_and_a_symbolic_batch():
    model = MLP(rngs=js.Rngs(params=0))  # train mode, but nothing in it depends on the mode
    exported = js.export(model, X)
    assert str(exported.in_avals[0].shape) == "(batch, 10)"
    np.testing.assert_allclose(exported.call(X), model(X), rtol=1e-6, atol=1e-6)
    other = np.ones((9, 10), np.float32)
    np.testing.assert_allclose(exported.call(other), model(other), rtol=1e-6, atol=1e-6)
    static = js.export(model, X, dynamic_batch=False)
    assert static.in_avals[0].shape == (4, 10)


@pytest.mark.process
@pytest.mark.slow
def test_serialized_bytes_run_without_js(tmp_path):
    model = MLP(rngs=js.Rngs(params=1))
    (tmp_path / "mlp.jax").write_bytes(js.export(model, X).serialize())
    np.save(tmp_path / "x.npy", X[:3])
    script = textwrap.dedent(
        """
        import sys
        sys.modules["js"] = None  # any import of js now fails
        import jax, numpy as np
        exported = jax.export.deserialize(bytearray(open("mlp.jax", "rb").read()))
        np.save("y.npy", np.asarray(exported.call(np.load("x.npy"))))
        """
    )
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, check=True, timeout=120)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), model(X[:3]), rtol=1e-6, atol=1e-6)


def test_weights_as_an_argument_take_a_state_dict():
    model, other = MLP(rngs=js.Rngs(params=0)), MLP(rngs=js.Rngs(params=5))
    exported = js.export(model, X, weights="argument")
    assert len(exported.in_avals) == len(model.state_dict()) + 1  # one input per entry, and x
    np.testing.assert_allclose(exported.call(other.state_dict(), X), other(X), atol=1e-6)
    np.testing.assert_allclose(exported.call(model.state_dict(), X), model(X), atol=1e-6)


def test_only_arguments_sharing_the_batch_size_are_batched_and_the_module_is_untouched():
    model = Masked()
    mask = np.array([1.0, 0.0, 1.0], np.float32)
    x = np.ones((2, 3), np.float32)
    exported = js.export(model, x, mask)
    assert [str(a.shape) for a in exported.in_avals] == ["(batch, 3)", "(3,)"]
    assert int(model.counter.calls.value) == 0  # tracing ran on a copy
    np.testing.assert_allclose(exported.call(np.ones((5, 3), np.float32), mask)[:2], model(x, mask))
    square = np.ones((3, 3), np.float32)  # batch size = mask size: name the batched position
    assert [str(a.shape) for a in js.export(model, square, mask, dynamic_batch=(0,)).in_avals] == [
        "(batch, 3)",
        "(3,)",
    ]


def test_train_mode_with_a_mode_dependent_forward_is_refused():
    model = Noise()
    with pytest.raises(
        ValueError,
        match=r"(?s)exports the eval-mode forward, but Noise is in "
        r"train mode \(modules \['Noise'\]\) and its forward depends on the mode.*"
        r"raises.*Fix: call model\.eval\(\) before js\.export",
    ):
        js.export(model, X)
    np.testing.assert_array_equal(js.export(model.eval(), X).call(X), X)


def test_bad_arguments_are_clear_errors():
    model = MLP(rngs=js.Rngs(params=0))
    with pytest.raises(TypeError, match=r"example argument 1 is a float, not an array"):
        js.export(model, X, 0.5)
    with pytest.raises(TypeError, match=r"example argument 0 is a list, not an array"):
        js.export(model, [[1.0] * 10])
    with pytest.raises(TypeError, match=r"js\.export expects a js\.Module, got function"):
        js.export(lambda x: x, X)
    with pytest.raises(ValueError, match=r"weights must be one of \('baked', 'argument'\), got"):
        js.export(model, X, weights="file")
    with pytest.raises(
        ValueError,
        match=r"dynamic_batch needs a leading dimension, but "
        r"arguments \[0\] have none",
    ):
        js.export(model, jnp.float32(1.0))
    spec = jax.ShapeDtypeStruct((2, 10), jnp.float32)  # shapes alone are enough
    assert str(js.export(model, spec).in_avals[0].shape) == "(batch, 10)"


@pytest.mark.parametrize(
    ("dynamic_batch", "error", "message"),
    [
        ("yes", TypeError, r"dynamic_batch must be True, False or a sequence .* got 'yes'"),
        (1, TypeError, r"dynamic_batch must be True, False or a sequence .* got 1\. Fix"),
        ((0.5,), TypeError, r"sequence of argument positions, got \(0\.5,\)"),
        ((-1,), ValueError, r"positions \[-1\] are not among the 1 example arguments"),
        ((0, 3), ValueError, r"positions \[3\] are not among the 1 example arguments"),
    ],
)
def test_dynamic_batch_that_is_not_positions_is_refused(dynamic_batch, error, message):
    """A string, an int or a negative position used to fail deep inside (or export a static
    shape for -1): each is refused up front, naming the value and the forms accepted."""
    with pytest.raises(error, match=message):
        js.export(MLP(rngs=js.Rngs(params=0)).eval(), X, dynamic_batch=dynamic_batch)


def test_platforms_as_a_string_is_refused():
    """``platforms='cpu'`` used to export for ('c', 'p', 'u')."""
    model = MLP(rngs=js.Rngs(params=0)).eval()
    with pytest.raises(TypeError, match=r"got the string 'cpu'\. Fix: platforms=\('cpu',\)"):
        js.export(model, X, platforms="cpu")
    with pytest.raises(TypeError, match=r"names such as 'cpu'.*got \[3\]"):
        js.export(model, X, platforms=("cpu", 3))
    exported = js.export(model, X, platforms=["cpu"])
    assert exported.platforms == ("cpu",)
    spec = jax.ShapeDtypeStruct((2, 10), jnp.float32)
    assert str(js.export(model, spec).in_avals[0].shape) == "(batch, 10)"
