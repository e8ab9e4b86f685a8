"""RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Adafactor against torch.optim, Lion against
optax.lion: the same float32 start, the same 100 seeded gradients, float32 rounding apart."""

import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import js
from js.optim import Adadelta, Adafactor, Adagrad, Adamax, Lion, NAdam, RAdam, RMSprop
from js.optim._arithmetic import rho_minus_k

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

STEPS = 100
# A matrix and a 3-d tensor (Adafactor's factored path, over the last two dimensions), a vector
# and a scalar (its unfactored path).
SHAPES = {"w": (5, 3), "k": (2, 3, 4), "b": (3,), "s": ()}
TORCH = {
    RMSprop: torch.optim.RMSprop,
    Adagrad: torch.optim.Adagrad,
    Adadelta: torch.optim.Adadelta,
    Adamax: torch.optim.Adamax,
    NAdam: torch.optim.NAdam,
    RAdam: torch.optim.RAdam,
    Adafactor: torch.optim.Adafactor,
}
CASES = [
    (RMSprop, {}),
    (RMSprop, {"lr": 0.01, "momentum": 0.9, "centered": True}),
    (RMSprop, {"alpha": 0.9, "momentum": 0.5, "weight_decay": 0.1}),
    (RMSprop, {"alpha": 0.3, "centered": True, "eps": 1e-3}),
    (Adagrad, {}),
    (Adagrad, {"lr": 0.1, "lr_decay": 0.01, "initial_accumulator_value": 0.5}),
    (Adagrad, {"weight_decay": 0.1, "eps": 1e-3}),
    (Adadelta, {}),
    (Adadelta, {"lr": 0.5, "rho": 0.5, "weight_decay": 0.1}),
    (Adamax, {}),
    (Adamax, {"lr": 0.01, "betas": (0.5, 0.9), "weight_decay": 0.1}),
    (NAdam, {}),
    (NAdam, {"lr": 0.01, "weight_decay": 0.1, "momentum_decay": 0.01}),
    (NAdam, {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    (RAdam, {}),
    (RAdam, {"lr": 0.01, "betas": (0.8, 0.99), "weight_decay": 0.1}),
    (RAdam, {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    (RAdam, {"betas": (0.9, 0.5)}),  # rho_inf = 3: never rectified
    (Adafactor, {}),
    (Adafactor, {"lr": 0.1, "weight_decay": 0.1, "d": 2.0}),
    (Adafactor, {"eps": (1e-3, 1e-2), "beta2_decay": -0.5}),
    (Adafactor, {"maximize": True}),
    *((cls, {"maximize": True, "weight_decay": 0.1}) for cls in (RMSprop, Adagrad, Adadelta)),
    *((cls, {"maximize": True, "weight_decay": 0.1}) for cls in (Adamax, NAdam, RAdam)),
]
IDS = [
    f"{cls.__name__}-{'-'.join(f'{k}={v}' for k, v in o.items()) or 'defaults'}" for cls, o in CASES
]
# One case per optimizer with every numeric option away from its default, for the js.jit and
# parameter-group tests.
RICH = {
    RMSprop: {"lr": 0.01, "alpha": 0.9, "momentum": 0.5, "weight_decay": 0.1, "centered": True},
    Adagrad: {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.1, "initial_accumulator_value": 0.5},
    Adadelta: {"lr": 0.5, "rho": 0.8, "eps": 1e-5, "weight_decay": 0.1},
    Adamax: {"lr": 0.01, "betas": (0.8, 0.99), "weight_decay": 0.1},
    NAdam: {"lr": 0.01, "betas": (0.8, 0.99), "weight_decay": 0.1, "momentum_decay": 0.01},
    RAdam: {"lr": 0.01, "betas": (0.8, 0.99), "weight_decay": 0.1, "decoupled_weight_decay": True},
    Adafactor: {"lr": 0.1, "beta2_decay": -0.6, "d": 2.0, "weight_decay": 0.1},
    Lion: {"lr": 0.01, "betas": (0.8, 0.95), "weight_decay": 0.1},
}


class Params(js.Module):
    def __init__(self, weights):
        for path, w in weights.items():
            setattr(self, path, js.Parameter(jnp.asarray(w)))


def start(seed=0):
    rng = np.random.default_rng(seed)
    return {path: rng.normal(size=shape).astype(np.float32) for path, shape in SHAPES.items()}


def gradients(seed=1, steps=STEPS):
    rng = np.random.default_rng(seed)
    return [
        {path: rng.normal(size=shape).astype(np.float32) for path, shape in SHAPES.items()}
        for _ in range(steps)
    ]


def groups_of(model, split):
    """``split``: [(paths, options), ...] -> js's group dicts."""
    named = dict(model.named_parameters())
    return [{"params": [(p, named[p]) for p in paths], **options} for paths, options in split]


def js_run(cls, options, weights, grads, *, jit=False, split=None, lr_at=None):
    """Final parameters after ``grads``; ``split`` gives parameter groups, ``lr_at = (i, lr)``
    writes every group's lr before step i."""
    model = Params(weights)
    opt = cls(groups_of(model, split) if split else model.parameters(), **options)
    traces = []

    def step(model, opt, g):
        traces.append(1)  # runs only while tracing
        opt.step(g)

    step = js.jit(step) if jit else step
    for i, g in enumerate(grads):
        if lr_at and i == lr_at[0]:
            for group in opt.param_groups:
                group["lr"] = lr_at[1]
        step(model, opt, {path: jnp.asarray(a) for path, a in g.items()})
    if jit:
        assert len(traces) == 1, "js.jit traced the step again"
    return {path: np.asarray(p.value) for path, p in model.named_parameters()}, opt


def torch_run(cls, options, weights, grads, *, split=None, lr_at=None):
    tensors = {path: torch.tensor(w) for path, w in weights.items()}
    if split:
        params = [{"params": [tensors[p] for p in paths], **o} for paths, o in split]
    else:
        params = list(tensors.values())
    extra = {} if cls is Adafactor else {"foreach": False}
    opt = TORCH[cls](params, **options, **extra)
    for i, step in enumerate(grads):
        if lr_at and i == lr_at[0]:
            for group in opt.param_groups:
                group["lr"] = lr_at[1]
        for path, tensor in tensors.items():
            tensor.grad = torch.tensor(step[path])
        opt.step()
    return {path: tensor.numpy() for path, tensor in tensors.items()}


def optax_lion_run(options, weights, grads, *, lr_at=None):
    b1, b2 = options.get("betas", (0.9, 0.99))
    lion = optax.inject_hyperparams(optax.lion)
    tx = lion(options.get("lr", 1e-4), b1, b2, weight_decay=options.get("weight_decay", 0.0))
    params = {path: jnp.asarray(w) for path, w in weights.items()}
    opt_state = tx.init(params)
    for i, step in enumerate(grads):
        if lr_at and i == lr_at[0]:
            opt_state.hyperparams["learning_rate"] = jnp.asarray(lr_at[1], jnp.float32)
        g = {path: jnp.asarray(a) for path, a in step.items()}
        updates, opt_state = tx.update(g, opt_state, params)
        params = optax.apply_updates(params, updates)
    return {path: np.asarray(p) for path, p in params.items()}


def assert_rounding_close(got, want, start_weights, rtol=1e-5):
    """Equal to ``rtol`` of the distance travelled: float32 rounding, compounded over 100 steps
    (the largest seen is 6e-6)."""
    for path in want:
        travelled = np.max(np.abs(want[path] - start_weights[path]))
        atol = rtol * travelled + 1e-7
        np.testing.assert_allclose(got[path], want[path], rtol=0, atol=atol, err_msg=path)


@pytest.mark.parametrize(("cls", "options"), CASES, ids=IDS)
def test_matches_torch(cls, options):
    weights, grads = start(), gradients()
    got, _ = js_run(cls, options, weights, grads)
    assert_rounding_close(got, torch_run(cls, options, weights, grads), weights)


@pytest.mark.parametrize(
    "options", [{}, {"lr": 0.01, "betas": (0.5, 0.9), "weight_decay": 0.1}], ids=["defaults", "wd"]
)
def test_lion_matches_optax(options):
    weights, grads = start(), gradients()
    got, _ = js_run(Lion, options, weights, grads)
    assert_rounding_close(got, optax_lion_run(options, weights, grads), weights, rtol=1e-6)


@pytest.mark.parametrize("cls", list(RICH), ids=lambda c: c.__name__)
def test_under_js_jit_with_an_lr_written_midway(cls):
    """One trace for all 100 steps, although lr is written at step 50 (torch: the same)."""
    weights, grads, lr_at = start(), gradients(), (50, RICH[cls]["lr"] / 2)
    got, _ = js_run(cls, RICH[cls], weights, grads, jit=True, lr_at=lr_at)
    if cls is Lion:
        want = optax_lion_run(RICH[cls], weights, grads, lr_at=lr_at)
        assert_rounding_close(got, want, weights, rtol=1e-6)
        return
    want = torch_run(cls, RICH[cls], weights, grads, lr_at=lr_at)
    assert_rounding_close(got, want, weights)


@pytest.mark.parametrize("cls", list(TORCH), ids=lambda c: c.__name__)
def test_two_parameter_groups(cls):
    """Group 0 (the factored shapes) with the rich options, group 1 (vector and scalar) with
    its own lr and no weight decay, defaults from the constructor."""
    lr = RICH[cls]["lr"]
    split = [(("w", "k"), {"weight_decay": 0.1}), (("b", "s"), {"lr": lr * 3, "weight_decay": 0.0})]
    options = {k: v for k, v in RICH[cls].items() if k != "weight_decay"}
    weights, grads = start(), gradients()
    got, opt = js_run(cls, options, weights, grads, split=split)
    want = torch_run(cls, options, weights, grads, split=split)
    assert_rounding_close(got, want, weights)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert opt.param_groups[1]["lr"] == lr * 3


def test_radam_rho_t_to_float32_rounding():
    """rho_t = rho_inf - 2 t b2**t / (1 - b2**t) cancels in float32 (0.03 wrong near t = 1000
    for b2 = 0.999); the series form stays within float32 rounding of the double value."""
    t = np.arange(1, 30001, dtype=np.float64)
    radam = RAdam(Params(start()).parameters())
    for b2 in (0.9999, 0.999, 0.99, 0.9, 0.8):
        h = radam.scalars({"betas": (0.9, b2), "eps": 1e-8, "weight_decay": 0.0})
        rho_inf = 2 / (1 - b2) - 1
        exact = rho_inf - 2 * t * b2**t / (1 - b2**t)
        got = np.float32(h["rho_k"]) + np.asarray(
            rho_minus_k(jnp.asarray(t, jnp.float32), jnp.float32(h["neg_log_b2"]))
        )
        np.testing.assert_allclose(got, exact, rtol=4e-7, atol=2e-6, err_msg=f"b2={b2}")


def test_state_keys_and_shapes():
    """torch's state names: Adafactor's factors, NAdam's scalar mu_product, no momentum buffer
    for RMSprop built without momentum (and giving it momentum later is refused)."""
    weights, grads = start(), gradients(steps=3)
    _, opt = js_run(Adafactor, {}, weights, grads)
    shapes = {k: v.shape for k, v in opt.state_dict().items() if k.startswith("adafactor.")}
    assert shapes == {
        "adafactor.row_var.w": (5, 1),
        "adafactor.col_var.w": (1, 3),
        "adafactor.row_var.k": (2, 3, 1),
        "adafactor.col_var.k": (2, 1, 4),
        "adafactor.variance.b": (3,),
        "adafactor.variance.s": (),
    }
    _, opt = js_run(NAdam, {}, weights, grads)
    mu_product = opt.state_dict()["nadam.mu_product.w"]
    mus = [0.9 * (1 - 0.5 * 0.96 ** (t * 4e-3)) for t in (1, 2, 3)]
    assert mu_product.shape == () and mu_product.dtype == np.float32
    np.testing.assert_allclose(mu_product, np.prod(mus), rtol=1e-6)
    _, opt = js_run(RMSprop, {}, weights, grads)
    assert [k for k in opt.state_dict() if k.endswith(".w")] == ["rmsprop.square_avg.w"]
    with pytest.raises(ValueError, match=r"momentum=0.9 changes the state the optimizer keeps"):
        opt.param_groups[0]["momentum"] = 0.9
    _, opt = js_run(RMSprop, {"momentum": 0.9, "centered": True}, weights, grads)
    assert {k.split(".")[1] for k in opt.state_dict() if k.startswith("rmsprop.")} == {
        "square_avg",
        "grad_avg",
        "momentum_buffer",
    }


def test_adafactor_eps1_none_survives_a_state_dict():
    weights, grads = start(), gradients(steps=4)
    got, opt = js_run(Adafactor, {}, weights, grads)
    saved = opt.state_dict()
    _, other = js_run(Adafactor, {"eps": (1e-3, 1e-2)}, weights, grads[:1])
    other.load_state_dict(saved)
    model = Params(got)
    fresh = Adafactor(model.parameters())
    fresh.load_state_dict(saved)
    for step in gradients(seed=2, steps=2):
        fresh.step({path: jnp.asarray(a) for path, a in step.items()})
    want = torch_run(Adafactor, {}, weights, grads + gradients(seed=2, steps=2))
    assert_rounding_close(
        {p: np.asarray(v.value) for p, v in model.named_parameters()}, want, weights
    )


def check_options(cls, **options):
    cls(Params(start()).parameters(), **options)


@pytest.mark.parametrize(
    ("cls", "options", "error", "message"),
    [
        (
            RMSprop,
            {"alpha": 1.5},
            ValueError,
            r"alpha must be a number in \[0, 1\], got 1.5",
        ),
        (
            RMSprop,
            {"momentum": -0.1},
            ValueError,
            r"momentum must be a number >= 0, got -0.1",
        ),
        (
            RMSprop,
            {"eps": "1e-8"},
            TypeError,
            r"eps must be a number >= 0, got '1e-8' \(a str\)",
        ),
        (RMSprop, {"centered": 1}, TypeError, r"centered must be True or False, got 1"),
        (
            Adagrad,
            {"lr_decay": -1},
            ValueError,
            r"lr_decay must be a number >= 0, got -1",
        ),
        (
            Adagrad,
            {"initial_accumulator_value": -0.5},
            ValueError,
            r"initial_accumulator_value must",
        ),
        (
            Adadelta,
            {"rho": 1.1},
            ValueError,
            r"rho must be a number in \[0, 1\], got 1.1",
        ),
        (Adadelta, {"weight_decay": True}, TypeError, r"weight_decay must be a number"),
        (
            Adamax,
            {"betas": (0.9, 1.0)},
            ValueError,
            r"betas\[1\] must be a number in \[0, 1\), got 1.0",
        ),
        (
            Adamax,
            {"betas": 0.9},
            TypeError,
            r"betas must be a pair of numbers in \[0, 1\), got 0.9",
        ),
        (
            NAdam,
            {"momentum_decay": -1e-3},
            ValueError,
            r"momentum_decay must be a number >= 0",
        ),
        (
            NAdam,
            {"decoupled_weight_decay": None},
            TypeError,
            r"decoupled_weight_decay must be True or False",
        ),
        (
            RAdam,
            {"betas": (-0.1, 0.9)},
            ValueError,
            r"betas\[0\] must be a number in \[0, 1\)",
        ),
        (RAdam, {"eps": -1.0}, ValueError, r"eps must be a number >= 0, got -1.0"),
        (
            Adafactor,
            {"beta2_decay": 0.5},
            ValueError,
            r"beta2_decay must be a number <= 0, got 0.5",
        ),
        (
            Adafactor,
            {"beta2_decay": "x"},
            TypeError,
            r"beta2_decay must be a number <= 0, got 'x'",
        ),
        (
            Adafactor,
            {"eps": 1e-3},
            TypeError,
            r"eps must be a pair of numbers >= 0, got 0.001 \(a float\)",
        ),
        (
            Adafactor,
            {"eps": (-1.0, 1e-3)},
            ValueError,
            r"eps\[0\] must be a number >= 0, got -1.0",
        ),
        (Adafactor, {"d": 0.5}, ValueError, r"d must be a number >= 1, got 0.5"),
        (Adafactor, {"maximize": "yes"}, TypeError, r"maximize must be True or False"),
        (RAdam, {"maximize": 0}, TypeError, r"RAdam: maximize must be True or False, got 0"),
        (Lion, {"lr": -1.0}, ValueError, r"Lion: lr must be a number >= 0, got -1.0"),
        (
            Lion,
            {"betas": (0.9, 1.5)},
            ValueError,
            r"betas\[1\] must be a number in \[0, 1\), got 1.5",
        ),
        (
            Lion,
            {"weight_decay": -0.1},
            ValueError,
            r"weight_decay must be a number >= 0, got -0.1",
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_argument_errors(cls, options, error, message):
    with pytest.raises(error, match=message):
        check_options(cls, **options)


SHARDED = """
import sys
import jax, numpy as np
from jax.sharding import AxisType, PartitionSpec as P
from optim_models import MLP, batch, mse
import js
from js.optim import Adadelta, Adafactor, Adagrad, Adamax, Lion, NAdam, RAdam, RMSprop

mesh = jax.make_mesh((2,), ("data",), axis_types=(AxisType.Auto,))
rules = [("hidden.weight", P(None, "data")), ("out.weight", P("data", None))]
builds = [
    (RMSprop, {"momentum": 0.9, "centered": True}), (Adagrad, {}), (Adadelta, {}), (Adamax, {}),
    (NAdam, {}), (RAdam, {}), (Adafactor, {}), (Lion, {"lr": 1e-3}),
]
x, y = batch()
for cls, options in [b for b in builds if b[0].__name__ in sys.argv[1:]]:
    model, reference = js.shard(MLP(), mesh, rules), MLP()
    opt, ref_opt = cls(model.parameters(), **options), cls(reference.parameters(), **options)
    params = dict(model.named_parameters())
    for key, variable in zip(opt._keys, opt._state, strict=True):
        array, param = variable[...], params[key.split(".", 2)[2]][...]
        want = param.sharding if array.shape == param.shape else None  # else replicated
        assert array.sharding == want or (want is None and array.sharding.spec == P()), key
    step = js.jit(lambda m, o, x, y: o.step(js.value_and_grad(mse)(m, x, y)[1]))
    for _ in range(3):
        step(model, opt, *js.shard_batch((x, y), mesh))
        step(reference, ref_opt, x, y)
    opt.step(js.value_and_grad(mse)(model, *js.shard_batch((x, y), mesh))[1])  # eagerly too
    ref_opt.step(js.value_and_grad(mse)(reference, x, y)[1])
    for (path, a), b in zip(model.named_parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(a[...], b[...], rtol=1e-5, atol=1e-6, err_msg=cls.__name__)
        assert a[...].sharding == params[path][...].sharding, path
print("ok")
"""


def run_sharded(*names):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flags = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    env["XLA_FLAGS"] = flags.strip()
    child = subprocess.run(
        [sys.executable, "-W", "error", "-c", SHARDED, *names],
        cwd=Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    assert child.stdout.strip() == "ok"


@pytest.mark.process
@pytest.mark.slow
def test_sharded_parameters():
    """Adafactor's factors (not shaped like their parameter) are replicated, its variances on
    their parameter's sharding; steps on two CPU devices equal unsharded ones."""
    run_sharded("Adafactor")


@pytest.mark.slow
@pytest.mark.process
def test_sharded_parameters_every_optimizer():
    """As above for all eight (NAdam's scalar mu_product replicated too): ~1 min."""
    run_sharded("RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "Adafactor", "Lion")


def test_a_bad_write_is_refused_before_anything_changes():
    opt = RMSprop(Params(start()).parameters())
    with pytest.raises(ValueError, match=r"RMSprop param_groups\[0\]: alpha must be a number in"):
        opt.param_groups[0]["alpha"] = 2.0
    assert opt.param_groups[0]["alpha"] == 0.99
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['centered'\] is a static option"):
        opt.param_groups[0]["centered"] = True
