"""js.jit's refusals and edge cases: state must be passed, top level, hashable and not aliased."""

import functools

import jax.numpy as jnp
import pytest
from core_models import MLP, Counter, Linear, mse

import js

model_for_helper = Linear(2, 2, rngs=js.Rngs(params=0))


def predict_with_global_model(x):
    return model_for_helper(x)


def test_state_read_through_a_called_helper_is_refused():
    with pytest.raises(TypeError, match="through predict_with_global_model, which it calls"):
        js.jit(lambda x: predict_with_global_model(x))(jnp.ones(2))


def test_state_in_default_arguments_is_refused():
    model = Linear(2, 2, rngs=js.Rngs(params=0))
    with pytest.raises(TypeError, match="'default #0' \\(a Linear\\) from its default arguments"):
        js.jit(lambda x, m=model: m(x))(jnp.ones(2))
    with pytest.raises(TypeError, match="'m' \\(a Linear\\) from its default arguments"):
        js.jit(lambda x, *, m=model: m(x))(jnp.ones(2))


def test_state_nested_in_a_container_argument_is_refused():
    counter = Counter()
    with pytest.raises(TypeError, match=r"inside a container argument \(at \[0\]\[0\]\[0\]"):
        js.jit(lambda models, x: models[0](x))([counter], 1.0)
    with pytest.raises(TypeError, match=r"at \[1\]\['m'\]"):
        js.jit(lambda x, m: m["m"](x))(1.0, m={"m": counter})
    assert int(counter.calls.value) == 0


def test_unhashable_static_attribute_is_named():
    model = MLP(rngs=js.Rngs(params=0))
    model.sizes = [10, 16]
    with pytest.raises(TypeError, match="static attribute 'sizes' \\(a list\\) is not hashable"):
        js.jit(lambda m, x: m(x))(model, jnp.ones((1, 10)))
    model.sizes = (10, 16)
    assert js.jit(lambda m, x: m(x))(model, jnp.ones((1, 10))).shape == (1, 4)


def test_unhashable_static_argument_is_reported():
    with pytest.raises(TypeError, match="a static argument is not hashable"):
        js.jit(lambda x, n: x, static_argnums=1)(jnp.ones(1), [1])


def test_static_argnames_apply_to_positional_calls_and_back():
    def repeat(x, n):
        for _ in range(n):
            x = x + 1
        return x

    by_name = js.jit(repeat, static_argnames="n")
    assert float(by_name(jnp.float32(0), 3)) == 3.0
    assert float(by_name(jnp.float32(0), n=2)) == 2.0
    by_position = js.jit(repeat, static_argnums=1)
    assert float(by_position(jnp.float32(0), n=4)) == 4.0


def _scale_and_call(m, w):
    m.weight.value = m.weight.value * 2  # a write: the state is donated
    return m(w[0])


def test_an_argument_aliasing_donated_state_is_explained():
    model = Linear(2, 2, rngs=js.Rngs(params=0))
    run = js.jit(_scale_and_call)
    with pytest.raises(ValueError, match="also the state of a module or optimizer"):
        run(model, model.weight.value)
    keep = js.jit(_scale_and_call, donate=False)
    assert keep(model, model.weight.value).shape == (2,)
    read = js.jit(lambda m, w: m(w[0]))  # reads only: nothing is donated
    assert read(model, model.weight.value).shape == (2,)


def test_raw_array_state_is_refused_by_every_transform():
    model = js.Module()
    model.scale = jnp.ones(2)
    with pytest.raises(TypeError, match="js.value_and_grad: argument state at 'scale'"):
        js.value_and_grad(lambda m: 0.0)(model)
    with pytest.raises(TypeError, match="js.scan_steps: argument state at 'scale'"):
        js.scan_steps(lambda m, x: x)(model, jnp.ones((2, 1)))


def test_has_aux_needs_a_pair():
    model = Linear(2, 2, rngs=js.Rngs(params=0))
    with pytest.raises(TypeError, match="must return a pair \\(loss, aux\\), got \\w*Tracer"):
        js.value_and_grad(lambda m, x: m(x).sum(), has_aux=True)(model, jnp.ones(2))


