"""js._checks: the argument checks every js distribution shares."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AxisType

from js import _checks
from js._checks import (
    MeshAxisError,
    check_bool,
    check_int,
    check_mesh,
    check_number,
    check_pair,
    check_probability,
    compare_state,
    flatten_state,
    sharding_of,
)


@pytest.mark.parametrize("value", [3, np.int8(3), np.int64(3), np.uint16(3)])
def test_check_int_accepts_python_and_numpy_integers(value):
    got = check_int("Owner", "n", value)
    assert got == 3 and type(got) is int


@pytest.mark.parametrize(
    "value, kind",
    [
        (True, "bool"),
        (np.bool_(True), "bool"),
        (3.0, "float"),
        (np.float32(3), "float32"),
        ("3", "str"),
        (None, "NoneType"),
    ],
)
def test_check_int_refuses_bools_and_non_integers_with_a_type_error(value, kind):
    with pytest.raises(
        TypeError, match=rf"Owner: n must be an int >= 1, got .* \(a {kind}\)\. Fix: .* n=1$"
    ):
        check_int("Owner", "n", value)


def test_check_int_bounds():
    with pytest.raises(ValueError, match=r"^Owner: n must be an int >= 2, got 1$"):
        check_int("Owner", "n", 1, 2)
    with pytest.raises(ValueError, match=r"^Owner: n must be an int >= 0, got np.int32\(-1\)$"):
        check_int("Owner", "n", np.int32(-1), 0)
    assert check_int("Owner", "n", -5, None) == -5  # no bound
    with pytest.raises(TypeError, match=r"^Owner: n must be an int, got 1.5 \(a float\)"):
        check_int("Owner", "n", 1.5, None)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), np.bool_(False)])
def test_check_bool_accepts_python_and_numpy_bools(value):
    got = check_bool("Owner", "flag", value)
    assert got == bool(value) and type(got) is bool


@pytest.mark.parametrize("value", [1, 0, np.int8(1), "yes", None, 1.0])
def test_check_bool_refuses_numbers_and_others(value):
    with pytest.raises(
        TypeError,
        match=r"^Owner: flag must be True or False, got .* \(a \w+\)\. Fix: pass flag=True or "
        r"flag=False$",
    ):
        check_bool("Owner", "flag", value)


@pytest.mark.parametrize(
    "value", [0, 1, 0.5, np.float32(0.1), np.float16(0.5), np.float64(1.0), np.int64(0)]
)
def test_check_probability_accepts_real_numbers_in_the_unit_interval(value):
    got = check_probability("Owner", "p", value)
    assert got == float(value) and type(got) is float


@pytest.mark.parametrize("value", [True, np.bool_(False), "0.1", None, [0.1]])
def test_check_probability_refuses_bools_and_non_numbers(value):
    with pytest.raises(
        TypeError, match=r"^Owner: p must be a float in \[0, 1\], got .*\. Fix: .* p=0.1$"
    ):
        check_probability("Owner", "p", value)


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), np.float32(2.0)])
def test_check_probability_refuses_values_outside_the_unit_interval(value):
    with pytest.raises(ValueError, match=r"^Owner: p must be in \[0, 1\], got "):
        check_probability("Owner", "p", value)


@pytest.mark.parametrize(
    ("bounds", "value", "kind", "message"),
    [
        ({"low": 0}, "x", TypeError, "Owner: x must be a number >= 0, got 'x' (a str). Fix: "),
        ({"low": 0}, True, TypeError, "Owner: x must be a number >= 0, got True (a bool)"),
        ({"low": 0}, -1, ValueError, "Owner: x must be a number >= 0, got -1"),
        ({"low": 0}, float("nan"), ValueError, "Owner: x must be a number >= 0, got nan"),
        ({"low": 0, "high": 1, "open_high": True}, 1.0, ValueError, r"in [0, 1), got 1.0"),
        ({"low": 0, "high": 1, "open_low": True}, 0, ValueError, r"in (0, 1], got 0"),
        ({"high": 0}, 0.5, ValueError, "Owner: x must be a number <= 0, got 0.5"),
        ({"high": 1, "open_high": True}, 1, ValueError, "Owner: x must be a number < 1, got 1"),
        ({}, None, TypeError, "Owner: x must be a number, got None (a NoneType)"),
    ],
)
def test_check_number(bounds, value, kind, message):
    with pytest.raises(kind) as caught:
        check_number("Owner", "x", value, **bounds)
    assert message in str(caught.value)


def test_check_number_returns_a_float_and_an_empty_owner_leaves_the_prefix_out():
    got = check_number("Owner", "x", np.float32(0.5), 0, 1)
    assert got == 0.5 and type(got) is float
    with pytest.raises(ValueError, match=r"^eps must be a number >= 0, got -1$"):
        check_number("", "eps", -1, 0)
    with pytest.raises(TypeError, match=r"^flag must be True or False"):
        check_bool("", "flag", 1)


def test_check_pair():
    assert check_pair("Adam", "betas", [0.9, np.float64(0.999)], 0, 1) == (0.9, 0.999)
    with pytest.raises(TypeError, match=r"^Adam: betas must be a pair of numbers in \[0, 1\), "):
        check_pair("Adam", "betas", "ab", 0, 1, open_high=True)
    with pytest.raises(TypeError, match=r"got \(0.9,\) \(a tuple\)\. Fix: pass two numbers"):
        check_pair("Adam", "betas", (0.9,), 0, 1, open_high=True)
    with pytest.raises(ValueError, match=r"^Adam: betas\[1\] must be a number in \[0, 1\), got 1$"):
        check_pair("Adam", "betas", (0.9, 1), 0, 1, open_high=True)


def _mesh(kind=AxisType.Auto):
    return jax.make_mesh((1,), ("data",), axis_types=(kind,))


def test_check_mesh():
    mesh = _mesh()
    assert check_mesh("Owner", mesh) is mesh
    assert check_mesh("Owner", mesh, "data") is mesh
    with pytest.raises(TypeError, match=r"^Owner: mesh must be a jax.sharding.Mesh, got tuple"):
        check_mesh("Owner", (8,))
    with pytest.raises(NotImplementedError, match=r"^Owner: mesh axes \['data'\] are not AxisType"):
        check_mesh("Owner", _mesh(AxisType.Explicit))
    with pytest.raises(KeyError) as caught:
        check_mesh("Owner", mesh, "model", name="batch_axis")
    assert isinstance(caught.value, MeshAxisError)
    # KeyError's own str() would print repr(message): quotes and escaped characters
    assert str(caught.value) == (
        "Owner: batch_axis 'model' is not an axis of the mesh; its axes are ['data']. "
        "Fix: name one of them, or build the mesh with it."
    )


def test_sharding_of():
    x = jnp.ones(3)
    assert sharding_of(x) == x.sharding
    assert sharding_of(np.ones(3)) is None and sharding_of(1.0) is None
    seen = []
    jax.jit(lambda a: seen.append(sharding_of(a)) or a)(x)
    assert seen == [None]  # a tracer has no placement of its own


def test_compare_state():
    current = {"a": np.zeros((2, 3), np.float32), "b": np.zeros(1, np.int32)}
    given = {"a": np.zeros((3, 2), np.float32), "c": np.zeros(1)}
    missing, unexpected, mismatched = compare_state(current, given)
    assert missing == ["b"] and unexpected == ["c"]
    assert mismatched == ["'a': expected [2, 3] float32, got [3, 2] float32"]
    assert compare_state(current, dict(current)) == ([], [], [])


def test_flatten_state():
    a, b = np.zeros(2), np.ones(3)
    assert flatten_state({"layers": {0: {"w": a}}, "b": b}) == {"layers.0.w": a, "b": b}
    state = nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    flat = flatten_state(state)
    assert sorted(flat) == ["bias", "kernel"] and flat["kernel"].shape == (2, 3)
    with pytest.raises(TypeError, match=r"expected an nnx.State or a dict, got list"):
        flatten_state([a])


def test_the_module_documents_every_function():
    for name in (
        "check_int",
        "check_bool",
        "check_probability",
        "check_number",
        "check_pair",
        "check_mesh",
        "sharding_of",
        "compare_state",
        "flatten_state",
    ):
        assert f":func:`{name}`" in _checks.__doc__ and getattr(_checks, name).__doc__
