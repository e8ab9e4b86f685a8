import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from core_models import MLP, SGD, Counter, Linear, Noise, mse
from flax import nnx

import js


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.normal(size=(8, 10)), jnp.float32), jnp.zeros((8, 4))


def test_jit_updates_arguments_in_place_and_compiles_once(data):
    model = MLP(rngs=js.Rngs(params=0))
    reference = MLP(rngs=js.Rngs(params=0))
    opt, ref_opt = SGD(model.parameters(), 0.1), SGD(reference.parameters(), 0.1)
    traces = []

    @js.jit
    def step(model, opt, x, y):
        traces.append(1)
        loss, grads = js.value_and_grad(mse)(model, x, y)
        opt.step(grads)
        return loss

    for _ in range(3):
        loss = step(model, opt, *data)
        ref_loss, grads = js.value_and_grad(mse)(reference, *data)
        ref_opt.step(grads)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    assert len(traces) == 1
    for (_, a), (_, b) in zip(model.named_parameters(), reference.named_parameters(), strict=False):
        np.testing.assert_allclose(a.value, b.value, rtol=1e-5, atol=1e-7)
    assert all(binding.tracked for binding in step._bindings.values())


def test_mode_change_between_calls_retraces():
    model = Noise()
    rngs = js.Rngs(dropout=0)
    run = js.jit(lambda model, x, rngs: model(x, rngs=rngs))
    x = jnp.zeros(3)
    assert float(jnp.abs(run(model, x, rngs)).sum()) > 0
    assert int(rngs.dropout.count[...]) == 1  # the stream advanced in place
    model.eval()
    np.testing.assert_array_equal(run(model, x, rngs), x)
    model.train()
    assert float(jnp.abs(run(model, x, rngs)).sum()) > 0


def test_first_train_call_does_not_recompile(data):
    model = MLP(rngs=js.Rngs(params=0))
    traces = []

    def forward(model, x):
        traces.append(1)
        return model(x)

    run = js.jit(forward)
    run(model, data[0])
    model.train()
    run(model, data[0])
    assert len(traces) == 1
    assert "training" in vars(js.ModuleList())


@pytest.mark.parametrize("placed", ["batch", "one weight"])
def test_state_beside_a_committed_input_compiles_once(data, placed):
    # jax.jit returns committed arrays when any input is committed, and being committed is part
    # of its program key: uncommitted state would come back committed and compile a second time.
    model = MLP(rngs=js.Rngs(params=0))
    opt = SGD(model.parameters(), 0.1)
    device = jax.devices()[0]
    x, y = data
    if placed == "batch":
        x, y = jax.device_put((x, y), device)
    else:
        model.layers[0].bias.value = jax.device_put(model.layers[0].bias.value, device)
    compiled = []

    def on_event(event, seconds, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(event)

    @js.jit
    def step(model, opt, x, y):
        loss, grads = js.value_and_grad(mse)(model, x, y)
        opt.step(grads)
        return loss

    jax.monitoring.register_event_duration_secs_listener(on_event)
    try:
        losses = [float(step(model, opt, x, y)) for _ in range(3)]
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)
    assert len(compiled) == 1
    assert losses[2] < losses[0]
    assert all(p.value.committed for p in model.parameters())


def test_structural_edit_between_calls_takes_effect(data):
    rngs = js.Rngs(params=0)
    model = MLP(rngs=rngs)
    forward = js.jit(lambda model, x: model(x))
    forward(model, data[0])
    model.layers[2] = Linear(16, 2, rngs=rngs)
    assert forward(model, data[0]).shape == (8, 2)
    model.layers[2].weight = js.Parameter(jnp.zeros((2, 16)))  # same structure, new variable
    np.testing.assert_array_equal(forward(model, data[0]), jnp.zeros((8, 2)))


