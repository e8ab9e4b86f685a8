"""The base Optimizer's one extension point below the per-parameter init/update: ``rule()``.
Wrappers hold what they wrap (Accumulate the inner optimizer's rule, as optax.MultiSteps wraps
a transform; Optax the optax transform) and no optimizer overrides a private method of the base
(issue 32)."""

import optax
from optim_models import MLP

import js.optim
from js.optim import Adam, Optax, accumulate
from js.optim._accumulate import Accumulating
from js.optim._optax import Transformed
from js.optim._optimizer import Optimizer, PerParameter


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_no_optimizer_of_js_optim_overrides_a_private_method_of_the_base():
    private = {
        name
        for name, value in vars(Optimizer).items()
        if name.startswith("_") and not name.startswith("__") and callable(value)
    }
    ours = [c for c in _subclasses(Optimizer) if c.__module__.startswith(js.optim.__name__)]
    assert {"Adam", "SGD", "Optax", "Accumulate"} <= {c.__name__ for c in ours}
    assert {
        c.__name__: sorted(private & set(vars(c))) for c in ours if private & set(vars(c))
    } == {}


def test_accumulate_s_rule_holds_the_inner_optimizer_s_rule():
    inner = Adam(MLP().parameters(), lr=0.1)
    opt = accumulate(inner, every=3)
    rule = opt.rule()
    assert isinstance(rule, Accumulating) and isinstance(rule.inner, PerParameter)
    assert rule.inner.optimizer is inner and rule.groups is inner  # options saved are inner's
    assert rule.key() == (type(opt), 3, inner.rule().key())
    keys = [key for key, _ in rule.items()]
    assert keys[:2] == ["mini_step", "gradient_step"]
    assert [k for k in keys if k.startswith("inner_opt_state.")] == [
        f"inner_opt_state.{k}" for k, _ in inner.rule().items()
    ]


def test_optax_s_rule_holds_the_transform():
    tx = optax.sgd(0.1)
    opt = Optax(MLP().parameters(), tx, key=("sgd", 0.1))
    rule = opt.rule()
    assert isinstance(rule, Transformed) and rule.tx.tx is tx and rule.groups is opt
    assert rule.key() == Optax(MLP().parameters(), optax.sgd(0.1), key=("sgd", 0.1)).rule().key()
