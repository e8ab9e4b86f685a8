"""js.optim.swa_utils against torch.optim.swa_utils (torch 2.13, CPU)."""

import doctest

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js
from js.optim import swa_utils
from js.optim.swa_utils import (
    AveragedModel,
    get_ema_avg_fn,
    get_ema_multi_avg_fn,
    get_swa_avg_fn,
    get_swa_multi_avg_fn,
    update_bn,
)

torch = pytest.importorskip("torch")
tswa = torch.optim.swa_utils

UPDATES = 20
SHAPES = {"w": (3, 4), "b": (4,)}


class Net(js.Module):
    """Two Parameters, a float buffer and (optionally) an int buffer, as the torch twin."""

    def __init__(self, counter: bool):
        super().__init__()
        self.w = js.Parameter(jnp.zeros(SHAPES["w"]))
        self.b = js.Parameter(jnp.zeros(SHAPES["b"]))
        self.stat = js.Buffer(jnp.zeros(4))
        if counter:
            self.count = js.Buffer(jnp.zeros((), jnp.int32))

    def forward(self, x):
        return x @ self.w.value + self.b.value + self.stat.value


class TorchNet(torch.nn.Module):
    def __init__(self, counter: bool):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(SHAPES["w"]))
        self.b = torch.nn.Parameter(torch.zeros(SHAPES["b"]))
        self.register_buffer("stat", torch.zeros(4))
        if counter:
            self.register_buffer("count", torch.zeros((), dtype=torch.long))


def _values(seed: int, counter: bool) -> list[dict[str, np.ndarray]]:
    """The model's state at each update: random floats, an increasing counter."""
    rng = np.random.default_rng(seed)
    states = []
    for i in range(UPDATES):
        state = {name: rng.normal(size=shape).astype(np.float32) for name, shape in SHAPES.items()}
        state["stat"] = rng.normal(size=4).astype(np.float32)
        if counter:
            state["count"] = np.asarray(7 * i + 3, np.int32)
        states.append(state)
    return states


# (name, js kwargs, torch kwargs, int buffer): torch's multi-tensor SWA cannot average an
# integer buffer (its addcdiv refuses integers), so that case averages floats only.
CASES = [
    ("swa-default", {}, {}, True),
    ("swa-avg_fn", {"avg_fn": get_swa_avg_fn()}, {"avg_fn": tswa.get_swa_avg_fn()}, True),
    (
        "swa-multi",
        {"multi_avg_fn": get_swa_multi_avg_fn()},
        {"multi_avg_fn": tswa.get_swa_multi_avg_fn()},
        False,
    ),
    (
        "ema-multi",
        {"multi_avg_fn": get_ema_multi_avg_fn(0.9)},
        {"multi_avg_fn": tswa.get_ema_multi_avg_fn(0.9)},
        True,
    ),
    (
        "ema-avg_fn",
        {"avg_fn": get_ema_avg_fn(0.8)},
        {"avg_fn": tswa.get_ema_avg_fn(0.8)},
        True,
    ),
]


def _torch_run(kwargs, use_buffers, counter, states):
    model = TorchNet(counter)
    averaged = tswa.AveragedModel(model, use_buffers=use_buffers, **kwargs)
    for state in states:
        with torch.no_grad():
            for name, value in state.items():
                getattr(model, name).copy_(torch.from_numpy(np.asarray(value)))
        averaged.update_parameters(model)
    return {k: v.numpy() for k, v in averaged.state_dict().items()}


def _compare(mine: dict, theirs: dict) -> None:
    assert sorted(mine) == sorted(theirs)
    for key, value in theirs.items():
        got = np.asarray(mine[key])
        if np.issubdtype(value.dtype, np.integer):
            np.testing.assert_array_equal(got, value, err_msg=key)
        else:
            np.testing.assert_allclose(got, value, rtol=2e-6, atol=1e-7, err_msg=key)


