"""A new optimizer or model of the same structure reuses a compiled step; a change compiles.

Compilations are counted by a Python side effect in the step, which runs only while tracing.
"""

import numpy as np
import optax
import pytest
from optim_models import MLP, batch, mse

import js
from js.optim import SGD, Adam, AdamW, Optax, accumulate, cosine_schedule
from js.optim._program import update_program

OPTIMIZERS = [
    (SGD, {"lr": 0.1, "momentum": 0.9}),
    (Adam, {"lr": 0.01, "weight_decay": 0.01}),
    (AdamW, {"lr": 0.01}),
]
IDS = [cls.__name__ for cls, _ in OPTIMIZERS]


def counting_step():
    traces = []

    @js.jit
    def step(model, opt, x, y):
        traces.append(1)  # runs only while tracing
        loss, grads = js.value_and_grad(mse)(model, x, y)
        opt.step(grads)
        return loss

    return step, traces


@pytest.mark.parametrize("cls, options", OPTIMIZERS, ids=IDS)
def test_a_new_optimizer_and_model_of_the_same_structure_reuse_the_program(cls, options):
    step, traces = counting_step()
    x, y = batch()
    for seed in (0, 1, 2):  # new weights each time, same architecture and hyperparameters
        model = MLP(seed=seed)
        step(model, cls(model.parameters(), **options), x, y)
    assert len(traces) == 1 and len(step._programs) == 1


@pytest.mark.parametrize("cls, options", OPTIMIZERS, ids=IDS)
def test_a_reused_program_gives_the_numbers_of_a_fresh_one(cls, options):
    step, _ = counting_step()
    x, y = batch()
    first = MLP(seed=0)
    step(first, cls(first.parameters(), **options), x, y)
    shared, fresh = MLP(seed=1), MLP(seed=1)
    shared_opt, fresh_opt = cls(shared.parameters(), **options), cls(fresh.parameters(), **options)
    fresh_step, _ = counting_step()
    for _ in range(3):
        np.testing.assert_array_equal(
            step(shared, shared_opt, x, y), fresh_step(fresh, fresh_opt, x, y)
        )
    np.testing.assert_array_equal(shared.out.weight.value, fresh.out.weight.value)


def test_numeric_options_reuse_the_program_and_structure_compiles_anew():
    step, traces = counting_step()
    x, y = batch()
    same = [  # numeric options are arrays of the optimizer's state, not program constants
        lambda p: Adam(p, lr=0.01, weight_decay=0.01),
        lambda p: Adam(p, lr=0.02, weight_decay=0.01),
        lambda p: Adam(p, lr=0.01, betas=(0.8, 0.999), eps=1e-6, weight_decay=0.1),
    ]
    for build in same:
        model = MLP()
        step(model, build(model.parameters()), x, y)
    assert len(traces) == 1
    other = [  # another rule, a static option, another optimizer
        lambda p: AdamW(p, lr=0.01),
        lambda p: Adam(p, lr=0.01, amsgrad=True),
        lambda p: Adam(p, lr=0.01),  # weight_decay=0: torch's update without the term
        lambda p: SGD(p, lr=0.01),
        lambda p: SGD(p, lr=0.01, momentum=0.9),  # a momentum buffer: another state
    ]
    for count, build in enumerate(other, start=2):
        model = MLP()
        step(model, build(model.parameters()), x, y)
        assert len(traces) == count
    model = MLP(sizes=(4, 16, 2))  # another architecture, a known optimizer
    step(model, Adam(model.parameters(), lr=0.01), x, y)
    assert len(traces) == len(other) + 2


def test_a_schedule_is_compared_by_identity():
    step, traces = counting_step()
    x, y = batch()
    schedule = cosine_schedule(0.1, 100)
    for lr in (schedule, schedule, cosine_schedule(0.1, 100)):
        model = MLP()
        step(model, SGD(model.parameters(), lr=lr), x, y)
    assert len(traces) == 2  # the same schedule object reuses; an equal new one compiles


def test_accumulate_reuses_for_equal_settings():
    step, traces = counting_step()
    x, y = batch()
    for every in (2, 2, 3):
        model = MLP()
        step(model, accumulate(Adam(model.parameters(), lr=0.01), every=every), x, y)
    assert len(traces) == 2


def test_the_eager_step_reuses_its_update_program():
    x, y = batch()
    sizes = []
    for _ in range(3):
        model = MLP()
        opt = Adam(model.parameters(), lr=0.01)
        _, grads = js.value_and_grad(mse)(model, x, y)
        opt.step(grads)
        sizes.append(update_program._cache_size())
    assert sizes[1] == sizes[2] == sizes[0]


@pytest.mark.parametrize("keyed, traced", [(False, 2), (True, 1)], ids=["identity", "keyed"])
def test_an_optax_optimizer_shares_programs_only_with_a_key(keyed, traced):
    step, traces = counting_step()
    x, y = batch()
    for _ in range(2):
        model = MLP()
        opt = Optax(model.parameters(), optax.sgd(0.1), key=("sgd", 0.1) if keyed else None)
        step(model, opt, x, y)
    assert len(traces) == traced


class Halving:
    """A schedule object that defines ``__eq__`` and so is not hashable."""

    def __call__(self, step):
        return 0.1 * 0.5**step

    def __eq__(self, other):
        return isinstance(other, Halving)


def test_an_unhashable_schedule_is_compared_by_identity():
    # A schedule is held by identity: eager steps and js.jit both work, each object compiles.
    x, y = batch()
    step, traces = counting_step()
    for _ in range(2):
        model = MLP()
        opt = SGD(model.parameters(), lr=Halving())
        for _ in range(2):
            opt.step(js.value_and_grad(mse)(model, x, y)[1])
            step(model, opt, x, y)
    assert int(opt.step_count) == 4 and len(traces) == 2
