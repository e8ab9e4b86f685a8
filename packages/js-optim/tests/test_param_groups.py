"""Parameter groups (torch's param_groups), options written between steps without recompiling,
their state dict entries, freezing with requires_grad, the param_groups helper, Optax."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optim_models import MLP, Linear, batch, mse

import js
from js.optim import SGD, Adam, AdamW, Optax, Optimizer, accumulate, param_groups
from js.optim._program import update_program

torch = pytest.importorskip("torch")

STEPS = 50
HIDDEN, OUT = ("hidden.weight", "hidden.bias"), ("out.weight", "out.bias")


def split(model):
    """Two groups of (path, Parameter) pairs: the hidden layer and the output layer."""
    named = dict(model.named_parameters())
    return [(p, named[p]) for p in HIDDEN], [(p, named[p]) for p in OUT]


def gradients(model, seed=0, steps=STEPS):
    rng = np.random.default_rng(seed)
    shapes = {path: p.value.shape for path, p in model.named_parameters()}
    return [
        {path: rng.normal(size=shape).astype(np.float32) for path, shape in shapes.items()}
        for _ in range(steps)
    ]


def params_of(model):
    return {path: np.array(p.value) for path, p in model.named_parameters()}


def torch_groups(model, options):
    """torch tensors of the model's values and torch's groups over them."""
    tensors = {path: torch.tensor(np.array(p.value)) for path, p in model.named_parameters()}
    groups = [
        {"params": [tensors[p] for p in paths], **extra}
        for paths, extra in zip((HIDDEN, OUT), options, strict=True)
    ]
    return tensors, groups


CASES = [
    (
        AdamW,
        torch.optim.AdamW,
        {"lr": 3e-3},
        [{"weight_decay": 0.1}, {"lr": 1e-2, "weight_decay": 0.0}],
    ),
    (
        Adam,
        torch.optim.Adam,
        {"lr": 1e-2},
        [{"weight_decay": 0.1, "betas": (0.8, 0.99)}, {"eps": 1e-6}],
    ),
    (
        SGD,
        torch.optim.SGD,
        {"lr": 0.05, "momentum": 0.9},
        [{"nesterov": True}, {"lr": 0.01, "dampening": 0.5, "weight_decay": 0.1}],
    ),
]
IDS = [case[0].__name__ for case in CASES]

# option writes between steps: (step, group, option, value), the same on both sides
WRITES = {
    AdamW: [(10, 0, "lr", 1e-3), (20, 0, "weight_decay", 0.05), (30, 1, "betas", (0.5, 0.9))],
    Adam: [(10, 1, "lr", 3e-3), (25, 0, "eps", 1e-4), (30, 0, "weight_decay", 0.02)],
    SGD: [(10, 0, "lr", 0.02), (20, 1, "momentum", 0.5), (30, 1, "weight_decay", 0.01)],
}
# weight decay written from or to 0: the term enters or leaves the program (one more trace)
TOGGLES = {
    AdamW: [(10, 1, "weight_decay", 0.05), (30, 0, "weight_decay", 0.0)],
    Adam: [(10, 1, "weight_decay", 0.05)],
    SGD: [(10, 0, "weight_decay", 0.01), (20, 1, "dampening", 0.0)],
}


def run_both(cls, torch_cls, defaults, options, compiled, writes=()):
    """The same groups, gradients and option writes in js and torch: final parameters and
    the js optimizer, with the traces counted."""
    model = MLP()
    grads = gradients(model)
    tensors, groups = torch_groups(model, options)
    theirs = torch_cls(groups, **defaults)
    hidden, out = split(model)
    opt = cls(
        [{"params": hidden, **options[0]}, {"params": out, **options[1]}],
        **defaults,
    )
    traces = []

    def step(model, opt, g):
        traces.append(1)  # runs only while tracing
        opt.step(g)

    run = js.jit(step) if compiled else step
    for t, g in enumerate(grads):
        for at, index, option, value in writes:
            if at == t:
                opt.param_groups[index][option] = value
                theirs.param_groups[index][option] = value
        for path, tensor in tensors.items():
            tensor.grad = torch.tensor(g[path])
        theirs.step()
        run(model, opt, {path: jnp.asarray(a) for path, a in g.items()})
    expected = {path: tensor.numpy() for path, tensor in tensors.items()}
    return params_of(model), expected, opt, traces


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("cls, torch_cls, defaults, options", CASES, ids=IDS)
def test_groups_match_torch_with_options_written_between_steps(
    cls, torch_cls, defaults, options, compiled
):
    ours, theirs, opt, traces = run_both(cls, torch_cls, defaults, options, compiled, WRITES[cls])
    for path in theirs:
        np.testing.assert_allclose(ours[path], theirs[path], rtol=1e-5, atol=2e-6, err_msg=path)
    if compiled:
        assert len(traces) == 1  # three option writes, one trace
    for _, index, option, value in WRITES[cls]:
        assert opt.param_groups[index][option] == value
    assert int(opt.step_count) == STEPS


@pytest.mark.parametrize("cls, torch_cls, defaults, options", CASES, ids=IDS)
def test_weight_decay_written_from_or_to_zero_retraces_once_and_matches_torch(
    cls, torch_cls, defaults, options
):
    ours, theirs, opt, traces = run_both(cls, torch_cls, defaults, options, True, TOGGLES[cls])
    for path in theirs:
        np.testing.assert_allclose(ours[path], theirs[path], rtol=1e-5, atol=2e-6, err_msg=path)
    assert len(traces) == 1 + len(TOGGLES[cls])


def test_two_group_adamw_without_writes_matches_torch():
    ours, theirs, _, _ = run_both(*CASES[0], compiled=True)
    for path in theirs:
        np.testing.assert_allclose(ours[path], theirs[path], rtol=1e-5, atol=2e-6, err_msg=path)
    model = MLP()  # group options differ, so the groups moved differently from one group's
    alone = AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    for g in gradients(model):
        alone.step({k: jnp.asarray(v) for k, v in g.items()})
    assert not np.allclose(params_of(model)["out.weight"], ours["out.weight"])


def test_the_eager_update_compiles_once_across_option_writes():
    model = MLP()
    opt = AdamW([{"params": split(model)[0]}, {"params": split(model)[1], "lr": 0.1}])
    grads = {k: jnp.asarray(v) for k, v in gradients(model, steps=1)[0].items()}
    opt.step(grads)
    size = update_program._cache_size()
    for lr in (1e-3, 2e-3, 5e-4):
        opt.param_groups[0]["lr"] = lr
        opt.param_groups[1]["betas"] = (0.8, lr)
        opt.param_groups[1]["weight_decay"] = lr
        opt.step(grads)
    assert update_program._cache_size() == size


def test_a_written_lr_is_used_by_the_next_step_exactly():
    model = Linear(1, 1)
    model.weight.value = jnp.zeros((1, 1))
    opt = SGD(model.parameters(), lr=1.0)
    grads = {"weight": jnp.ones((1, 1)), "bias": jnp.zeros(1)}
    step = js.jit(lambda m, o, g: o.step(g))
    step(model, opt, grads)
    opt.param_groups[0]["lr"] = 10.0
    opt.param_groups[0]["initial_lr"] = 1.0  # an extra key (a scheduler's): kept on the host
    step(model, opt, grads)
    assert float(model.weight.value[0, 0]) == -11.0
    assert opt.param_groups[0]["initial_lr"] == 1.0 and opt.lr == 10.0
    assert "param_groups.0.initial_lr" not in opt.state_dict()


def test_param_groups_look_like_torchs():
    model = MLP()
    hidden, out = split(model)
    opt = Adam([{"params": hidden}, {"params": out, "lr": 0.1}], lr=0.01, weight_decay=0.5)
    first, second = opt.param_groups
    assert first["params"] == [p for _, p in hidden] and first.paths == HIDDEN
    assert dict(first) == {
        "params": first["params"],
        "lr": 0.01,
        "betas": (0.9, 0.999),
        "eps": 1e-8,
        "weight_decay": 0.5,
        "amsgrad": False,
        "maximize": False,
    }
    assert second["lr"] == 0.1 and opt.defaults["lr"] == 0.01
    assert opt.params.paths == HIDDEN + OUT
    assert "2 groups" in repr(opt)


# -- refused groups and writes ----------------------------------------------------------------


def test_groups_are_checked_before_anything_is_built():
    model = MLP()
    hidden, out = split(model)
    with pytest.raises(
        ValueError, match=r"parameter 'hidden.weight' is in param_groups\[0\] and param_groups\[1\]"
    ):
        Adam([{"params": hidden}, {"params": hidden[:1] + out}])
    with pytest.raises(
        ValueError,
        match=r"unknown option 'momentum' in param_groups\[1\]; Adam's options are lr, betas",
    ):
        Adam([{"params": hidden}, {"params": out, "momentum": 0.9}])
    with pytest.raises(ValueError, match=r"Adam: param_groups\[1\] is empty; nothing to optimize"):
        Adam([{"params": hidden}, {"params": []}])
    with pytest.raises(ValueError, match=r"Adam: param_groups\[0\] has no 'params'"):
        Adam([{"lr": 0.1}])
    with pytest.raises(
        ValueError,
        match=r"Adam param_groups\[1\]: betas\[1\] must be a number in \[0, 1\), got 1.0",
    ):
        Adam([{"params": hidden}, {"params": out, "betas": (0.9, 1.0)}])
    with pytest.raises(TypeError, match=r"param_groups\[0\]\['params'\] must be the selection"):
        Adam([{"params": [p.value for _, p in hidden]}, {"params": out}])  # arrays, not Parameters
    # Two models' parameters under one path build (torch's submodule groups do that), and are
    # refused at the step: one model's gradients hold one of each path (test_group_forms.py).
    opt = Adam([{"params": out}, {"params": split(MLP(seed=3))[1]}])
    with pytest.raises(ValueError, match="no way to give every gradient to one parameter"):
        opt.step({"out.weight": jnp.ones((8, 2)), "out.bias": jnp.ones(2)})


def test_writes_are_checked_and_refused_ones_change_nothing():
    model = MLP()
    hidden, out = split(model)
    opt = SGD([{"params": hidden, "nesterov": True}, {"params": out}], lr=0.1, momentum=0.9)
    before = opt.state_dict()
    with pytest.raises(ValueError, match=r"SGD param_groups\[1\]: lr must be a number >= 0, got"):
        opt.param_groups[1]["lr"] = -1
    with pytest.raises(
        ValueError,
        match=r"param_groups\[0\]\['nesterov'\] is a static option .* Fix: build a new "
        r"optimizer with nesterov=False",
    ):
        opt.param_groups[0]["nesterov"] = False
    opt.param_groups[0]["nesterov"] = True  # the same value: nothing to refuse
    with pytest.raises(ValueError, match=r"nesterov=True requires momentum > 0"):
        opt.param_groups[0]["momentum"] = 0.0
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\] cannot be replaced"):
        opt.param_groups[0]["params"] = hidden
    with pytest.raises(KeyError, match="cannot be deleted"):
        del opt.param_groups[0]["lr"]
    plain = SGD(model.parameters(), lr=0.1)  # built without momentum: no buffer to grow
    with pytest.raises(
        ValueError, match=r"momentum=0.9 changes the state .* \(fields \[\] -> \['trace'\]\)"
    ):
        plain.param_groups[0]["momentum"] = 0.9
    after = opt.state_dict()
    assert after.keys() == before.keys()
    for key, value in before.items():
        np.testing.assert_array_equal(after[key], value)
    assert opt.param_groups[1]["lr"] == 0.1


def test_a_schedule_lr_is_static_and_a_float_lr_stays_a_float():
    model = MLP()
    schedule = optax.linear_schedule(0.1, 0.0, 10)
    opt = SGD(model.parameters(), lr=schedule)
    with pytest.raises(
        ValueError,
        match=r"param_groups\[0\]\['lr'\] = 0.01 refused: the group was built with a schedule lr",
    ):
        opt.param_groups[0]["lr"] = 0.01
    opt.param_groups[0]["lr"] = schedule  # itself: nothing changes
    floating = SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="built with a float lr"):
        floating.param_groups[0]["lr"] = schedule


def test_the_old_call_form_is_refused_with_the_fix():
    model = MLP()
    with pytest.raises(
        TypeError,
        match=r"Optimizer\(params, tx, \.\.\.\) was js-optim 0.1's way .* Fix: "
        r"js.optim.Optax\(params, tx, key=\.\.\.\)",
    ):
        Optimizer(model.parameters(), optax.sgd(0.1))
    with pytest.raises(TypeError, match=r"js.optim.Optax\(params, tx, key=\.\.\.\)"):
        Optimizer(model.parameters(), optax.sgd(0.1), (("lr", 0.1),), key=("sgd", 0.1))
    with pytest.raises(TypeError, match="the Optimizer base class has no update rule"):
        Optimizer(model.parameters(), {"lr": 0.1})


# -- state dicts ------------------------------------------------------------------------------


def test_state_dict_round_trip_restores_group_options():
    model, (x, y) = MLP(), batch()
    hidden, out = split(model)
    opt = AdamW([{"params": hidden}, {"params": out, "weight_decay": 0.0}], lr=0.01)

    @js.jit
    def step(model, opt, x, y):
        loss, grads = js.value_and_grad(mse)(model, x, y)
        opt.step(grads)
        return loss

    step(model, opt, x, y)
    opt.param_groups[0]["lr"] = 0.003
    opt.param_groups[1]["betas"] = (0.5, 0.75)
    saved_model, saved = model.state_dict(), opt.state_dict()
    assert (
        saved["param_groups.0.lr"].dtype == np.float64
        and float(saved["param_groups.0.lr"]) == 0.003
    )
    assert saved["param_groups.1.betas"].tolist() == [0.5, 0.75]
    assert float(saved["param_groups.1.weight_decay"]) == 0.0
    expected = [float(step(model, opt, x, y)) for _ in range(3)]

    resumed = MLP(seed=5)
    resumed.load_state_dict(saved_model)
    h, o = split(resumed)
    resumed_opt = AdamW([{"params": h}, {"params": o, "weight_decay": 0.0}], lr=0.01)
    resumed_opt.load_state_dict(saved)
    assert resumed_opt.param_groups[0]["lr"] == 0.003
    assert resumed_opt.param_groups[1]["betas"] == (0.5, 0.75)
    assert [float(step(resumed, resumed_opt, x, y)) for _ in range(3)] == expected
    for path, value in params_of(model).items():
        np.testing.assert_array_equal(params_of(resumed)[path], value)


def test_a_state_dict_of_js_optim_0_1_still_loads():
    model = MLP()
    opt = Adam(model.parameters(), lr=0.01)
    opt.step({k: jnp.ones_like(p.value) for k, p in model.named_parameters()})
    state = {k: v for k, v in opt.state_dict().items() if not k.startswith("param_groups.")}
    state["adam.count"] = np.array(1, np.int32)  # the 0.1 layout: optax's counter, no options
    fresh = Adam(MLP().parameters(), lr=0.02)
    fresh.load_state_dict(state)
    assert int(fresh.step_count) == 1 and fresh.param_groups[0]["lr"] == 0.02
    np.testing.assert_array_equal(fresh.state_dict()["adam.mu.out.bias"], state["adam.mu.out.bias"])


# -- freezing ---------------------------------------------------------------------------------


def test_frozen_parameters_get_no_state_and_are_never_changed():
    model, (x, y) = MLP(), batch()
    model.hidden.requires_grad_(False)
    opt = Adam(model.parameters(), lr=0.1, weight_decay=0.1)
    assert opt.frozen == list(HIDDEN)
    assert not any("hidden" in key for key in opt.state_dict())
    before = params_of(model)
    step = js.jit(lambda m, o, x, y: o.step(js.value_and_grad(mse)(m, x, y)[1]))
    step(model, opt, x, y)
    grads = js.value_and_grad(mse)(model, x, y)[1]
    opt.step(grads)
    for path in HIDDEN:
        np.testing.assert_array_equal(params_of(model)[path], before[path])
    assert not np.allclose(params_of(model)["out.weight"], before["out.weight"])
    full = {k: jnp.zeros_like(p.value) for k, p in model.named_parameters()}
    opt.step(full)  # a gradient for a frozen parameter is ignored
    for path in HIDDEN:
        np.testing.assert_array_equal(params_of(model)[path], before[path])


def test_requires_grad_flipped_after_build_eager_adapts_traced_refuses():
    model, (x, y) = MLP(), batch()
    opt = Adam(model.parameters(), lr=0.1)
    step = js.jit(lambda m, o, x, y: o.step(js.value_and_grad(mse)(m, x, y)[1]))
    step(model, opt, x, y)
    model.out.requires_grad_(False)
    with pytest.raises(
        ValueError,
        match=r"requires_grad changed since .*'out.weight' \(frozen\), 'out.bias' \(frozen\); "
        r"inside compiled code",
    ):
        step(model, opt, x, y)
    frozen = params_of(model)
    opt.step(js.value_and_grad(mse)(model, x, y)[1])  # eagerly: the state adapts
    assert opt.frozen == list(OUT) and not any(
        k.startswith("adam.mu.out") for k in opt.state_dict()
    )
    step(model, opt, x, y)
    for path in OUT:
        np.testing.assert_array_equal(params_of(model)[path], frozen[path])
    model.out.requires_grad_(True)
    model.hidden.requires_grad_(False)
    opt.step(js.value_and_grad(mse)(model, x, y)[1])
    state = opt.state_dict()
    assert opt.frozen == list(HIDDEN) and "adam.mu.out.weight" in state
    assert "adam.mu.hidden.weight" not in state
    assert np.abs(state["adam.mu.out.weight"]).sum() > 0  # new zero state, then one step
    step(model, opt, x, y)
    assert int(opt.step_count) == 5


def test_accumulate_and_optax_refuse_a_flip_after_build():
    model, (x, y) = MLP(), batch()
    acc = accumulate(SGD(model.parameters(), lr=0.1), every=2)
    tx = Optax(model.parameters(), optax.adam(0.1))
    model.out.requires_grad_(False)
    grads = js.value_and_grad(mse)(model, x, y)[1]
    with pytest.raises(ValueError, match="Fix: build the optimizer and accumulate"):
        acc.step(grads)
    with pytest.raises(ValueError, match="Fix: build a new Optax optimizer"):
        tx.step(grads)


# -- the helper, Optax --------------------------------------------------------------------------


class Block(js.Module):
    def __init__(self):
        self.proj = Linear(4, 4)
        self.layernorm = Linear(4, 4, seed=1)
        self.frozen = Linear(4, 4, seed=2)
        self.frozen.requires_grad_(False)
        self.bias = js.Parameter(jnp.zeros(4))


def test_param_groups_helper_splits_decay_from_no_decay():
    model = Block()
    groups = param_groups(model, weight_decay=0.05, lr=1e-3)
    assert [list(g["params"].paths) for g in groups] == [
        ["proj.weight"],
        ["bias", "proj.bias", "layernorm.weight", "layernorm.bias"],
    ]
    assert [(g["weight_decay"], g["lr"]) for g in groups] == [(0.05, 1e-3), (0.0, 1e-3)]
    opt = AdamW(groups)
    assert (
        opt.param_groups[0]["weight_decay"] == 0.05 and opt.param_groups[1]["weight_decay"] == 0.0
    )
    assert opt.frozen == []  # the frozen parameters were left out altogether
    only = param_groups(model, no_decay=("*",))
    assert len(only) == 1 and only[0]["weight_decay"] == 0.0
    with pytest.raises(
        TypeError, match=r"no_decay must be a sequence of patterns.*Fix: no_decay=\('\*.bias',\)"
    ):
        param_groups(model, no_decay="*.bias")


def test_optax_keeps_a_raw_transform_with_its_state_keys():
    model, (x, y) = MLP(), batch()
    tx = optax.named_chain(("adam", optax.scale_by_adam()), ("lr", optax.scale(-0.01)))
    opt = Optax(model.parameters(), tx)
    assert {"step_count", "adam.count", "adam.mu.out.weight"} <= set(opt.state_dict())
    reference = MLP()
    ref_opt = Adam(reference.parameters(), lr=0.01)
    step = js.jit(lambda m, o, x, y: o.step(js.value_and_grad(mse)(m, x, y)[1]))
    for _ in range(3):
        step(model, opt, x, y)
        step(reference, ref_opt, x, y)
    for path, value in params_of(reference).items():
        np.testing.assert_allclose(params_of(model)[path], value, rtol=1e-4, atol=1e-6)
    assert opt.param_groups[0].keys() == {"params"}


def test_sgd_in_js_optim_0_1_s_positional_order_is_refused_with_the_fix():
    class One(js.Module):
        def __init__(self):
            super().__init__()
            self.w = js.Parameter(jnp.ones(2))

    for args in [(0.1, 0.9, True), (0.1, 0.9, False, 0.01)]:  # (lr, momentum, nesterov, wd)
        with pytest.raises(TypeError, match=r"Fix: pass them by keyword, SGD\(params, lr=0.1"):
            js.optim.SGD(One().parameters(), *args)
