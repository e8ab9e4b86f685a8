"""Forward hooks, eagerly and inside js transforms, and the named scope of each module call."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from core_models import Linear

import js


class Net(js.Module):
    def __init__(self, *, rngs):
        super().__init__()
        self.fc1 = Linear(3, 4, rngs=rngs)
        self.fc2 = Linear(4, 2, rngs=rngs)

    def forward(self, x, *, scale=1.0):
        return self.fc2(jnp.tanh(self.fc1(x))) * scale


def loss(model, x):
    return jnp.sum(model(x) ** 2)


@pytest.fixture
def net():
    return Net(rngs=js.Rngs(params=0))


X = jnp.arange(6.0).reshape(2, 3) / 6


# -- eagerly, as PyTorch ------------------------------------------------------------------


def test_hooks_fire_in_registration_order_around_forward(net):
    calls = []
    net.register_forward_pre_hook(lambda m, args: calls.append("net pre"))
    net.register_forward_hook(lambda m, args, out: calls.append("net 1"))
    net.register_forward_hook(lambda m, args, out: calls.append("net 2"))
    net.register_forward_hook(lambda m, args, out: calls.append("net 0"), prepend=True)
    net.fc1.register_forward_hook(lambda m, args, out: calls.append("fc1"))
    net.fc1.register_forward_pre_hook(lambda m, args: calls.append("fc1 pre"))
    net(X)
    assert calls == ["net pre", "fc1 pre", "fc1", "net 0", "net 1", "net 2"]


def test_hooks_can_replace_arguments_and_output(net):
    expected = net.fc1(2 * X) + 1
    net.fc1.register_forward_pre_hook(lambda m, args: 2 * args[0])  # one value: wrapped
    net.fc1.register_forward_pre_hook(lambda m, args: (args[0],))
    net.fc1.register_forward_hook(lambda m, args, out: out + 1)
    seen = []
    net.fc1.register_forward_hook(lambda m, args, out: seen.append((m, args, out)))
    np.testing.assert_allclose(net.fc1(X), expected)
    module, args, out = seen[0]
    assert module is net.fc1
    np.testing.assert_allclose(args[0], 2 * X)
    np.testing.assert_allclose(out, expected)


def test_hooks_with_kwargs(net):
    seen = []
    net.register_forward_pre_hook(
        lambda m, args, kwargs: (args, {**kwargs, "scale": 2.0}), with_kwargs=True
    )
    net.register_forward_hook(lambda m, args, kwargs, out: seen.append(kwargs), with_kwargs=True)
    np.testing.assert_allclose(net(X, scale=1.0), 2 * Net(rngs=js.Rngs(params=0))(X))
    assert seen == [{"scale": 2.0}]


def test_a_with_kwargs_pre_hook_must_return_a_pair(net):
    net.register_forward_pre_hook(lambda m, args, kwargs: args, with_kwargs=True)
    with pytest.raises(TypeError, match=r"must return None or a pair \(args, kwargs\), got tuple"):
        net(X)


def test_a_hook_must_be_callable(net):
    with pytest.raises(TypeError, match="a hook must be callable, got int"):
        net.register_forward_hook(3)


def test_handles_remove_and_work_as_context_managers(net):
    calls = []
    first = net.register_forward_hook(lambda m, args, out: calls.append(1))
    with net.register_forward_hook(lambda m, args, out: calls.append(2)) as second:
        net(X)
    net(X)
    assert calls == [1, 2, 1]
    assert first.id != second.id
    first.remove()
    first.remove()  # a second remove does nothing
    net(X)
    assert calls == [1, 2, 1]
    assert net._forward_hooks == ()


def test_hooks_are_not_state_children_or_printed(net):
    before = (list(net.state_dict()), [p for p, _ in net.named_modules()], repr(net))
    net.fc1.register_forward_hook(lambda m, args, out: None)
    net.register_forward_pre_hook(lambda m, args: None)
    after = (list(net.state_dict()), [p for p, _ in net.named_modules()], repr(net))
    assert before == after
    assert len(list(net.parameters())) == 4


def test_copies_keep_hooks_and_load_state(net):
    calls = []
    net.fc1.register_forward_hook(lambda m, args, out: calls.append(m))
    twin = copy.deepcopy(net)
    twin.load_state_dict(net.state_dict())
    twin(X)
    copy.copy(net)(X)
    assert calls == [twin.fc1, net.fc1]


# -- inside js.jit: observed, called after the program on concrete values -----------------


def test_a_hook_records_an_intermediate_out_of_a_compiled_program(net):
    traces = []

    @js.jit
    def step(model, x):
        traces.append(1)
        return loss(model, x)

    step(net, X)  # the program without hooks
    recorded = {}
    handle = net.fc1.register_forward_hook(
        lambda m, args, out: recorded.update(module=m, out=out, x=args[0])
    )
    step(net, X)
    assert len(traces) == 2  # adding a hook compiles the program that includes it
    assert recorded["module"] is net.fc1
    assert isinstance(recorded["out"], jax.Array)
    assert not isinstance(recorded["out"], jax.core.Tracer)
    np.testing.assert_allclose(recorded["out"], net.fc1(X), rtol=1e-6)
    np.testing.assert_allclose(recorded["x"], X)

    step(net, 2 * X)  # a new input: the cached program, the hook called again
    assert len(traces) == 2
    np.testing.assert_allclose(recorded["out"], net.fc1(2 * X), rtol=1e-6)

    handle.remove()
    recorded.clear()
    np.testing.assert_allclose(step(net, X), loss(net, X), rtol=1e-6)
    assert len(traces) == 2  # removing it goes back to the first program
    assert recorded == {}


def test_recorded_hooks_find_their_module_among_several_objects_and_keywords(net):
    other = Net(rngs=js.Rngs(params=1))
    seen = []
    other.fc2.register_forward_hook(lambda m, args, out: seen.append(m))
    net.fc1.register_forward_hook(lambda m, args, out: seen.append(m))
    step = js.jit(lambda first, x, *, second: loss(first, x) + loss(second, x))
    step(net, X, second=other)
    step(other, X, second=net)  # another layout: the objects swap places
    assert seen == [net.fc1, other.fc2, other.fc2, net.fc1]


def test_observing_pre_hooks_and_kwargs_under_jit(net):
    seen = []
    net.fc2.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    net.register_forward_hook(lambda m, args, kwargs, out: seen.append(kwargs), with_kwargs=True)
    js.jit(lambda model, x: model(x, scale=3.0))(net, X)
    np.testing.assert_allclose(seen[0], jnp.tanh(net.fc1(X)), rtol=1e-6)
    assert float(seen[1]["scale"]) == 3.0


def test_a_hook_returning_a_value_under_jit_is_refused(net):
    net.fc1.register_forward_hook(lambda m, args, out: out * 0)
    with pytest.raises(NotImplementedError, match=r"js.jit: the hook .* on Linear returned a val"):
        js.jit(loss)(net, X)


def test_a_traced_hook_replaces_the_output_inside_the_program(net):
    traced_calls = []

    def zero(module, args, out):
        traced_calls.append(type(out))
        return jnp.zeros_like(out)

    net.fc2.register_forward_hook(zero, traced=True)
    step = js.jit(loss)
    assert float(step(net, X)) == 0.0
    assert float(step(net, 2 * X)) == 0.0
    assert len(traced_calls) == 1  # a traced hook runs while tracing only
    assert float(loss(net, X)) == 0.0  # and eagerly as any hook


def test_nested_js_jit_hands_records_to_the_outer_call(net):
    seen = []
    net.fc1.register_forward_hook(lambda m, args, out: seen.append((m, out)))
    inner = js.jit(loss)
    js.jit(lambda model, x: inner(model, x) + 1)(net, X)
    assert len(seen) == 1 and seen[0][0] is net.fc1
    assert not isinstance(seen[0][1], jax.core.Tracer)


# -- under js.value_and_grad, eagerly and inside js.jit -----------------------------------


def test_hooks_under_value_and_grad(net):
    expected_loss, expected_grads = js.value_and_grad(loss)(net, X)
    seen = []
    net.fc1.register_forward_hook(lambda m, args, out: seen.append((m, out)))
    value, grads = js.value_and_grad(loss)(net, X)
    np.testing.assert_allclose(value, expected_loss)
    jax.tree.map(np.testing.assert_allclose, grads, expected_grads)
    assert seen[0][0] is net.fc1 and not isinstance(seen[0][1], jax.core.Tracer)
    np.testing.assert_allclose(seen[0][1], net.fc1(X), rtol=1e-6)

    @js.jit
    def step(model, x):
        value, _ = js.value_and_grad(loss)(model, x)
        return value

    expected_loss, expected_out = loss(net, 2 * X), net.fc1(2 * X)
    seen.clear()
    np.testing.assert_allclose(step(net, 2 * X), expected_loss, rtol=1e-6)
    assert len(seen) == 1 and seen[0][0] is net.fc1  # called once, by the outer js.jit
    assert not isinstance(seen[0][1], jax.core.Tracer)
    np.testing.assert_allclose(seen[0][1], expected_out, rtol=1e-6)


def test_hooks_under_grad_with_aux_keep_the_aux(net):
    seen = []
    net.fc2.register_forward_hook(lambda m, args, out: seen.append(out))
    grads, aux = js.grad(lambda m, x: (loss(m, x), {"n": x.shape[0]}), has_aux=True)(net, X)
    assert aux == {"n": 2} and len(seen) == 1


# -- where observing is not built ---------------------------------------------------------


@pytest.mark.parametrize("compiled", [False, True])
def test_hooks_under_scan_steps_are_called_once_per_step(net, compiled):
    run = js.scan_steps(loss)
    run = js.jit(run) if compiled else run
    xs = jnp.stack([X, 2 * X, 3 * X])
    expected = [net.fc1(x) for x in xs]
    seen = []
    handle = net.fc1.register_forward_hook(lambda m, args, out: seen.append((m, out)))
    run(net, xs)
    assert [m for m, _ in seen] == [net.fc1] * 3
    for (_, out), want in zip(seen, expected, strict=True):
        assert not isinstance(out, jax.core.Tracer)
        np.testing.assert_allclose(out, want, rtol=1e-6)
    handle.remove()
    net.fc1.register_forward_hook(lambda m, args, out: out * 0, traced=True)
    np.testing.assert_allclose(run(net, xs), [loss(net, x) for x in xs], rtol=1e-6)


def test_a_hook_inside_a_nested_jax_transform_is_refused(net):
    net.fc1.register_forward_hook(lambda m, args, out: None)

    def scanned(model, xs):
        return jax.lax.scan(lambda c, x: (c + loss(model, x), None), 0.0, xs)[0]

    with pytest.raises(NotImplementedError, match="fired inside a JAX transform nested"):
        js.jit(scanned)(net, jnp.stack([X, X]))


def test_under_plain_jax_transforms_hooks_run_at_trace_time(net):
    shapes = []
    net.fc1.register_forward_hook(lambda m, args, out: shapes.append(out.shape))
    jax.eval_shape(lambda x: net(x), X)
    assert shapes == [(2, 4)]


# -- named scopes ---------------------------------------------------------------------------


def test_each_module_call_is_a_named_scope_in_the_lowered_program(net):
    text = jax.jit(lambda x: net(x)).lower(X).as_text(debug_info=True)
    assert "Net/Linear/" in text
