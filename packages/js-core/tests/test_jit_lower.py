"""``js.jit(f).lower(...)``: JAX's ahead-of-time surface on the program a call would run, and
the program record behind it (one per layout: trace, kind, compiled program)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from core_models import MLP, SGD, Counter, mse

import js


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.normal(size=(8, 10)), jnp.float32), jnp.zeros((8, 4))


def counting_step():
    traces = []

    @js.jit
    def step(model, opt, x, y):
        traces.append(1)
        loss, grads = js.value_and_grad(mse)(model, x, y)
        opt.step(grads)
        return loss

    return step, traces


def test_lower_a_training_step_gives_cost_and_memory_and_changes_nothing(data):
    model = MLP(rngs=js.Rngs(params=0))
    opt = SGD(model.parameters(), 0.1)
    step, traces = counting_step()
    weight = model.layers[0].weight.value
    lowered = step.lower(model, opt, *data)
    assert isinstance(lowered, jax.stages.Lowered)
    compiled = lowered.compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    assert cost["flops"] > 0
    memory = compiled.memory_analysis()
    assert memory.argument_size_in_bytes > 0
    assert memory.alias_size_in_bytes > 0  # the state is donated: outputs alias it
    assert model.layers[0].weight.value is weight and not weight.is_deleted()  # nothing ran
    assert len(traces) == 1


def test_lower_is_the_program_a_call_runs(data):
    model = MLP(rngs=js.Rngs(params=0))
    opt = SGD(model.parameters(), 0.1)
    step, traces = counting_step()
    text = step.lower(model, opt, *data).as_text()
    assert "tf.aliasing_output" in text  # donated, as a call donates
    (program,) = step._programs.values()
    assert program.kind == "write"
    before = model.layers[0].weight.value
    step(model, opt, *data)
    assert before.is_deleted()  # the call ran the donating program that was lowered
    assert len(traces) == 1  # the call reused the trace made for lower
    assert step._programs == {program.layout: program} and program.kind == "write"
    assert step.lower(model, opt, *data).as_text() == text


def test_a_read_only_function_lowers_to_a_read_only_program(data):
    model = MLP(rngs=js.Rngs(params=0))
    forward = js.jit(lambda model, x: model(x))
    lowered = forward.lower(model, data[0])
    assert "tf.aliasing_output" not in lowered.as_text()  # nothing donated
    output, state, extra = lowered.out_info
    assert output.shape == (8, 4) and state is None and extra == ()  # no state returned
    (program,) = forward._programs.values()
    assert program.kind == "read"


def test_lower_before_any_call_runs_nothing():
    counter = Counter()
    run = js.jit(lambda model, x: model(x))
    run.lower(counter, jnp.ones(2)).compile()
    assert int(counter.calls.value) == 0
    run(counter, jnp.ones(2))
    assert int(counter.calls.value) == 1


def test_lower_takes_keywords_and_static_arguments():
    @functools.partial(js.jit, static_argnames="power")
    def scaled(model, x, *, power):
        return model(x) ** power

    counter = Counter()
    text = scaled.lower(model=counter, x=jnp.ones(3), power=3).as_text()
    assert "tensor<3xf32>" in text
    assert scaled(model=counter, x=jnp.ones(3), power=3).shape == (3,)
    assert len(scaled._programs) == 1 and int(counter.calls.value) == 1


def test_keyword_and_positional_calls_share_one_key_path(data):
    model = MLP(rngs=js.Rngs(params=0))
    opt = SGD(model.parameters(), 0.1)
    step, traces = counting_step()
    step(model, opt, *data)
    step(model=model, opt=opt, x=data[0], y=data[1])  # as the Trainer calls its steps
    assert len(step._bindings) == 2  # two call keys ...
    assert len(step._programs) == 2 and len(traces) == 2  # ... and a layout (program) each
    step(model=model, opt=opt, x=data[0], y=data[1])
    assert len(traces) == 2


def test_a_dead_objects_binding_is_dropped(data):
    run = js.jit(lambda model, x: model(x))
    model = MLP(rngs=js.Rngs(params=0))
    run(model, data[0])
    assert len(run._bindings) == 1
    del model
    assert len(run._bindings) == 0  # its id may name another object next
    assert len(run._programs) == 1  # the program stays, for the next model of that layout


def test_lower_follows_a_switch_to_the_writing_kind():
    counter = Counter()

    @js.jit
    def count_long(model, x):
        if x.shape[0] > 2:  # another branch per shape: this one writes
            model(1.0)
        return x.sum()

    count_long(counter, jnp.ones(1))
    (program,) = count_long._programs.values()
    assert program.kind == "read"
    text = count_long.lower(counter, jnp.ones(3)).as_text()  # these inputs write
    assert program.kind == "write" and "tf.aliasing_output" in text
    assert int(counter.calls.value) == 0  # lowering ran nothing
    count_long(counter, jnp.ones(3))
    assert int(counter.calls.value) == 1


def test_programs_run_records_the_calls_made_outside_a_trace():
    inner = js.jit(lambda x: x + 1.0)
    outer = js.jit(lambda x: inner(x) * 2.0)  # inner's call there is part of outer's program
    x = jnp.ones(3)
    inner(x)  # no block open: not recorded anywhere
    with js.programs_run() as ran:
        with js.programs_run() as nested:
            outer(x)
        inner(x)
    inner(x)  # closed: not recorded
    assert [call[0] for call in ran] == [outer, inner]
    assert [call[0] for call in nested] == [outer]
    assert ran[0][1][0] is x and ran[0][2] == {}
    function, args, kwargs = ran[1]
    flops = function.lower(*args, **kwargs).compile().cost_analysis()["flops"]
    assert flops == 3.0
    assert js._jit._WATCHERS == []


def test_programs_run_closes_after_an_error():
    with pytest.raises(ValueError, match="inside"), js.programs_run():
        raise ValueError("inside")
    assert js._jit._WATCHERS == []
