"""js.optim.lr_scheduler against torch.optim.lr_scheduler: the same rates, exactly (==).

Each case builds one scheduler with the same arguments over a torch optimizer and a js
optimizer with the same two groups (lr 0.1 and 0.05), steps both, and compares the lists of
rates with ``==``: the js schedulers do PyTorch's double arithmetic.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch,
    # torch warns when its scheduler steps without optimizer.step() in between (most cases here)
    pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`:UserWarning"),
]

import js  # noqa: E402
import js.optim  # noqa: E402
from js.optim import lr_scheduler  # noqa: E402

torch_lr_scheduler = torch.optim.lr_scheduler
LRS = (0.1, 0.05)


class Pair(js.Module):
    def __init__(self):
        super().__init__()
        self.a = js.Parameter(jnp.array([1.0, -2.0, 3.0]))
        self.b = js.Parameter(jnp.array([0.5, 0.25]))


def _torch_optimizer(kind: str = "sgd"):
    a = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    b = torch.nn.Parameter(torch.tensor([0.5, 0.25]))
    groups = [{"params": [a], "lr": LRS[0]}, {"params": [b], "lr": LRS[1]}]
    if kind == "adam":
        return torch.optim.Adam(groups, lr=LRS[0])
    return torch.optim.SGD(groups, lr=LRS[0], momentum=0.9)


def _js_optimizer(kind: str = "sgd"):
    named = dict(Pair().named_parameters())
    groups = [
        {"params": [("a", named["a"])], "lr": LRS[0]},
        {"params": [("b", named["b"])], "lr": LRS[1]},
    ]
    if kind == "adam":
        return js.optim.Adam(groups, lr=LRS[0])
    return js.optim.SGD(groups, lr=LRS[0], momentum=0.9)


def _epochs(scheduler, steps: int, metrics=None) -> list[list[float]]:
    """The rates before each step and after the last, stepping ``steps`` times."""
    lrs = [scheduler.get_last_lr()]
    for index in range(steps):
        if metrics is None:
            scheduler.step()
        else:
            scheduler.step(metrics[index])
        lrs.append(scheduler.get_last_lr())
    return lrs


def _both(build, kind: str = "sgd"):
    torch_opt, js_opt = _torch_optimizer(kind), _js_optimizer(kind)
    return (torch_opt, build(torch_lr_scheduler, torch_opt)), (js_opt, build(lr_scheduler, js_opt))


def _sequential(m, opt):
    warmup = m.LinearLR(opt, start_factor=0.1, total_iters=4)
    cosine = m.CosineAnnealingLR(opt, T_max=7, eta_min=1e-3)
    decay = m.ExponentialLR(opt, gamma=0.9)
    return m.SequentialLR(opt, [warmup, cosine, decay], milestones=[4, 11])


CASES = {
    "StepLR": lambda m, o: m.StepLR(o, step_size=3, gamma=0.3),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.7),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.93),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=6, eta_min=0.001),
    "CosineAnnealingLR-default": lambda m, o: m.CosineAnnealingLR(o, T_max=10),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=7),
    "LinearLR-default": lambda m, o: m.LinearLR(o),
    "LambdaLR": lambda m, o: m.LambdaLR(o, lambda e: 1 / (1 + 0.3 * e)),
    "LambdaLR-per-group": lambda m, o: m.LambdaLR(
        o, [lambda e: 0.95**e, lambda e: min(1.0, (e + 1) / 5)]
    ),
    "SequentialLR": _sequential,
    "OneCycleLR-cos": lambda m, o: m.OneCycleLR(o, max_lr=[0.4, 0.2], total_steps=25),
    "OneCycleLR-linear": lambda m, o: m.OneCycleLR(
        o, max_lr=0.3, epochs=5, steps_per_epoch=5, anneal_strategy="linear", pct_start=0.4
    ),
    "OneCycleLR-three-phase": lambda m, o: m.OneCycleLR(
        o, max_lr=0.5, total_steps=25, three_phase=True, div_factor=10.0, final_div_factor=100.0
    ),
    "OneCycleLR-no-momentum": lambda m, o: m.OneCycleLR(
        o, max_lr=0.5, total_steps=25, cycle_momentum=False
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rates_equal_torch(name):
    (_, theirs), (js_opt, ours) = _both(CASES[name])
    steps = 24  # OneCycleLR's total_steps is 25: step 25 would raise in both
    expected, got = _epochs(theirs, steps), _epochs(ours, steps)
    assert got == expected
    assert ours.last_epoch == theirs.last_epoch
    assert [g["lr"] for g in js_opt.param_groups] == expected[-1]
    assert [g["initial_lr"] for g in js_opt.param_groups] == [
        g["initial_lr"] for g in theirs.optimizer.param_groups
    ]


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_one_cycle_momentum_equals_torch(kind):
    key = "betas" if kind == "adam" else "momentum"
    (torch_opt, theirs), (js_opt, ours) = _both(
        lambda m, o: m.OneCycleLR(o, max_lr=0.3, total_steps=12), kind
    )
    for _ in range(11):
        assert [g[key] for g in js_opt.param_groups] == [g[key] for g in torch_opt.param_groups]
        theirs.step()
        ours.step()
    assert [g[key] for g in js_opt.param_groups] == [g[key] for g in torch_opt.param_groups]
    with pytest.raises(ValueError, match="Tried to step 13 times"):
        ours.step(), ours.step()


def test_closed_form_step_epoch_equals_torch():
    """The deprecated step(epoch) uses each closed form, as PyTorch."""
    for name in ("StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR"):
        (_, theirs), (_, ours) = _both(CASES[name])
        for epoch in (3, 7, 5, 12):
            with pytest.warns(UserWarning, match="epoch parameter"):
                theirs.step(epoch)
            with pytest.warns(UserWarning, match="epoch parameter"):
                ours.step(epoch)
            assert ours.get_last_lr() == theirs.get_last_lr(), name


def test_resumed_cosine_uses_closed_form_first():
    """last_epoch >= 0 (resuming): PyTorch's first step there is its closed form."""
    torch_opt, js_opt = _torch_optimizer(), _js_optimizer()
    for group in (*torch_opt.param_groups, *js_opt.param_groups):
        group["initial_lr"] = group["lr"]
    theirs = torch_lr_scheduler.CosineAnnealingLR(torch_opt, T_max=9, last_epoch=4)
    ours = lr_scheduler.CosineAnnealingLR(js_opt, T_max=9, last_epoch=4)
    assert _epochs(ours, 10) == _epochs(theirs, 10)


