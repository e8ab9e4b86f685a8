"""js.optim without PyTorch: in-place steps, js.jit, state dicts, checks and their messages."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optim_models import MLP, Linear, batch, mse

import js
from js.optim import SGD, Adam, AdamW, clip_grad_norm, cosine_schedule, linear_warmup

OPTIMIZERS = [
    (SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    (Adam, {"lr": 0.01, "weight_decay": 0.01}),
    (AdamW, {"lr": 0.01}),
]
IDS = [cls.__name__ for cls, _ in OPTIMIZERS]


def train_step(model, opt, x, y):
    loss, grads = js.value_and_grad(mse)(model, x, y)
    opt.step(grads)
    return loss


def params_of(model):
    return {path: np.array(p.value) for path, p in model.named_parameters()}


@pytest.mark.parametrize("cls, options", OPTIMIZERS, ids=IDS)
def test_step_updates_in_place_and_jit_matches_eager(cls, options):
    eager, compiled = MLP(), MLP()
    eager_opt = cls(eager.parameters(), **options)
    compiled_opt = cls(compiled.parameters(), **options)
    step = js.jit(train_step)
    x, y = batch()
    losses = [float(train_step(eager, eager_opt, x, y)) for _ in range(5)]
    compiled_losses = [float(step(compiled, compiled_opt, x, y)) for _ in range(5)]
    assert losses[-1] < losses[0]
    np.testing.assert_allclose(compiled_losses, losses, rtol=1e-5)
    for path, value in params_of(eager).items():
        np.testing.assert_allclose(params_of(compiled)[path], value, rtol=1e-5, atol=1e-6)
    assert int(eager_opt.step_count) == int(compiled_opt.step_count) == 5


@pytest.mark.parametrize("cls, options", OPTIMIZERS, ids=IDS)
def test_compiled_step_traces_once_on_the_fast_path(cls, options):
    traces = []

    @js.jit
    def step(model, opt, x, y):
        traces.append(1)  # a Python side effect: runs only while tracing
        return train_step(model, opt, x, y)

    model = MLP()
    opt = cls(model.parameters(), **options)
    x, y = batch()
    for _ in range(4):
        step(model, opt, x, y)
        assert opt.step_count.dtype == jnp.int32
    assert len(traces) == 1
    assert all(binding.tracked for binding in step._bindings.values())
    assert int(opt.step_count) == 4


def test_two_optimizers_over_disjoint_modules_update_only_their_own():
    generator, critic = Linear(4, 2, seed=0), Linear(2, 1, seed=1)
    g_opt, c_opt = Adam(generator.parameters(), lr=0.1), SGD(critic.parameters(), lr=0.1)

    def critic_loss(critic, generator, x):
        return jnp.mean(critic(js.stop_gradient(generator(x))))

    def generator_loss(generator, critic, x):
        return -jnp.mean(critic(generator(x)))

    @js.jit
    def step(generator, critic, g_opt, c_opt, x):
        _, c_grads = js.value_and_grad(critic_loss)(critic, generator, x)
        c_opt.step(c_grads)
        _, g_grads = js.value_and_grad(generator_loss)(generator, critic, x)
        g_opt.step(g_grads)

    x, _ = batch()
    g_before, c_before = params_of(generator), params_of(critic)
    critic_only = Linear(2, 1, seed=1)
    SGD(critic_only.parameters(), lr=0.1).step(
        js.value_and_grad(critic_loss)(critic_only, Linear(4, 2, seed=0), x)[1]
    )
    step(generator, critic, g_opt, c_opt, x)
    assert int(g_opt.step_count) == int(c_opt.step_count) == 1
    for path, value in params_of(critic_only).items():  # the critic's step saw only its grads
        np.testing.assert_allclose(params_of(critic)[path], value, rtol=1e-6)
    for path in g_before:
        assert not np.allclose(params_of(generator)[path], g_before[path])
    for path in c_before:
        assert not np.allclose(params_of(critic)[path], c_before[path])
    with pytest.raises(ValueError, match="unexpected gradient 'hidden.weight'|no gradient for"):
        g_opt.step(js.value_and_grad(mse)(MLP(), *batch())[1])


def test_schedule_as_lr_uses_the_step_count():
    model = Linear(1, 1)
    model.weight.value = jnp.zeros((1, 1))
    opt = SGD(model.parameters(), lr=optax.piecewise_constant_schedule(1.0, {1: 10.0}))
    grads = {"weight": jnp.ones((1, 1)), "bias": jnp.zeros(1)}
    opt.step(grads)
    opt.step(grads)
    assert float(model.weight.value[0, 0]) == pytest.approx(-11.0)
    state = opt.state_dict()  # a schedule is part of the program: no 'param_groups.0.lr'
    assert set(state) == {
        "step_count",
        *(f"param_groups.0.{k}" for k in ("momentum", "dampening", "weight_decay")),
    }


def test_lr_callable_must_be_traceable_as_the_docs_say():
    grads = {"weight": jnp.ones((1, 1)), "bias": jnp.zeros(1)}
    model = Linear(1, 1)
    model.weight.value = jnp.zeros((1, 1))
    opt = SGD(model.parameters(), lr=lambda t: jnp.where(t < 1, 1.0, 10.0))  # docs/optim.md
    opt.step(grads)
    opt.step(grads)
    assert float(model.weight.value[0, 0]) == pytest.approx(-11.0)
    python_if = SGD(Linear(1, 1).parameters(), lr=lambda t: 1.0 if t < 1 else 10.0)
    with pytest.raises(jax.errors.TracerBoolConversionError, match="boolean conversion"):
        python_if.step(grads)


def test_step_count_is_an_int32_counter_outside_jit():
    opt = Adam(MLP().parameters())
    assert opt.step_count == 0 and opt.step_count.dtype == jnp.int32
    opt.step({path: jnp.zeros_like(p.value) for path, p in opt.params.named()})
    assert int(opt.step_count) == 1 and opt.step_count.dtype == jnp.int32


# -- state dicts ----------------------------------------------------------------------------


def test_state_dict_keys_are_stable_and_documented():
    model = MLP()
    keys = set(Adam(model.parameters()).state_dict())
    paths = ["hidden.weight", "hidden.bias", "out.weight", "out.bias"]
    moments = {f"adam.{m}.{p}" for m in ("mu", "nu") for p in paths}
    options = {f"param_groups.0.{k}" for k in ("lr", "betas", "eps", "weight_decay")}
    assert keys == {"step_count"} | moments | options
    assert set(SGD(model.parameters(), lr=0.1, momentum=0.9).state_dict()) == {
        "step_count",
        *(f"momentum.trace.{p}" for p in paths),
        *(f"param_groups.0.{k}" for k in ("lr", "momentum", "dampening", "weight_decay")),
    }
    state = Adam(model.parameters(), lr=0.5, betas=(0.8, 0.9)).state_dict()
    assert state["param_groups.0.betas"].dtype == np.float64
    assert state["param_groups.0.betas"].tolist() == [0.8, 0.9]
    assert state["param_groups.0.lr"].shape == () and float(state["param_groups.0.lr"]) == 0.5


@pytest.mark.parametrize("cls, options", OPTIMIZERS, ids=IDS)
def test_state_dict_resumes_training_exactly(cls, options):
    model, x, y = MLP(), *batch()
    opt = cls(model.parameters(), **options)
    step = js.jit(train_step)
    for _ in range(3):
        step(model, opt, x, y)
    saved_model, saved_opt = model.state_dict(), opt.state_dict()
    assert isinstance(saved_opt["step_count"], np.ndarray)
    expected = [float(step(model, opt, x, y)) for _ in range(3)]
    resumed = MLP(seed=5)
    resumed_opt = cls(resumed.parameters(), **options)
    resumed.load_state_dict(saved_model)
    resumed_opt.load_state_dict(saved_opt)
    assert int(resumed_opt.step_count) == 3
    assert [float(step(resumed, resumed_opt, x, y)) for _ in range(3)] == expected
    for path, value in params_of(model).items():
        np.testing.assert_array_equal(params_of(resumed)[path], value)


def test_load_state_dict_is_all_or_nothing_and_lists_every_problem():
    opt = Adam(MLP().parameters())
    state = opt.state_dict()
    before = opt.state_dict()
    del state["adam.mu.out.bias"]
    state["extra"] = np.zeros(1)
    state["adam.nu.out.weight"] = np.zeros((3, 3), np.float32)
    state["step_count"] = np.array(7, np.int64)
    state["param_groups.0.lr"] = np.array(-1.0)
    with pytest.raises(ValueError) as error:
        opt.load_state_dict(state)
    message = str(error.value)
    assert "nothing was loaded" in message
    assert "missing key 'adam.mu.out.bias'" in message
    assert "unexpected key 'extra'" in message
    assert "'adam.nu.out.weight': expected [8, 2] float32, got [3, 3] float32" in message
    assert "'step_count': expected [] int32, got [] int64" in message
    assert "Adam param_groups[0]: lr must be a number >= 0, got -1.0" in message
    assert int(opt.state_dict()["step_count"]) == int(before["step_count"]) == 0
    assert opt.param_groups[0]["lr"] == 1e-3


# -- refused inputs ---------------------------------------------------------------------------


def test_gradients_of_another_structure_name_the_first_differing_path():
    model = MLP()
    opt = SGD(model.parameters(), lr=0.1)
    grads = {path: jnp.zeros_like(p.value) for path, p in model.named_parameters()}
    with pytest.raises(ValueError, match="no gradient for 'out.bias'"):
        opt.step({k: v for k, v in grads.items() if k != "out.bias"})
    with pytest.raises(ValueError, match=r"'hidden.bias' expected shape \[8\], got \[3\]"):
        opt.step({**grads, "hidden.bias": jnp.zeros(3)})
    with pytest.raises(ValueError, match="unexpected gradient 'other.weight'"):
        opt.step({**grads, "other.weight": jnp.zeros(3)})
    assert int(opt.step_count) == 0


def test_parameters_cast_or_reshaped_after_construction_are_refused():
    model = MLP()
    opt = Adam(model.parameters())
    grads = js.value_and_grad(mse)(model, *batch())[1]
    model.out.bias.value = model.out.bias.value.astype(jnp.bfloat16)
    model.hidden.weight.value = model.hidden.weight.value.T
    message = (
        r"Adam.step: parameters changed shape or dtype after the optimizer was built: "
        r"'hidden.weight': built for \[4, 8\] float32, now \[8, 4\] float32; "
        r"'out.bias': built for \[2\] float32, now \[2\] bfloat16"
    )
    with pytest.raises(ValueError, match=message):
        opt.step(grads)


# Runs in a child process: the two host CPU devices must be requested before jax is imported.
MOVED_PARAMETER = """
import jax
import numpy as np
from optim_models import MLP, batch, mse