def test_tied_weights_accept_gradients_keyed_by_js_paths():
    rngs = js.Rngs(params=0)
    model = js.Module()
    model.enc = Linear(2, 2, rngs=rngs)
    model.dec = model.enc
    selection = model.parameters()
    assert selection.paths == ("enc.weight", "enc.bias")
    from_nnx = js.grad(lambda m, x: m.dec(m.enc(x)).sum())(model, jnp.ones(2))
    from_js = {path: jnp.ones_like(p.value) for path, p in model.named_parameters()}
    assert len(selection.match(from_nnx)) == len(selection.match(from_js)) == 2


def test_nested_lists_and_dicts_of_modules_are_discovered():
    rngs = js.Rngs(params=0)
    model = js.Module()
    model.grid = [[Linear(1, 1, rngs=rngs)], {"a": Linear(1, 1, rngs=rngs)}]
    model.table = {"rows": [Linear(1, 1, rngs=rngs)]}
    assert [p for p, _ in model.named_parameters()] == [
        "grid.0.0.weight",
        "grid.0.0.bias",
        "grid.1.a.weight",
        "grid.1.a.bias",
        "table.rows.0.weight",
        "table.rows.0.bias",
    ]
    assert float(js.jit(lambda m, x: m.table["rows"][0](x).sum())(model, jnp.ones(1))) == float(
        model.table["rows"][0](jnp.ones(1)).sum()
    )


def test_module_list_slices_and_concatenation_stay_module_lists():
    rngs = js.Rngs(params=0)
    layers = js.ModuleList([Linear(1, 1, rngs=rngs) for _ in range(3)])
    head = layers[:2]
    assert isinstance(head, js.ModuleList) and len(head) == 2 and head[0] is layers[0]
    both = head + [Linear(1, 1, rngs=rngs)]
    assert isinstance(both, js.ModuleList) and len(both) == 3
    assert len(head.extend([Linear(1, 1, rngs=rngs)])) == 3


def test_module_dict_get_pop_update_and_dotted_keys():
    rngs = js.Rngs(params=0)
    heads = js.ModuleDict()
    heads.update({"a": Linear(1, 1, rngs=rngs)})
    assert heads.get("a") is heads["a"] and heads.get("b") is None
    assert isinstance(heads.pop("a"), Linear) and len(heads) == 0
    with pytest.raises(KeyError, match="must be a non-empty name without '.'"):
        heads["x.y"] = Linear(1, 1, rngs=rngs)


def test_rngs_attribute_access_lists_streams_and_names_must_be_strings():
    rngs = js.Rngs(params=0)
    with pytest.raises(AttributeError, match=r"no stream 'dropout'; its streams are \['params'\]"):
        rngs.dropout  # noqa: B018
    with pytest.raises(TypeError, match="stream names are strings, got int 0"):
        rngs.next(0)


def test_jit_through_a_partial_of_plain_values_is_fine():
    scale = js.jit(functools.partial(mse, y=jnp.zeros((1, 4))))
    model = MLP(rngs=js.Rngs(params=0))
    assert scale(model, jnp.ones((1, 10))).shape == ()


def test_a_program_donates_only_the_state_it_writes():
    model, counter = Linear(2, 2, rngs=js.Rngs(params=0)), Counter()
    weight, calls = model.weight.value, counter.calls.value
    traces = []

    @js.jit
    def count_and_predict(model, counter, x):
        traces.append(x.shape)  # runs only while tracing
        if x.shape[0] == 3:  # another signature also writes the weights
            model.weight.value = model.weight.value * 2
        return counter(model(x[:2]))

    expected = model(jnp.ones(2))
    assert jnp.array_equal(count_and_predict(model, counter, jnp.ones(2)), expected)
    assert calls.is_deleted() and not weight.is_deleted()  # the read weights stay valid
    assert model.weight.value is weight and int(counter.calls.value) == 1
    count_and_predict(model, counter, jnp.ones(2))
    assert int(counter.calls.value) == 2 and traces == [(2,)]
    lowered = count_and_predict.lower(model, counter, jnp.ones(2))
    assert "donated" in lowered.as_text() or "tf.aliasing_output" in lowered.as_text()
    count_and_predict(model, counter, jnp.ones(3))  # writes what the first trace only read
    assert jnp.array_equal(model.weight.value, weight * 2) and int(counter.calls.value) == 3