PLATEAU_METRICS = [1.0, 0.9, 0.9, 0.9, 0.95, 0.89995, 0.7, 0.7, 0.7, 0.7, 0.71, 0.6, 0.6]
PLATEAU_METRICS += [0.6, 0.6, 0.6, 0.59, 0.59, 0.59, 0.59]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"patience": 1},
        {"patience": 1, "threshold_mode": "abs", "threshold": 0.05},
        {"patience": 0, "cooldown": 2, "factor": 0.5},
        {"patience": 1, "min_lr": 0.004, "factor": 0.5},
        {"patience": 1, "min_lr": [0.02, 0.001], "factor": 0.3, "eps": 1e-3},
        {"mode": "max", "patience": 1},
        {"mode": "max", "patience": 2, "threshold_mode": "abs", "threshold": 0.01},
    ],
)
def test_reduce_on_plateau_equals_torch(options):
    metrics = PLATEAU_METRICS
    if options.get("mode") == "max":
        metrics = [-m for m in metrics]
    (_, theirs), (_, ours) = _both(lambda m, o: m.ReduceLROnPlateau(o, **options))
    assert _epochs(ours, len(metrics), metrics) == _epochs(theirs, len(metrics), metrics)
    assert (ours.best, ours.num_bad_epochs, ours.cooldown_counter, ours.last_epoch) == (
        theirs.best,
        theirs.num_bad_epochs,
        theirs.cooldown_counter,
        theirs.last_epoch,
    )


@pytest.mark.parametrize("name", ["StepLR", "CosineAnnealingLR", "SequentialLR", "OneCycleLR-cos"])
def test_state_dict_round_trip_mid_way(name):
    """Stopped after 9 steps, a new scheduler loaded from the state dict continues exactly as
    an uninterrupted one, and as PyTorch; the state dict has PyTorch's keys."""
    (_, theirs), (js_opt, ours) = _both(CASES[name])
    _epochs(theirs, 9), _epochs(ours, 9)
    state = ours.state_dict()
    assert set(state) == set(theirs.state_dict())
    rates = [g["lr"] for g in js_opt.param_groups]
    js_opt2 = _js_optimizer()
    resumed = CASES[name](lr_scheduler, js_opt2)
    resumed.load_state_dict(state)
    for group, lr in zip(js_opt2.param_groups, rates, strict=True):
        group["lr"] = lr  # the optimizer's own state dict restores its rates
    expected = _epochs(theirs, 10)
    assert _epochs(resumed, 10) == expected
    assert _epochs(ours, 10) == expected


def test_plateau_state_dict_round_trip_mid_way():
    (_, theirs), (js_opt, ours) = _both(lambda m, o: m.ReduceLROnPlateau(o, patience=1))
    metrics = PLATEAU_METRICS
    _epochs(theirs, 8, metrics), _epochs(ours, 8, metrics)
    state = ours.state_dict()
    assert set(state) == set(theirs.state_dict())
    js_opt2 = _js_optimizer()
    resumed = lr_scheduler.ReduceLROnPlateau(js_opt2, patience=1)
    resumed.load_state_dict(state)
    for group, old in zip(js_opt2.param_groups, js_opt.param_groups, strict=True):
        group["lr"] = old["lr"]
    rest = metrics[8:]
    assert _epochs(resumed, len(rest), rest) == _epochs(theirs, len(rest), rest)