@pytest.mark.parametrize("use_buffers", [False, True], ids=["params", "buffers"])
@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_eager_updates_equal_torch(case, use_buffers):
    _, kwargs, torch_kwargs, counter = case
    states = _values(0, counter)
    model = Net(counter)
    averaged = AveragedModel(model, use_buffers=use_buffers, **kwargs)
    for state in states:
        for name, value in state.items():
            getattr(model, name).value = value
        averaged.update_parameters(model)
    _compare(averaged.state_dict(), _torch_run(torch_kwargs, use_buffers, counter, states))
    assert averaged.n_averaged.value.dtype == jnp.int32


@pytest.mark.parametrize("use_buffers", [False, True], ids=["params", "buffers"])
@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_updates_inside_a_compiled_step_equal_torch(case, use_buffers):
    """The update inside js.jit: traced once, no device-to-host read over 20 steps."""
    _, kwargs, torch_kwargs, counter = case
    states = _values(1, counter)
    model = Net(counter)
    averaged = AveragedModel(model, use_buffers=use_buffers, **kwargs)
    traces = []

    @js.jit
    def step(model, averaged, state):
        traces.append(1)  # runs only while tracing
        for name, value in state.items():
            getattr(model, name).value = value
        averaged.update_parameters(model)

    placed = [jax.device_put(state) for state in states]
    with jax.transfer_guard_device_to_host("disallow"):
        for state in placed:
            step(model, averaged, state)
    assert len(traces) == 1
    _compare(averaged.state_dict(), _torch_run(torch_kwargs, use_buffers, counter, states))


def test_the_copy_is_independent_and_runs_the_module():
    model = Net(False)
    model.w.value = jnp.ones(SHAPES["w"])
    averaged = AveragedModel(model)
    assert averaged.module.w.value is not model.w.value
    model.w.value = 2 * model.w.value  # not seen by the copy until an update
    np.testing.assert_array_equal(averaged.module.w.value, np.ones(SHAPES["w"]))
    x = jnp.ones((2, 3))
    np.testing.assert_array_equal(averaged(x), averaged.module(x))
    assert sorted(averaged.state_dict()) == ["module.b", "module.stat", "module.w", "n_averaged"]


def test_equal_averaging_functions_share_one_eager_program():
    first = AveragedModel(Net(False), avg_fn=get_ema_avg_fn(0.99))
    second = AveragedModel(Net(False), avg_fn=get_ema_avg_fn(0.99))
    assert first.avg_fn == second.avg_fn and hash(first.avg_fn) == hash(second.avg_fn)
    assert get_ema_avg_fn(0.99) != get_ema_avg_fn(0.9)
    model = Net(False)
    first.update_parameters(model)
    before = len(swa_utils._update_program._programs)
    second.update_parameters(model)
    assert len(swa_utils._update_program._programs) == before


def test_bad_arguments_are_refused():
    model = Net(False)
    with pytest.raises(ValueError, match="only one of avg_fn and multi_avg_fn"):
        AveragedModel(model, avg_fn=get_ema_avg_fn(), multi_avg_fn=get_ema_multi_avg_fn())
    with pytest.raises(TypeError, match="model must be a js.Module"):
        AveragedModel(object())
    with pytest.raises(NotImplementedError, match="device="):
        AveragedModel(model, device="cpu")
    with pytest.raises(TypeError, match="avg_fn must be callable"):
        AveragedModel(model, avg_fn=0.9)
    with pytest.raises(TypeError, match="use_buffers must be True or False"):
        AveragedModel(model, use_buffers=1)
    with pytest.raises(ValueError, match="Invalid decay value 1.5"):
        get_ema_multi_avg_fn(1.5)
    with pytest.raises(TypeError, match="decay must be a float"):
        get_ema_avg_fn("0.9")
    averaged = AveragedModel(model)
    with pytest.raises(ValueError, match=r"missing \[\], unexpected \['count'\]"):
        AveragedModel(model, use_buffers=True).update_parameters(Net(True))
    with pytest.raises(TypeError, match="update_parameters: model must be a js.Module"):
        averaged.update_parameters(object())

    def wrong(averaged, current, n):
        return averaged[:1]

    with pytest.raises(ValueError, match="multi_avg_fn returned 1 arrays for 2"):
        AveragedModel(model, multi_avg_fn=wrong).update_parameters(model)


