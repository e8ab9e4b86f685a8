"""One table of argument mistakes over every exported optimizer and scheduler: the same mistake
raises the same exception type with the same words everywhere (js._checks' vocabulary: a wrong
type is a TypeError, a bad value a ValueError), and ``inspect.signature`` of every exported
class shows its constructor's parameters."""

import inspect
import re

import pytest
from optim_models import MLP

import js
import js.optim
from js.optim import lr_scheduler, swa_utils

# What each argument must be: (a wrong type, what the TypeError says it must be, a bad value,
# the element the ValueError names ("" or "[1]"), what it says that must be). The wording is
# js._checks': "<cls>: <name> must be <what>, got <value!r>" (+ " (a <type>)" for a wrong type).
KINDS = {
    "number>=0": ("x", "a number >= 0", -1, "", "a number >= 0"),
    "lr": ("x", "a number >= 0 or a schedule (a callable of the step", -1, "", "a number >= 0"),
    "betas": ("ab", "a pair of numbers in [0, 1)", (0.9, 1.0), "[1]", "a number in [0, 1)"),
    "unit": ("x", "a number in [0, 1]", 1.5, "", "a number in [0, 1]"),
    "number>=1": ("x", "a number >= 1", 0.5, "", "a number >= 1"),
    "number<=0": ("x", "a number <= 0", 0.5, "", "a number <= 0"),
    "number<1": ("x", "a number < 1", 1.0, "", "a number < 1"),
    "(0,1]": ("x", "a number in (0, 1]", 0.0, "", "a number in (0, 1]"),
    "eps pair": ("x", "a pair of numbers >= 0", (-1, 1e-3), "[0]", "a number >= 0"),
    "number": ("x", "a number", None, "", ""),
    "bool": (1, "True or False", None, "", ""),
    "int>=1": (1.5, "an int >= 1", 0, "", "an int >= 1"),
    "int>=0": (1.5, "an int >= 0", -1, "", "an int >= 0"),
    "int>=-1": ("x", "an int >= -1", -2, "", "an int >= -1"),
}  # fmt: skip


# Every shared argument of the optimizers, by its name.
OPTIMIZER_ARGS = {
    "lr": "lr",
    "betas": "betas",
    "eps": "number>=0",
    "weight_decay": "number>=0",
    "momentum": "number>=0",
    "dampening": "number>=0",
    "lr_decay": "number>=0",
    "momentum_decay": "number>=0",
    "initial_accumulator_value": "number>=0",
    "alpha": "unit",
    "rho": "unit",
    "d": "number>=1",
    "beta2_decay": "number<=0",
    "nesterov": "bool",
    "amsgrad": "bool",
    "maximize": "bool",
    "centered": "bool",
    "decoupled_weight_decay": "bool",
}
EXCEPTIONS = {("Adafactor", "eps"): "eps pair"}  # (eps1, eps2): a pair where the others take one

OPTIMIZERS = [
    cls
    for cls in vars(js.optim).values()
    if isinstance(cls, type)
    and issubclass(cls, js.optim.Optimizer)
    and cls not in (js.optim.Optimizer, js.optim.Optax)
]


def optimizer_rows():
    for cls in OPTIMIZERS:
        for name in inspect.signature(cls).parameters:
            kind = EXCEPTIONS.get((cls.__name__, name), OPTIMIZER_ARGS.get(name))
            if kind is not None:
                yield pytest.param(cls, name, kind, id=f"{cls.__name__}-{name}")


def test_every_optimizer_argument_is_in_the_table():
    names = {n for cls in OPTIMIZERS for n in inspect.signature(cls).parameters} - {"params"}
    assert names - set(OPTIMIZER_ARGS) == {"optimizer", "every"}  # Accumulate's own
    assert {cls.__name__ for cls in OPTIMIZERS} >= {"SGD", "Adam", "NAdam", "Lion", "Adafactor"}


def check_row(owner, name, kind, build):
    """The wrong type raises TypeError, the bad value ValueError, each in the table's words."""
    wrong, what, bad, element, bad_what = KINDS[kind]
    with pytest.raises(TypeError) as caught:
        build(wrong)
    got = f"got {wrong!r} (a {type(wrong).__name__})"
    want = f"{owner}: {name} must be {what}"
    assert str(caught.value).startswith(want) and got in str(caught.value), str(caught.value)
    if bad is not None:
        with pytest.raises(ValueError) as caught:
            build(bad)
        value = bad[int(element[1])] if element else bad
        want = f"{owner}: {name}{element} must be {bad_what}, got {value!r}"
        assert str(caught.value) == want


