"""RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Adafactor against torch.optim, Lion against
optax.lion: the same float32 start, the same 100 seeded gradients, float32 rounding apart."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from js.optim._more import (
    Adadelta,
    Adafactor,
    Adagrad,
    Adamax,
    Lion,
    NAdam,
    RAdam,
    RMSprop,
    _rho_minus_k,
)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

STEPS = 100
# A matrix and a 3-d tensor (Adafactor's factored path, over the last two dimensions), a vector
# and a scalar (its unfactored path).
SHAPES = {"w": (5, 3), "k": (2, 3, 4), "b": (3,), "s": ()}

CASES = [
    (RMSprop, torch.optim.RMSprop, {}),
    (RMSprop, torch.optim.RMSprop, {"lr": 0.01, "momentum": 0.9, "centered": True}),
    (RMSprop, torch.optim.RMSprop, {"alpha": 0.9, "momentum": 0.5, "weight_decay": 0.1}),
    (RMSprop, torch.optim.RMSprop, {"alpha": 0.3, "centered": True, "eps": 1e-3}),
    (Adagrad, torch.optim.Adagrad, {}),
    (Adagrad, torch.optim.Adagrad, {"lr": 0.1, "lr_decay": 0.01, "initial_accumulator_value": 0.5}),
    (Adagrad, torch.optim.Adagrad, {"weight_decay": 0.1, "eps": 1e-3}),
    (Adadelta, torch.optim.Adadelta, {}),
    (Adadelta, torch.optim.Adadelta, {"lr": 0.5, "rho": 0.5, "weight_decay": 0.1}),
    (Adamax, torch.optim.Adamax, {}),
    (Adamax, torch.optim.Adamax, {"lr": 0.01, "betas": (0.5, 0.9), "weight_decay": 0.1}),
    (NAdam, torch.optim.NAdam, {}),
    (NAdam, torch.optim.NAdam, {"lr": 0.01, "weight_decay": 0.1, "momentum_decay": 0.01}),
    (NAdam, torch.optim.NAdam, {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    (RAdam, torch.optim.RAdam, {}),
    (RAdam, torch.optim.RAdam, {"lr": 0.01, "betas": (0.8, 0.99), "weight_decay": 0.1}),
    (RAdam, torch.optim.RAdam, {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    (RAdam, torch.optim.RAdam, {"betas": (0.9, 0.5)}),  # rho_inf = 3: never rectified
    (Adafactor, torch.optim.Adafactor, {}),
    (Adafactor, torch.optim.Adafactor, {"lr": 0.1, "weight_decay": 0.1, "d": 2.0}),
    (Adafactor, torch.optim.Adafactor, {"eps": (1e-3, 1e-2), "beta2_decay": -0.5}),
    (Adafactor, torch.optim.Adafactor, {"maximize": True}),
]
IDS = [
    f"{cls.__name__}-{'-'.join(f'{k}={v}' for k, v in o.items()) or 'defaults'}"
    for cls, _, o in CASES
]


def start(seed=0):
    rng = np.random.default_rng(seed)
    return {path: rng.normal(size=shape).astype(np.float32) for path, shape in SHAPES.items()}


def gradients(seed=1, steps=STEPS):
    rng = np.random.default_rng(seed)
    return [
        {path: rng.normal(size=shape).astype(np.float32) for path, shape in SHAPES.items()}
        for _ in range(steps)
    ]


def js_run(cls, options, weights, grads):
    """The per-parameter math over all steps in one jax.lax.scan (the shell's stand-in)."""
    opt = cls(None, **options)
    group = dict(opt.defaults)
    opt.check(group)
    h = {k: jnp.asarray(v, jnp.float32) for k, v in opt.scalars(group).items()}
    h["lr"] = jnp.asarray(group["lr"], jnp.float32)
    params = {path: jnp.asarray(w) for path, w in weights.items()}
    state = {path: opt.init(p, group) for path, p in params.items()}
    stacked = {path: jnp.stack([step[path] for step in grads]) for path in params}

    def body(carry, xs):
        params, state = carry
        t, g = xs
        for path in params:
            params[path], state[path] = opt.update(params[path], g[path], state[path], h, t, group)
        return (params, state), None

    steps = jnp.arange(1, len(grads) + 1, dtype=jnp.int32)
    (params, state), _ = jax.jit(lambda c, xs: jax.lax.scan(body, c, xs))(
        (params, state), (steps, stacked)
    )
    return {path: np.asarray(p) for path, p in params.items()}, state


def torch_run(torch_cls, options, weights, grads):
    tensors = {path: torch.tensor(w) for path, w in weights.items()}
    extra = {} if torch_cls is torch.optim.Adafactor else {"foreach": False}
    opt = torch_cls(list(tensors.values()), **options, **extra)
    for step in grads:
        for path, tensor in tensors.items():
            tensor.grad = torch.tensor(step[path])
        opt.step()
    return {path: tensor.numpy() for path, tensor in tensors.items()}


def assert_rounding_close(got, want, start_weights, rtol):
    """Equal to ``rtol`` relative to the distance travelled (float32 rounding over 100 steps)."""
    for path in want:
        travelled = np.max(np.abs(want[path] - start_weights[path]))
        np.testing.assert_allclose(
            got[path], want[path], rtol=0, atol=rtol * travelled + 1e-7, err_msg=path
        )


@pytest.mark.parametrize(("cls", "torch_cls", "options"), CASES, ids=IDS)
def test_matches_torch(cls, torch_cls, options):
    weights, grads = start(), gradients()
    got, _ = js_run(cls, options, weights, grads)
    want = torch_run(torch_cls, options, weights, grads)
    assert_rounding_close(got, want, weights, rtol=1e-5)


@pytest.mark.parametrize(
    "options", [{}, {"lr": 0.01, "betas": (0.5, 0.9), "weight_decay": 0.1}], ids=["defaults", "wd"]
)
def test_lion_matches_optax(options):
    weights, grads = start(), gradients()
    got, _ = js_run(Lion, options, weights, grads)
    b1, b2 = options.get("betas", (0.9, 0.99))
    tx = optax.lion(options.get("lr", 1e-4), b1, b2, weight_decay=options.get("weight_decay", 0.0))
    params = {path: jnp.asarray(w) for path, w in weights.items()}
    opt_state = tx.init(params)
    for step in grads:
        g = {path: jnp.asarray(a) for path, a in step.items()}
        updates, opt_state = tx.update(g, opt_state, params)
        params = optax.apply_updates(params, updates)
    assert_rounding_close(got, {k: np.asarray(v) for k, v in params.items()}, weights, rtol=1e-6)


def test_radam_rho_t_to_float32_rounding():
    """rho_t = rho_inf - 2 t b2**t / (1 - b2**t) cancels in float32 (0.03 wrong near t = 1000
    for b2 = 0.999); the series form stays within float32 rounding of the double value."""
    t = np.arange(1, 30001, dtype=np.float64)
    for b2 in (0.9999, 0.999, 0.99, 0.9, 0.8):
        h = RAdam(None).scalars({"betas": (0.9, b2), "eps": 1e-8, "weight_decay": 0.0})
        rho_inf = 2 / (1 - b2) - 1
        exact = rho_inf - 2 * t * b2**t / (1 - b2**t)
        got = np.float32(h["rho_k"]) + np.asarray(
            _rho_minus_k(jnp.asarray(t, jnp.float32), jnp.float32(h["neg_log_b2"]))
        )
        np.testing.assert_allclose(got, exact, rtol=4e-7, atol=2e-6, err_msg=f"b2={b2}")


def test_state_fields():
    """torch's state names and shapes: Adafactor's factors, NAdam's scalar mu_product, no
    momentum buffer for RMSprop built without momentum."""
    weights, grads = start(), gradients(steps=3)
    _, state = js_run(Adafactor, {}, weights, grads)
    assert {k: v.shape for k, v in state["k"].items()} == {
        "row_var": (2, 3, 1),
        "col_var": (2, 1, 4),
    }
    assert {k: v.shape for k, v in state["b"].items()} == {"variance": (3,)}
    _, state = js_run(NAdam, {}, weights, grads)
    mus = [0.9 * (1 - 0.5 * 0.96 ** (t * 4e-3)) for t in (1, 2, 3)]
    np.testing.assert_allclose(state["w"]["mu_product"], np.prod(mus), rtol=1e-6)
    assert state["w"]["mu_product"].dtype == jnp.float32 and state["w"]["mu_product"].shape == ()
    _, state = js_run(RMSprop, {}, weights, grads)
    assert set(state["w"]) == {"square_avg"}
    _, state = js_run(RMSprop, {"momentum": 0.9, "centered": True}, weights, grads)
    assert set(state["w"]) == {"square_avg", "grad_avg", "momentum_buffer"}


def check_options(cls, **options):
    """Build ``cls`` with ``options`` over its defaults, as the shell does for each group."""
    opt = cls(None)
    opt.check(dict(opt.defaults) | options)


@pytest.mark.parametrize(
    ("cls", "options", "error", "message"),
    [
        (
            RMSprop,
            {"alpha": 1.5},
            ValueError,
            r"alpha must be a number in \[0.0, 1.0\], got 1.5",
        ),
        (
            RMSprop,
            {"momentum": -0.1},
            ValueError,
            r"momentum must be a number >= 0.0, got -0.1",
        ),
        (
            RMSprop,
            {"eps": "1e-8"},
            TypeError,
            r"eps must be a number >= 0.0, got '1e-8' \(a str\)",
        ),
        (RMSprop, {"centered": 1}, TypeError, r"centered must be True or False, got 1"),
        (
            Adagrad,
            {"lr_decay": -1},
            ValueError,
            r"lr_decay must be a number >= 0.0, got -1",
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
            r"rho must be a number in \[0.0, 1.0\], got 1.1",
        ),
        (Adadelta, {"weight_decay": True}, TypeError, r"weight_decay must be a number"),
        (
            Adamax,
            {"betas": (0.9, 1.0)},
            ValueError,
            r"betas\[1\] must be a number in \[0.0, 1.0\), got 1.0",
        ),
        (Adamax, {"betas": 0.9}, TypeError, r"betas must be a pair \(b1, b2\), got 0.9"),
        (
            NAdam,
            {"momentum_decay": -1e-3},
            ValueError,
            r"momentum_decay must be a number >= 0.0",
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
            r"betas\[0\] must be a number in \[0.0, 1.0\)",
        ),
        (RAdam, {"eps": -1.0}, ValueError, r"eps must be a number >= 0.0, got -1.0"),
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
            r"eps must be a pair \(eps1, eps2\).*Fix: eps=\(None, 1e-3\)",
        ),
        (
            Adafactor,
            {"eps": (-1.0, 1e-3)},
            ValueError,
            r"eps\[0\] must be a number >= 0.0, got -1.0",
        ),
        (Adafactor, {"d": 0.5}, ValueError, r"d must be a number >= 1.0, got 0.5"),
        (Adafactor, {"maximize": "yes"}, TypeError, r"maximize must be True or False"),
        (
            Lion,
            {"betas": (0.9, 1.5)},
            ValueError,
            r"betas\[1\] must be a number in \[0.0, 1.0\), got 1.5",
        ),
        (
            Lion,
            {"weight_decay": -0.1},
            ValueError,
            r"weight_decay must be a number >= 0.0, got -0.1",
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_argument_errors(cls, options, error, message):
    with pytest.raises(error, match=message):
        check_options(cls, **options)