# -- update_bn (js.nn's BatchNorm; the train env) ------------------------------------------


def _bn_models():
    nn = pytest.importorskip("js.nn")
    rngs = js.Rngs(params=0)
    model = nn.Sequential(
        nn.Linear(3, 5, rngs=rngs),
        nn.BatchNorm1d(5, momentum=0.3),
        nn.ReLU(),
        nn.Linear(5, 2, rngs=rngs),
    )
    twin = torch.nn.Sequential(
        torch.nn.Linear(3, 5),
        torch.nn.BatchNorm1d(5, momentum=0.3),
        torch.nn.ReLU(),
        torch.nn.Linear(5, 2),
    )
    with torch.no_grad():
        tensors = twin.state_dict()
        for name, value in model.state_dict().items():
            tensors[name].copy_(torch.from_numpy(np.asarray(value)))
    return model, twin


def test_update_bn_equals_torch():
    """Running mean as torch's; running variance the same cumulative average of js.nn's own
    statistic, the population variance: torch's unbiased one times (N - 1) / N."""
    model, twin = _bn_models()
    rng = np.random.default_rng(2)
    batches = [(rng.normal(size=(8, 3)).astype(np.float32), np.zeros(8)) for _ in range(5)]
    model.eval()
    twin.eval()
    update_bn([(jnp.asarray(x), y) for x, y in batches], model)
    tswa.update_bn([(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches], twin)
    bn, tbn = model[1], twin[1]
    np.testing.assert_allclose(
        bn.running_mean.value, tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6
    )
    n = 8
    np.testing.assert_allclose(
        bn.running_var.value, tbn.running_var.numpy() * (n - 1) / n, rtol=1e-5, atol=1e-6
    )
    assert bn.momentum == tbn.momentum == 0.3 and not model.training and not twin.training


def test_update_bn_on_an_averaged_model_resets_the_statistics():
    model, _ = _bn_models()
    averaged = AveragedModel(model)
    bn = averaged.module[1]
    bn.running_mean.value = jnp.full(5, 100.0)  # discarded: the statistics are reset first
    x = jnp.asarray(np.random.default_rng(3).normal(size=(6, 3)), jnp.float32)
    update_bn([x], averaged)
    h = averaged.module[0](x)
    np.testing.assert_allclose(bn.running_mean.value, h.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.value, h.var(0), rtol=1e-5, atol=1e-6)
    assert averaged.training


def test_update_bn_without_batch_norm_does_nothing():
    model = Net(False)
    update_bn([jnp.ones((2, 3))], model)
    with pytest.raises(TypeError, match="update_bn: model must be a js.Module"):
        update_bn([], object())


def test_docstring_examples():
    pytest.importorskip("js.nn")
    assert doctest.testmod(swa_utils).failed == 0


SHARDED = """
import jax, numpy as np
from jax.sharding import AxisType, PartitionSpec as P
from optim_models import MLP, batch, mse
import js
from js.optim import Adam
from js.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

mesh = jax.make_mesh((2,), ("data",), axis_types=(AxisType.Auto,))
rules = [("hidden.weight", P(None, "data")), ("out.weight", P("data", None))]
model, reference = js.shard(MLP(), mesh, rules), MLP()
averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
ref_averaged = AveragedModel(reference, multi_avg_fn=get_ema_multi_avg_fn(0.9))
assert averaged.n_averaged[...].sharding.spec == P()
opt, ref_opt = Adam(model.parameters(), lr=0.01), Adam(reference.parameters(), lr=0.01)

@js.jit
def step(model, opt, averaged, x, y):
    opt.step(js.value_and_grad(mse)(model, x, y)[1])
    averaged.update_parameters(model)

x, y = batch()
for _ in range(3):
    step(model, opt, averaged, *js.shard_batch((x, y), mesh))
    step(reference, ref_opt, ref_averaged, x, y)
averaged.update_parameters(model)  # eagerly too
ref_averaged.update_parameters(reference)
params = dict(model.named_parameters())
for path, a in averaged.module.named_parameters():
    assert a[...].sharding == params[path][...].sharding, path
for (path, a), (_, b) in zip(
    sorted(averaged.module.named_parameters()), sorted(ref_averaged.module.named_parameters())
):
    np.testing.assert_allclose(a[...], b[...], rtol=1e-6, atol=1e-6)
assert int(averaged.n_averaged[...]) == 4
"""


@pytest.mark.process
@pytest.mark.slow
def test_the_average_of_a_sharded_model_stays_on_its_shardings():
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()
    child = subprocess.run(
        [sys.executable, "-W", "error", "-c", SHARDED],
        cwd=Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-4000:]


# -- SWALR --------------------------------------------------------------------------------------


def _optimizers(lrs=(0.1, 0.05)):
    from optim_models import MLP

    named = MLP().parameters().named()
    mine = js.optim.SGD([{"params": named[:2]}, {"params": named[2:], "lr": lrs[1]}], lr=lrs[0])
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    theirs = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": lrs[1]}], lr=lrs[0])
    return mine, theirs


@pytest.mark.parametrize(
    "options",
    [
        {"swa_lr": 0.01},
        {"swa_lr": [0.01, 0.2], "anneal_epochs": 4, "anneal_strategy": "linear"},
        {"swa_lr": 0.3, "anneal_epochs": 0},
        {"swa_lr": [0.02, 0.03], "anneal_epochs": 1, "anneal_strategy": "cos"},
    ],
)
def test_swalr_rates_equal_torch(options):
    from js.optim.swa_utils import SWALR

    mine, theirs = _optimizers()
    scheduler, reference = SWALR(mine, **options), tswa.SWALR(theirs, **options)
    for _ in range(14):
        assert scheduler.get_last_lr() == reference.get_last_lr()
        assert [g["lr"] for g in mine.param_groups] == [g["lr"] for g in theirs.param_groups]
        scheduler.step()
        theirs.step()
        reference.step()
    assert [g["swa_lr"] for g in mine.param_groups] == [g["swa_lr"] for g in theirs.param_groups]


def test_swalr_resumes_from_its_state_dict_and_torchs():
    from js.optim.swa_utils import SWALR

    mine, theirs = _optimizers()
    scheduler = SWALR(mine, swa_lr=0.01, anneal_epochs=6)
    reference = tswa.SWALR(theirs, swa_lr=0.01, anneal_epochs=6)
    for _ in range(3):
        scheduler.step()
        theirs.step()
        reference.step()
    rates = [group["lr"] for group in mine.param_groups]
    states = [scheduler.state_dict(), reference.state_dict()]
    expected = []
    for _ in range(5):
        scheduler.step()
        expected.append(scheduler.get_last_lr())
    for state in states:
        again, _ = _optimizers()
        resumed = SWALR(again, swa_lr=0.01, anneal_epochs=6)
        resumed.load_state_dict(state)
        for group, lr in zip(again.param_groups, rates, strict=True):
            group["lr"] = lr  # what the optimizer's own state_dict restores
        got = []
        for _ in range(5):
            resumed.step()
            got.append(resumed.get_last_lr())
        assert got == expected


def test_swalr_refuses_bad_arguments():
    from js.optim.swa_utils import SWALR

    mine, _ = _optimizers()
    with pytest.raises(ValueError, match="anneal_strategy must be one of 'cos' or 'linear'"):
        SWALR(mine, swa_lr=0.1, anneal_strategy="exp")
    with pytest.raises(ValueError, match="SWALR: anneal_epochs must be an int >= 0, got -1"):
        SWALR(mine, swa_lr=0.1, anneal_epochs=-1)
    with pytest.raises(ValueError, match="swa_lr must have the same length"):
        SWALR(mine, swa_lr=[0.1])
    with pytest.raises(TypeError, match="the optimizer must have param_groups"):
        SWALR(object(), swa_lr=0.1)
    with pytest.raises(KeyError, match="'initial_lr' is not specified"):
        SWALR(_optimizers()[0], swa_lr=0.1, last_epoch=3)


def test_swalr_docstring_examples():
    from js.optim import _swalr

    assert doctest.testmod(_swalr).failed == 0
