"""torch's parameter-group forms: a submodule's ``.parameters()`` per group, a list of
Parameters, found in the gradients of the whole model (js.optim._paths), against torch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from optim_models import MLP, Linear, batch, mse

import js
from js._checks import flatten_state
from js.optim import SGD, Adam

torch = pytest.importorskip("torch")


class Stack(js.Module):
    """Two layers of one structure: their selections cannot be told apart by paths."""

    def __init__(self):
        self.first, self.second = Linear(4, 4, seed=0), Linear(4, 4, seed=1)

    def forward(self, x):
        return self.second(jax.nn.tanh(self.first(x)))


def torch_run(model, groups_of, cls, defaults, steps):
    """torch's optimizer over the same values and groups, ``steps`` steps of mse on batch()."""
    tensors = {
        path: torch.tensor(np.array(p.value), requires_grad=True)
        for path, p in model.named_parameters()
    }
    opt = cls(groups_of(tensors), **defaults)
    x, y = (torch.tensor(np.array(a)) for a in batch())
    for _ in range(steps):
        hidden = torch.tanh(x @ tensors["hidden.weight"] + tensors["hidden.bias"])
        loss = ((hidden @ tensors["out.weight"] + tensors["out.bias"] - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {path: t.detach().numpy() for path, t in tensors.items()}


def js_run(model, opt, steps, compiled):
    x, y = batch()
    step = js.jit(lambda m, o, x, y: o.step(js.value_and_grad(mse)(m, x, y)[1]))
    for _ in range(steps):
        if compiled:
            step(model, opt, x, y)
        else:
            opt.step(js.value_and_grad(mse)(model, x, y)[1])
    return {path: np.array(p.value) for path, p in model.named_parameters()}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "jit"])
def test_submodule_selections_as_torch_writes_them(compiled):
    """torch's documentation's example: one group per submodule, the second with its own lr."""
    model = MLP()
    opt = SGD(
        [{"params": model.hidden.parameters()}, {"params": model.out.parameters(), "lr": 1e-3}],
        lr=1e-2,
        momentum=0.9,
    )
    want = torch_run(
        MLP(),
        lambda t: [
            {"params": [t["hidden.weight"], t["hidden.bias"]]},
            {"params": [t["out.weight"], t["out.bias"]], "lr": 1e-3},
        ],
        torch.optim.SGD,
        {"lr": 1e-2, "momentum": 0.9},
        steps=5,
    )
    got = js_run(model, opt, 5, compiled)
    for path in want:
        np.testing.assert_allclose(got[path], want[path], rtol=1e-6, atol=1e-6, err_msg=path)
    # the two groups' 'weight' and 'bias' are told apart by their group in the state dict
    assert "momentum.trace.param_groups.0.weight" in opt.state_dict()
    assert "momentum.trace.param_groups.1.bias" in opt.state_dict()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "jit"])
def test_lists_of_parameters(compiled):
    model = MLP()
    groups = [
        {"params": [model.hidden.weight, model.hidden.bias], "weight_decay": 0.1},
        {"params": [model.out.weight, model.out.bias]},
    ]
    opt = Adam(groups, lr=1e-2)
    want = torch_run(
        MLP(),
        lambda t: [
            {"params": [t["hidden.weight"], t["hidden.bias"]], "weight_decay": 0.1},
            {"params": [t["out.weight"], t["out.bias"]]},
        ],
        torch.optim.Adam,
        {"lr": 1e-2},
        steps=5,
    )
    got = js_run(model, opt, 5, compiled)
    for path in want:
        np.testing.assert_allclose(got[path], want[path], rtol=1e-5, atol=1e-6, err_msg=path)
    assert "adam.mu.param_groups.0.1" in opt.state_dict()  # hidden.bias: group 0, place 1


def test_a_state_dict_of_submodule_groups_loads_into_a_new_optimizer():
    model = MLP()

    def build(model):
        return SGD(
            [{"params": model.hidden.parameters()}, {"params": model.out.parameters()}],
            lr=0.1,
            momentum=0.9,
        )

    opt = build(model)
    js_run(model, opt, 2, compiled=False)
    again = build(model)
    again.load_state_dict(opt.state_dict())  # before its first step: keys do not need grads
    for key, value in opt.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[key], value)


def test_parameters_not_in_the_gradients_are_refused():
    model, other = MLP(), Linear(3, 2, seed=5)  # (an 8 -> 2 one would pass for model.out)
    opt = SGD([{"params": model.hidden.parameters()}, {"params": other.parameters()}], lr=0.1)
    grads = js.value_and_grad(mse)(model, *batch())[1]
    with pytest.raises(
        ValueError,
        match=r"SGD.step: .*nor do the gradients' paths place the groups: .*Fix: differentiate "
        r"the model the groups' parameters come from",
    ):
        opt.step(grads)
    lone = SGD([{"params": [model.hidden.weight]}], lr=0.1)
    with pytest.raises(ValueError, match="no way to give every gradient to one parameter"):
        lone.step(grads)  # the other three gradients belong to no parameter


def test_twin_submodules_step_by_identity_and_by_paths_are_refused_with_the_fix():
    # js.value_and_grad's gradients know their Parameters: twin submodules in two groups, or
    # same-shaped Parameters in a list, each get their own gradient, as in torch
    model = Stack()
    opt = SGD(
        [{"params": model.first.parameters()}, {"params": model.second.parameters(), "lr": 0}],
        lr=0.5,
    )
    x = jnp.arange(8.0).reshape(2, 4)
    grads = js.value_and_grad(lambda m, x: jnp.sum(m(x) ** 2))(model, x)[1]
    flat = flatten_state(grads)
    before = {k: np.asarray(v) for k, v in model.state_dict().items()}
    opt.step(grads)
    np.testing.assert_allclose(
        model.first.weight.value, before["first.weight"] - 0.5 * flat["first.weight"], rtol=1e-6
    )
    np.testing.assert_array_equal(model.second.weight.value, before["second.weight"])  # lr 0
    listed = SGD([{"params": list(model.parameters())[::-1]}], lr=0.5)  # shapes repeat
    grads = js.value_and_grad(lambda m, x: jnp.sum(m(x) ** 2))(model, x)[1]
    flat = flatten_state(grads)
    before = {k: np.asarray(v) for k, v in model.state_dict().items()}
    listed.step(grads)
    for path, p in model.named_parameters():
        np.testing.assert_allclose(p.value, before[path] - 0.5 * flat[path], rtol=1e-6)
    # gradients that do not come from js.value_and_grad (a dict, a jax.tree.map of them) have
    # only their paths: twins are refused, naming the fix
    with pytest.raises(
        ValueError,
        match=r"more than one way to place the groups' paths: param_groups\[0\] under 'first\.' "
        r"or 'second\.'.*Fix: .*named_parameters\(\)",
    ):
        opt.step(jax.tree.map(lambda g: g, grads))
    bare = SGD([{"params": [model.first.weight, model.second.weight]}])
    with pytest.raises(ValueError, match=r"have the shape \[4, 4\].*cannot be told"):
        bare.step({"first.weight": jnp.ones((4, 4)), "second.weight": jnp.ones((4, 4))})
    named = dict(model.named_parameters())  # the fix: pairs of the whole model's paths
    fixed = SGD([{"params": [(k, v) for k, v in named.items() if k.startswith(s)]} for s in "fs"])
    fixed.step(grads)
    assert int(fixed.step_count) == 1