def test_loads_a_torch_state_dict():
    """A state dict PyTorch saved (plain values) loads into the js scheduler."""
    (_, theirs), (js_opt, ours) = _both(CASES["CosineAnnealingLR"])
    _epochs(theirs, 4)
    ours.load_state_dict(theirs.state_dict())
    for group, lr in zip(js_opt.param_groups, theirs.get_last_lr(), strict=True):
        group["lr"] = lr
    assert _epochs(ours, 8) == _epochs(theirs, 8)


def test_sgd_uses_the_scheduled_rate_and_jit_traces_once():
    """A js SGD step after scheduler.step() equals torch's at the new rate, eagerly and
    under js.jit, and the jitted step traces once across the rate changes."""
    torch_opt, js_opt = _torch_optimizer(), _js_optimizer()
    theirs = torch_lr_scheduler.StepLR(torch_opt, step_size=1, gamma=0.5)
    ours = lr_scheduler.StepLR(js_opt, step_size=1, gamma=0.5)
    traces = []

    @js.jit
    def update(opt, grads):
        traces.append(1)
        opt.step(grads)

    tparams = [p for g in torch_opt.param_groups for p in g["params"]]
    grads_np = [np.array([0.3, -0.2, 0.1], np.float32), np.array([-1.0, 0.5], np.float32)]
    paths = [path for group in js_opt.param_groups for path in _paths(group)]
    for step in range(4):
        for p, g in zip(tparams, grads_np, strict=True):
            p.grad = torch.tensor(g * (step + 1))
        torch_opt.step()
        grads = {path: jnp.asarray(g * (step + 1)) for path, g in zip(paths, grads_np, strict=True)}
        if step % 2:
            update(js_opt, grads)
        else:
            js_opt.step(grads)
        theirs.step(), ours.step()
        got = [np.asarray(p.value) for g in js_opt.param_groups for p in _params(g)]
        for t, j in zip(tparams, got, strict=True):
            np.testing.assert_allclose(j, t.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert len(traces) == 1


def _params(group):
    return list(group["params"])


def _paths(group):
    return list(group.paths)


# -- refusals ------------------------------------------------------------------------------------


def test_traced_schedule_group_is_refused():
    model = Pair()
    opt = js.optim.SGD(model.parameters(), lr=js.optim.cosine_schedule(0.1, 100))
    with pytest.raises(TypeError, match=r"param_groups\[0\]\['lr'\] is a traced schedule"):
        lr_scheduler.StepLR(opt, step_size=2)


def test_bad_arguments():
    opt = _js_optimizer()
    with pytest.raises(TypeError, match="must have param_groups"):
        lr_scheduler.StepLR(object(), step_size=1)
    with pytest.raises(ValueError, match="step_size must be an int >= 1, got 0"):
        lr_scheduler.StepLR(opt, step_size=0)
    with pytest.raises(ValueError, match="T_max must be an int >= 1"):
        lr_scheduler.CosineAnnealingLR(opt, T_max=0)
    with pytest.raises(
        ValueError, match=r"LinearLR: start_factor must be a number in \(0, 1\], got 0.0"
    ):
        lr_scheduler.LinearLR(opt, start_factor=0.0)
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        lr_scheduler.LambdaLR(opt, [lambda e: 1.0])
    with pytest.raises(ValueError, match="ReduceLROnPlateau: factor must be a number < 1, got 1.0"):
        lr_scheduler.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="mode 'up' is unknown"):
        lr_scheduler.ReduceLROnPlateau(opt, mode="up")  # pyright: ignore[reportArgumentType]
    plain = js.optim.SGD(Pair().parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"param_groups\[0\] was built with momentum=0"):
        lr_scheduler.OneCycleLR(plain, max_lr=0.1, total_steps=10)
    assert "initial_lr" not in plain.param_groups[0]  # refused before any write
    with pytest.raises(ValueError, match="either total_steps OR"):
        lr_scheduler.OneCycleLR(opt, max_lr=0.1)
    with pytest.raises(ValueError, match="number of milestones"):
        lr_scheduler.SequentialLR(opt, [lr_scheduler.StepLR(opt, 2)], milestones=[3])
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
        lr_scheduler.SequentialLR(opt, [lr_scheduler.ReduceLROnPlateau(opt)], milestones=[])
    with pytest.raises(KeyError, match="'initial_lr' is not specified"):
        lr_scheduler.StepLR(_js_optimizer(), 2, last_epoch=3)
    assert math.isfinite(opt.param_groups[0]["lr"])


def test_docstring_examples():
    import doctest

    assert doctest.testmod(lr_scheduler).failed == 0
