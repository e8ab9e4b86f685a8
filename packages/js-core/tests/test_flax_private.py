"""The private flax names js uses (all in ``js/_flax.py``) exist and mean what js assumes: the
check to run before raising the ``flax<0.13`` pin."""

import jax.numpy as jnp
from core_models import MLP
from flax import nnx

import js
from js import _flax


def test_the_flax_private_names_js_relies_on_exist():
    parameter = js.Parameter(jnp.ones(2))
    assert _flax.get_raw(parameter) is parameter.get_raw_value()
    _flax.set_raw(parameter, jnp.zeros(2))
    assert parameter.get_raw_value().tolist() == [0.0, 0.0]
    model = MLP(rngs=js.Rngs(params=0))
    static = _flax.static_attributes(model)
    assert "layers" not in static and not any(map(_flax.is_flax_attribute, static))
    stream = js.Rngs(params=0).params
    assert isinstance(stream, nnx.RngStream) and stream.tag == "params"
    assert int(stream.count.get_raw_value()) == 0