def test_buffers_update_and_donated_arrays_are_invalidated():
    counter = Counter()
    old = counter.calls.value
    run = js.jit(lambda model, x: model(x))
    run(counter, 1.0)
    run(counter, 1.0)
    assert int(counter.calls.value) == 2
    assert old.is_deleted()  # donated: copy with np.array(...) to keep an old value
    keep = js.jit(lambda model, x: model(x), donate=False)
    before = counter.calls.value
    keep(counter, 1.0)
    assert not before.is_deleted() and int(counter.calls.value) == 3


def test_a_read_only_call_donates_nothing_and_returns_no_state(data):
    model = MLP(rngs=js.Rngs(params=0))
    weight = model.layers[0].weight.value
    traces = []

    @js.jit
    def forward(model, x):
        traces.append(1)
        return model(x)

    first = forward(model, data[0])
    np.testing.assert_array_equal(forward(model, data[0]), first)
    assert not weight.is_deleted()  # read, not donated: the old array is the current one
    assert model.layers[0].weight.value is weight
    assert len(traces) == 1  # the read-only program reuses the first trace


def test_a_call_that_writes_for_one_input_shape_only_is_exact():
    counter = Counter()

    @js.jit
    def count_long(model, x):
        if x.shape[0] > 2:  # another branch per shape: this one writes
            model(1.0)
        return x.sum()

    for n in (1, 3, 1, 3):
        count_long(counter, jnp.ones(n))
    assert int(counter.calls.value) == 2
    assert len(count_long._programs) == 1  # one layout; its program writes from the switch on


def test_static_arguments_select_a_program():
    @functools.partial(js.jit, static_argnames="power")
    def f(x, *, power):
        return x**power

    assert float(f(jnp.float32(3), power=2)) == 9.0
    assert float(f(jnp.float32(3), power=3)) == 27.0
    g = js.jit(lambda x, n: x * n, static_argnums=1)
    assert float(g(jnp.float32(2), 5)) == 10.0


model_in_globals = Linear(2, 2, rngs=js.Rngs(params=0))


def test_closed_over_module_is_refused():
    model = Linear(2, 2, rngs=js.Rngs(params=0))

    @js.jit
    def from_closure(x):
        return model(x)

    with pytest.raises(TypeError, match="reads 'model' \\(a Linear\\) from its closure"):
        from_closure(jnp.ones(2))


def test_module_read_from_globals_is_refused():
    @js.jit
    def from_globals(x):
        return model_in_globals(x)

    with pytest.raises(TypeError, match="'model_in_globals' .* from its module globals .* pass"):
        from_globals(jnp.ones(2))


def test_deliberate_constants_are_allowed():
    teacher = Linear(2, 2, rngs=js.Rngs(params=0))
    run = js.jit(lambda x: teacher(x), constants=("teacher",))
    np.testing.assert_allclose(run(jnp.ones(2)), teacher(jnp.ones(2)), rtol=1e-6)


def test_bound_methods_and_partials_of_modules_are_refused():
    model = Linear(2, 2, rngs=js.Rngs(params=0))
    with pytest.raises(TypeError, match="method bound to a Linear"):
        js.jit(model.forward)(jnp.ones(2))
    with pytest.raises(TypeError, match="functools.partial that binds a Linear"):
        js.jit(functools.partial(mse, model))(jnp.ones(2), jnp.ones(2))


def test_structure_change_inside_compiled_code_is_refused():
    model = Linear(2, 2, rngs=js.Rngs(params=0))

    def switch(model, x):
        model.eval()
        return model(x)

    with pytest.raises(RuntimeError, match="changed the structure or mode"):
        js.jit(switch)(model, jnp.ones(2))
    assert model.training


def test_returning_a_module_is_refused():
    model = Linear(2, 2, rngs=js.Rngs(params=0))
    with pytest.raises(TypeError, match="returned a module, optimizer or variable"):
        js.jit(lambda model: model)(model)


def test_raw_array_state_is_refused():
    model = js.Module()
    model.scale = jnp.ones(2)
    with pytest.raises(TypeError, match="state at 'scale' is a raw ArrayImpl"):
        js.jit(lambda model: 0.0)(model)