import js
from js.optim import Adam

cpu0, cpu1 = jax.devices()
model = MLP()
opt = Adam(model.parameters())
grads = js.value_and_grad(mse)(model, *batch())[1]
opt.step(grads)  # an eager step keeps every parameter where it was
bias = model.out.bias.value
model.out.bias.value = jax.device_put(bias, cpu1)
try:
    opt.step(grads)
except ValueError as error:
    print(error)
else:
    raise SystemExit("a parameter moved to another device was not refused")
assert int(opt.step_count) == 1 and model.out.bias.value.devices() == {cpu1}
model.out.bias.value = jax.device_put(bias, cpu0)  # put back: steps again
opt.step(grads)

moved = MLP()  # moved before the optimizer is built: its state lives there too
for param in moved.parameters():
    param.value = jax.device_put(param.value, cpu1)
opt1 = Adam(moved.parameters())
opt1.step(js.value_and_grad(mse)(moved, *jax.device_put(batch(), cpu1))[1])
assert all(p.value.devices() == {cpu1} for p in moved.parameters())
before = np.array(moved.out.bias.value)
step = js.jit(lambda m, o, x, y: o.step(js.value_and_grad(mse)(m, x, y)[1]))
step(moved, opt1, *jax.device_put(batch(), cpu1))  # compiled: traced parameters, not checked
assert not np.allclose(before, np.array(moved.out.bias.value))
opt1.load_state_dict(opt1.state_dict())  # restored state stays beside its parameters
assert all(v.value.devices() == {cpu1} for v in opt1._state)
opt1.step(js.value_and_grad(mse)(moved, *jax.device_put(batch(), cpu1))[1])
"""


@pytest.mark.process
@pytest.mark.slow
def test_parameters_moved_to_another_device_after_construction_are_refused():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flags = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    env["XLA_FLAGS"] = flags.strip()
    child = subprocess.run(
        [sys.executable, "-W", "error", "-c", MOVED_PARAMETER],
        cwd=Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == (
        "Adam.step: parameters moved to another device after the optimizer was built (its "
        "state stays where they were): 'out.bias': built for CpuDevice(id=0), now on "
        "CpuDevice(id=1). Fix: move the model first, then build the optimizer from "
        "model.parameters(), or put each parameter back with jax.device_put(value, device)."
    )


@pytest.mark.parametrize(
    "build, error, message",
    [
        (lambda p: SGD(p, lr=-0.1), ValueError, "SGD: lr must be a number >= 0, got -0.1"),
        (lambda p: SGD(p, lr="fast"), TypeError, "SGD: lr must be a number >= 0 or"),
        (lambda p: SGD(p, 0.1, momentum=-1), ValueError, "SGD: momentum must be a number >= 0"),
        (lambda p: SGD(p, 0.1, nesterov=True), ValueError, "nesterov=True requires momentum > 0"),
        (lambda p: SGD(p, 0.1, weight_decay=-1), ValueError, "weight_decay must be a number >= 0"),
        (lambda p: Adam(p, betas=(0.9, 1.0)), ValueError, r"Adam: betas\[1\] must be a number"),
        (
            lambda p: Adam(p, betas=(0.9,)),
            TypeError,
            r"betas must be a pair of numbers in \[0, 1\)",
        ),
        (lambda p: Adam(p, eps=-1e-8), ValueError, "Adam: eps must be a number >= 0, got -1e-08"),
        (lambda p: AdamW(p, weight_decay=-0.1), ValueError, "AdamW: weight_decay must be a number"),
        (
            lambda p: AdamW(p, lr=float("nan")),
            ValueError,
            "AdamW: lr must be a number >= 0, got nan",
        ),
    ],
)
def test_invalid_arguments_name_the_argument_and_value(build, error, message):
    with pytest.raises(error, match=message):
        build(MLP().parameters())


def test_params_must_be_a_selection():
    model = MLP()
    with pytest.raises(TypeError, match=r"params must be the selection model.parameters\(\)"):
        Adam(list(model.parameters()))
    with pytest.raises(ValueError, match="Adam: got an empty parameter selection"):
        Adam(js.Module().parameters())


def test_repr_shows_the_options():
    assert repr(SGD(MLP().parameters(), lr=0.1)).startswith("SGD(4 parameters, lr=0.1, momentum=")


# -- clipping and schedules -------------------------------------------------------------------


def test_clip_grad_norm_scales_only_above_the_limit():
    grads = js.value_and_grad(mse)(MLP(), *batch())[1]
    norm = float(optax.tree.norm(grads))
    clipped, original = clip_grad_norm(grads, max_norm=norm / 2)
    assert float(original) == pytest.approx(norm)
    assert float(optax.tree.norm(clipped)) == pytest.approx(norm / 2, rel=1e-5)
    same, _ = clip_grad_norm(grads, max_norm=norm * 2)
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    SGD(MLP().parameters(), lr=0.1).step(clipped)  # the clipped state still fits the optimizer


def test_clip_grad_norm_refuses_negative_max_norm():
    with pytest.raises(ValueError, match="max_norm must be a number >= 0, got -1"):
        clip_grad_norm({"w": jnp.ones(2)}, -1)


def test_schedules():
    cosine = cosine_schedule(0.1, 10, eta_min=0.01)
    assert float(cosine(5)) == pytest.approx(0.055)
    assert float(cosine(20)) == pytest.approx(0.01)
    warmup = linear_warmup(1.0, 4, start_factor=0.5)
    assert [float(warmup(t)) for t in (0, 2, 4, 8)] == pytest.approx([0.5, 0.75, 1.0, 1.0])


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: cosine_schedule(0.1, 0), "cosine_schedule: total_steps must be > 0, got 0"),
        (lambda: cosine_schedule(0.1, 5, eta_min=1), r"eta_min must be in \[0, lr=0.1\], got 1"),
        (lambda: linear_warmup(0.1, -1), "linear_warmup: warmup_steps must be > 0, got -1"),
        (lambda: linear_warmup(0.1, 5, start_factor=2), r"start_factor must be in \[0, 1\]"),
    ],
)
def test_schedule_arguments_are_checked(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_load_state_dict_names_a_non_mapping_and_entries_that_are_not_arrays():
    opt = Adam(MLP().parameters())
    before = opt.state_dict()
    with pytest.raises(
        TypeError,
        match=r"Adam.load_state_dict: state_dict must be a mapping "
        r"\{key: array\}, got list; nothing was loaded",
    ):
        opt.load_state_dict(list(before.items()))
    with pytest.raises(
        TypeError,
        match=r"entries that are not arrays; nothing was loaded.\n  "
        r"'step_count': object is not an array.*\n  'adam.mu.out.bias': list \(setting",
    ):
        opt.load_state_dict({**before, "adam.mu.out.bias": [[1], [2, 3]], "step_count": object()})
    live = opt.state_dict(as_numpy=False)  # the arrays live; the options are host numbers
    assert all(
        isinstance(value, np.ndarray if key.startswith("param_groups.") else jax.Array)
        for key, value in live.items()
    )
    opt.load_state_dict(live)
    assert opt.state_dict().keys() == before.keys()
