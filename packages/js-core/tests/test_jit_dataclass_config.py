"""js.jit and a model that keeps a dataclass config as an attribute (nanoGPT's GPTConfig).

A static attribute selects the compiled program by hash and equality: a frozen (or
``unsafe_hash=True``) dataclass hashes by its fields; a plain one (``__hash__ = None``) is
refused with the decorator to use. A config that changes in place (``unsafe_hash=True``) is
compared with its value at binding on every call, so a change compiles anew.
"""

import dataclasses
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
import pytest

import js


@dataclass(frozen=True)
class FrozenConfig:
    block_size: int = 3
    bias: bool = True


@dataclass(unsafe_hash=True)
class MutableConfig:
    block_size: int = 3
    bias: bool = True


@dataclass
class PlainConfig:
    block_size: int = 3
    bias: bool = True


@dataclass(frozen=True)
class ListConfig:
    block_size: int = 3
    sizes: list = dataclasses.field(default_factory=lambda: [4, 4])


@dataclass(frozen=True)
class OuterConfig:  # frozen, but holds a config that can change in place
    inner: MutableConfig = dataclasses.field(default_factory=MutableConfig)


class Crop(js.Module):
    """Keeps the first ``config.block_size`` entries: the config decides the trace."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.weight = js.Parameter(jnp.arange(1.0, 5.0))

    def forward(self, x):
        n = self.config.block_size
        return x[:n] * self.weight.value[:n]


def _forward(model, x):
    return model(x)


@pytest.mark.parametrize("config", [FrozenConfig(), MutableConfig()])
def test_hashable_dataclass_config_compiles_once_per_value(config):
    traces = []

    @js.jit
    def run(model, x):
        traces.append(1)
        return model(x)

    model, x = Crop(config), jnp.ones(4)
    np.testing.assert_array_equal(run(model, x), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(run(model, x), [1.0, 2.0, 3.0])
    other = Crop(type(config)())  # an equal config, another object: the same program
    np.testing.assert_array_equal(run(other, x), [1.0, 2.0, 3.0])
    assert len(traces) == 1
    watched = [binding.watched for binding in run._bindings.values()]
    assert all(watched) if isinstance(config, MutableConfig) else not any(watched)


def test_a_config_changed_in_place_compiles_anew():
    model, x = Crop(MutableConfig()), jnp.ones(4)
    run = js.jit(_forward)
    np.testing.assert_array_equal(run(model, x), [1.0, 2.0, 3.0])
    model.config.block_size = 2  # nanoGPT's crop_block_size: no assignment on a js object
    np.testing.assert_array_equal(run(model, x), [1.0, 2.0])
    model.config.block_size = 3  # back: the first program again
    np.testing.assert_array_equal(run(model, x), [1.0, 2.0, 3.0])
    assert len(run._programs) == 2


def test_a_config_shared_by_two_modules_is_watched_once():
    class Pair(js.Module):
        def __init__(self, config):
            super().__init__()
            self.first, self.second = Crop(config), Crop(config)

        def forward(self, x):
            return self.first(x) + self.second(x)

    model, x = Pair(MutableConfig()), jnp.ones(4)
    run = js.jit(_forward)
    np.testing.assert_array_equal(run(model, x), [2.0, 4.0, 6.0])
    assert [len(binding.watched) for binding in run._bindings.values()] == [1]
    model.first.config.block_size = 1  # the second's too: the same object
    np.testing.assert_array_equal(run(model, x), [2.0])


def test_a_config_inside_a_frozen_one_is_watched_too():
    model, x = Crop(OuterConfig()), jnp.ones(4)
    run = js.jit(lambda m, x: m.weight.value[: m.config.inner.block_size] * x[0])
    np.testing.assert_array_equal(run(model, x), [1.0, 2.0, 3.0])
    model.config.inner.block_size = 1
    np.testing.assert_array_equal(run(model, x), [1.0])


def test_a_frozen_config_replaced_on_the_module_compiles_anew():
    model, x = Crop(FrozenConfig()), jnp.ones(4)
    run = js.jit(_forward)
    np.testing.assert_array_equal(run(model, x), [1.0, 2.0, 3.0])
    model.config = dataclasses.replace(model.config, block_size=2)  # an assignment: new epoch
    np.testing.assert_array_equal(run(model, x), [1.0, 2.0])


def test_a_plain_dataclass_config_is_refused_with_the_decorator_to_use():
    model = Crop(PlainConfig())
    with pytest.raises(
        TypeError,
        match=r"static attribute 'config' \(a PlainConfig\) is not hashable.*Fix: declare "
        r"PlainConfig with @dataclass\(frozen=True\) .*@dataclass\(unsafe_hash=True\) if the "
        r"model assigns to its fields",
    ):
        js.jit(_forward)(model, jnp.ones(4))


def test_a_list_in_a_frozen_config_is_named_by_its_field():
    class Holder(js.Module):
        def __init__(self):
            super().__init__()
            self.inner = Crop(ListConfig())

    with pytest.raises(
        TypeError,
        match=r"static attribute 'inner\.config\.sizes' \(a list\) is not hashable.*Fix: use a "
        r"tuple instead of a list \(or hold arrays in a js\.Buffer\)",
    ):
        js.jit(lambda m, x: m.inner(x))(Holder(), jnp.ones(4))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (PlainConfig(), r"'n' \(a PlainConfig\).*Fix: declare PlainConfig with @dataclass"),
        (ListConfig(), r"'n\.sizes' \(a list\).*Fix: use a tuple instead of a list, or make"),
        ({1: 2}, r"'n' \(a dict\).*Fix: use a tuple of pairs instead"),
        ({1}, r"'n' \(a set\).*Fix: use a frozenset instead"),
    ],
)
def test_an_unhashable_static_argument_is_named_with_its_fix(value, message):
    run = js.jit(lambda x, n: x, static_argnames="n")
    with pytest.raises(TypeError, match="a static argument is not hashable: " + message):
        run(jnp.ones(1), n=value)


def test_an_unhashable_static_argument_by_position():
    class Opaque:
        __hash__ = None

    run = js.jit(lambda x, n: x, static_argnums=1)
    with pytest.raises(TypeError, match=r"'#1' \(a Opaque\).*Fix: give Opaque a __hash__"):
        run(jnp.ones(1), Opaque())