def test_foreign_nnx_objects_take_the_checked_path():
    class Plain(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones(2))

    holder = js.Module()
    holder.inner = Plain()
    run = js.jit(lambda m: m.inner.w[...].sum())
    assert float(run(holder)) == 2.0
    holder.inner.w = nnx.Param(jnp.ones(3))  # not a js object: no epoch bump
    assert float(run(holder)) == 3.0


def test_value_and_grad_differentiates_parameters_only(data):
    model = MLP(rngs=js.Rngs(params=0))
    model.counter = Counter()
    rngs = js.Rngs(dropout=0)

    def loss_fn(model, x, y, rngs):
        noise = jax.random.normal(rngs.next("dropout"), ())
        model.counter(x)
        return mse(model, x, y) + 0 * noise, noise

    (loss, noise), grads = js.value_and_grad(loss_fn, has_aux=True)(model, *data, rngs)
    from js._checks import flatten_state

    assert sorted(flatten_state(grads)) == sorted(p for p, _ in model.named_parameters())
    assert int(rngs.dropout.count[...]) == 1 and int(model.counter.calls.value) == 1
    eps = 1e-3
    w = model.layers[0].bias
    base = float(mse(model, *data))
    w.value = w.value.at[0].add(eps)
    numeric = (float(mse(model, *data)) - base) / eps
    np.testing.assert_allclose(flatten_state(grads)["layers.0.bias"][0], numeric, rtol=2e-2)
    only = js.grad(mse)(model, *data)
    assert sorted(flatten_state(only)) == sorted(flatten_state(grads))


def test_grad_requires_a_module_first():
    with pytest.raises(TypeError, match="first argument, which must be a Module; got ArrayImpl"):
        js.value_and_grad(lambda x: x.sum())(jnp.ones(2))
    with pytest.raises(TypeError, match="js.grad\\(fn\\)"):
        js.grad(lambda x: x.sum())(jnp.ones(2))


def test_gradient_mismatch_names_the_first_differing_path(data):
    model = MLP(rngs=js.Rngs(params=0))
    other = MLP(sizes=(10, 16, 4), rngs=js.Rngs(params=0))
    opt = SGD(model.parameters(), 0.1)
    grads = js.grad(mse)(other, *data)
    with pytest.raises(ValueError, match="'layers.1.weight' expected shape \\[16, 16\\], got"):
        opt.step(grads)
    with pytest.raises(ValueError, match="no gradient for 'layers.0.weight'"):
        opt.params.match({})
    full = {path: p.value for path, p in model.named_parameters()}
    with pytest.raises(ValueError, match="unexpected gradient 'extra'"):
        opt.params.match({**full, "extra": jnp.ones(1)})
    with pytest.raises(TypeError, match="expected gradients as the state"):
        opt.params.match([1])


def test_plain_jax_at_the_split_merge_boundary(data):
    model = MLP(rngs=js.Rngs(params=0))
    graphdef, state = js.split(model)

    @jax.jit
    def forward(state, x):
        return js.apply(graphdef, state, x)

    out, new_state = forward(state, data[0])
    np.testing.assert_allclose(out, model(data[0]), rtol=1e-5, atol=1e-7)
    js.update(model, new_state)
    assert isinstance(js.merge(graphdef, state), MLP)
    assert js.stop_gradient is jax.lax.stop_gradient


def test_stateful_keyword_arguments_and_static_integers():
    model = Noise()
    rngs = js.Rngs(dropout=0)
    calls = []

    @functools.partial(js.jit, static_argnums=2)
    def run(model, x, repeat, *, rngs):
        calls.append(repeat)
        for _ in range(repeat):
            x = model(x, rngs=rngs)
        return x

    run(model, jnp.zeros(2), 3, rngs=rngs)
    run(model, jnp.zeros(2), 3, rngs=rngs)
    assert int(rngs.dropout.count[...]) == 6 and calls == [3]
    run(model, jnp.zeros(2), 1, rngs=rngs)
    assert int(rngs.dropout.count[...]) == 7 and calls == [3, 1]
