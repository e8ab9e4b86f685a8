"""Non-persistent buffers (PyTorch's ``register_buffer(..., persistent=False)``): module state
that js.jit threads and named_buffers lists, but that state_dict never holds."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import js


class Rope(js.Module):
    def __init__(self):
        super().__init__()
        self.weight = js.Parameter(jnp.ones(2))
        self.register_buffer("inv_freq", jnp.arange(2.0), persistent=False)
        self.register_buffer("count", jnp.zeros((), jnp.int32))
        self.cache = js.Buffer(jnp.zeros(2), persistent=False)

    def forward(self, x):
        self.count.value = self.count.value + 1
        self.cache.value = self.cache.value + x
        return x * self.weight.value + self.inv_freq.value


class Outer(js.Module):
    def __init__(self):
        super().__init__()
        self.inner = Rope()
        self.register_buffer("mask", jnp.ones((2, 2), bool), persistent=False)


def test_state_dict_leaves_out_non_persistent_buffers_at_every_depth():
    model = Outer()
    assert list(model.state_dict()) == ["inner.weight", "inner.count"]
    assert list(model.state_dict(as_numpy=False)) == ["inner.weight", "inner.count"]
    # named_buffers lists every buffer, as torch's does
    assert [name for name, _ in model.named_buffers()] == [
        "mask",
        "inner.inv_freq",
        "inner.count",
        "inner.cache",
    ]
    assert len(list(model.buffers())) == 4
    assert model.mask.persistent is False and model.inner.count.persistent is True


def test_buffer_and_register_buffer_take_persistent():
    assert js.Buffer(jnp.zeros(1)).persistent is True
    assert js.Buffer(jnp.zeros(1), persistent=False).persistent is False
    module = js.Module()
    module.register_buffer("a", np.ones(3, np.float32), persistent=False)
    module.register_buffer("b", jnp.ones(3), True)
    assert isinstance(module.a, js.Buffer) and module.a.persistent is False
    assert list(module.state_dict()) == ["b"]
    with pytest.raises(TypeError, match=r"persistent must be True or False, got str 'no'"):
        js.Buffer(jnp.zeros(1), persistent="no")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match=r"without '\.'"):
        module.register_buffer("a.b", jnp.zeros(1))


def test_load_state_dict_neither_expects_nor_accepts_a_non_persistent_buffer():
    model, other = Rope(), Rope()
    other.weight.value = jnp.full(2, 3.0)
    other.inv_freq.value = jnp.full(2, 7.0)
    assert model.load_state_dict(other.state_dict()) == js.IncompatibleKeys([], [])
    np.testing.assert_array_equal(model.weight.value, [3.0, 3.0])
    np.testing.assert_array_equal(model.inv_freq.value, [0.0, 1.0])  # kept as the model has it
    with_extra = {**other.state_dict(), "inv_freq": np.zeros(2, np.float32)}
    with pytest.raises(ValueError, match=r"unexpected keys: 'inv_freq'"):
        model.load_state_dict(with_extra)
    np.testing.assert_array_equal(model.inv_freq.value, [0.0, 1.0])  # nothing was loaded
    result = model.load_state_dict(with_extra, strict=False)
    assert result == js.IncompatibleKeys([], ["inv_freq"])
    np.testing.assert_array_equal(model.inv_freq.value, [0.0, 1.0])


def test_js_jit_threads_and_updates_non_persistent_buffers():
    model = Rope()
    step = js.jit(lambda m, x: m(x))
    out = step(model, jnp.ones(2))
    np.testing.assert_array_equal(out, [1.0, 2.0])
    step(model, jnp.ones(2))
    np.testing.assert_array_equal(model.cache.value, [2.0, 2.0])
    assert int(model.count.value) == 2
    assert model.cache.persistent is False  # the flag survives the compiled step


def test_persistence_survives_split_and_merge():
    copy = nnx.merge(*nnx.split(Outer()))
    assert copy.mask.persistent is False and copy.inner.inv_freq.persistent is False
    assert sorted(copy.state_dict()) == ["inner.count", "inner.weight"]