@pytest.mark.parametrize(("cls", "name", "kind"), list(optimizer_rows()))
def test_optimizer_arguments(cls, name, kind):
    def build(value):
        options = {"momentum": 0.9} if name == "nesterov" else {}  # nesterov needs momentum
        cls(MLP().parameters(), **options, **{name: value})

    check_row(cls.__name__, name, kind, build)


def test_a_written_option_gets_the_same_words():
    opt = js.optim.NAdam(MLP().parameters())
    with pytest.raises(TypeError, match=re.escape("NAdam param_groups[0]: betas must be a pair")):
        opt.param_groups[0]["betas"] = "ab"
    adam = js.optim.Adam(MLP().parameters())
    with pytest.raises(ValueError, match=re.escape("Adam param_groups[0]: eps must be a number")):
        adam.param_groups[0]["eps"] = -1.0


class Opt:
    """What a scheduler needs of an optimizer: param_groups with a float lr (and momentum)."""

    def __init__(self):
        self.param_groups = [{"lr": 0.1, "momentum": 0.9}]


# Each scheduler with its required arguments, and the kind of each argument it checks.
SCHEDULERS = {
    lr_scheduler.StepLR: ({"step_size": 2}, {"step_size": "int>=1", "gamma": "number"}),
    lr_scheduler.MultiStepLR: ({"milestones": [2]}, {"gamma": "number"}),
    lr_scheduler.ExponentialLR: ({"gamma": 0.5}, {"gamma": "number"}),
    lr_scheduler.CosineAnnealingLR: ({"T_max": 3}, {"T_max": "int>=1", "eta_min": "number"}),
    lr_scheduler.LinearLR: (
        {},
        {"start_factor": "(0,1]", "end_factor": "unit", "total_iters": "int>=0"},
    ),
    lr_scheduler.LambdaLR: ({"lr_lambda": lambda epoch: 1.0}, {}),
    lr_scheduler.OneCycleLR: (
        {"max_lr": 0.1, "total_steps": 10},
        {"total_steps": "int>=1", "pct_start": "unit"},
    ),
    lr_scheduler.ReduceLROnPlateau: (
        {},
        {
            "factor": "number<1",
            "patience": "int>=0",
            "cooldown": "int>=0",
            "eps": "number",
            "threshold": "number",
            "min_lr": "number",
        },
    ),
    swa_utils.SWALR: ({"swa_lr": 0.05}, {"anneal_epochs": "int>=0"}),
}


def scheduler_rows():
    for cls, (required, kinds) in SCHEDULERS.items():
        if "last_epoch" in inspect.signature(cls).parameters:
            kinds = {**kinds, "last_epoch": "int>=-1"}
        for name, kind in kinds.items():
            yield pytest.param(cls, required, name, kind, id=f"{cls.__name__}-{name}")


def test_every_scheduler_is_in_the_table():
    exported = {
        cls
        for module in (lr_scheduler, swa_utils)
        for cls in vars(module).values()
        if isinstance(cls, type)
        and issubclass(cls, lr_scheduler.LRScheduler)
        and cls is not lr_scheduler.LRScheduler
    }
    assert exported - set(SCHEDULERS) == {lr_scheduler.SequentialLR}  # its own row below


@pytest.mark.parametrize(("cls", "required", "name", "kind"), list(scheduler_rows()))
def test_scheduler_arguments(cls, required, name, kind):
    def build(value):
        cls(Opt(), **{**required, name: value})

    check_row(cls.__name__, name, kind, build)


def test_sequential_lr_last_epoch():
    opt = Opt()
    inner = lr_scheduler.StepLR(opt, step_size=2)
    for value, error, text in [("x", TypeError, "got 'x' (a str)"), (-2, ValueError, "got -2")]:
        with pytest.raises(
            error, match=re.escape(f"SequentialLR: last_epoch must be an int >= -1, {text}")
        ):
            lr_scheduler.SequentialLR(opt, [inner], milestones=[], last_epoch=value)


EXPORTED = sorted(
    {
        (module.__name__, name): cls
        for module in (js.optim, lr_scheduler, swa_utils)
        for name, cls in vars(module).items()
        if isinstance(cls, type)
        and not name.startswith("_")
        and cls.__module__.startswith("js.optim")
    }.items()
)


@pytest.mark.parametrize(("where", "cls"), EXPORTED, ids=[f"{m}.{n}" for (m, n), _ in EXPORTED])
def test_signatures_show_the_constructor(where, cls):
    init = inspect.signature(cls.__init__)
    want = init.replace(parameters=list(init.parameters.values())[1:])
    assert inspect.signature(cls) == want
