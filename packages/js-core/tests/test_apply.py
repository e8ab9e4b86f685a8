"""Module.apply, Variable.data and the traversal order, checked against PyTorch's."""

import jax.numpy as jnp
import numpy as np
import pytest
from core_models import Linear

import js


class Block(js.Module):
    def __init__(self, width, *, rngs):
        super().__init__()
        self.first = Linear(width, width + 1, rngs=rngs)
        self.second = Linear(width + 1, width, rngs=rngs)


class Net(js.Module):
    """Nested children, a list, a dict, a child shared under two names, a non-module attribute."""

    def __init__(self, *, rngs):
        super().__init__()
        self.stem = Linear(2, 3, rngs=rngs)
        self.blocks = [Block(3, rngs=rngs), Block(4, rngs=rngs)]
        self.heads = {"cls": Linear(3, 5, rngs=rngs), "box": Linear(3, 6, rngs=rngs)}
        self.scale = js.Parameter(jnp.ones(()))
        self.tied = self.stem
        self.width = 3


def torch_net():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class TorchBlock(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.first = nn.Linear(width, width + 1)
            self.second = nn.Linear(width + 1, width)

    class TorchNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(2, 3)
            self.blocks = nn.ModuleList([TorchBlock(3), TorchBlock(4)])
            self.heads = nn.ModuleDict({"cls": nn.Linear(3, 5), "box": nn.Linear(3, 6)})
            self.scale = nn.Parameter(torch.ones(()))
            self.tied = self.stem
            self.width = 3

    return TorchNet()


def describe(module):
    # The same label on both sides: class name without the framework's prefix, plus the width.
    name = type(module).__name__.removeprefix("Torch")
    width = getattr(module, "in_features", None)
    if width is None and hasattr(module, "weight"):
        width = module.weight.value.shape[1]
    return f"{name}({width})" if width is not None else name


@pytest.mark.torch
def test_traversal_matches_torch_order_and_deduplication():
    ours, theirs = Net(rngs=js.Rngs(params=0)), torch_net()
    for method in ("named_children", "named_modules"):
        want = [(name, describe(m)) for name, m in getattr(theirs, method)()]
        got = [(name, describe(m)) for name, m in getattr(ours, method)()]
        assert got == want, method
    assert [describe(m) for m in ours.children()] == [describe(m) for m in theirs.children()]
    assert [describe(m) for m in ours.modules()] == [describe(m) for m in theirs.modules()]
    everything = [name for name, _ in theirs.named_modules(remove_duplicate=False)]
    assert [name for name, _ in ours.named_modules(remove_duplicate=False)] == everything


@pytest.mark.torch
def test_apply_visits_children_first_in_torch_order():
    ours, theirs = Net(rngs=js.Rngs(params=0)), torch_net()
    got, want = [], []
    assert ours.apply(lambda m: got.append(describe(m))) is ours
    theirs.apply(lambda m: want.append(describe(m)))
    assert got == want
    assert got[-1] == "Net"


def test_apply_reaches_a_child_shared_by_two_parents_once_per_parent():
    rngs = js.Rngs(params=0)
    shared = Linear(2, 2, rngs=rngs)

    class Holder(js.Module):
        def __init__(self):
            super().__init__()
            self.layer = shared

    class Outer(js.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Holder(), Holder()

    visits = []
    Outer().apply(lambda m: visits.append(m))
    assert sum(m is shared for m in visits) == 2  # as torch: no memo across parents


def weights_init(m):
    # The DCGAN tutorial's pattern, with js's init written out for js-core's own test.
    if m.__class__.__name__.find("Linear") != -1:
        m.weight.data.value = jnp.full(m.weight.value.shape, 0.5)
        m.bias.data = np.zeros(m.bias.value.shape, np.float32)


def test_apply_with_the_data_pattern_writes_every_layer_in_place():
    model = Net(rngs=js.Rngs(params=0))
    model.apply(weights_init)
    for path, param in model.named_parameters():
        if path.endswith(".weight"):
            assert float(jnp.min(param.value)) == float(jnp.max(param.value)) == 0.5, path
        elif path.endswith(".bias"):
            assert float(jnp.abs(param.value).sum()) == 0.0, path
    assert float(model.scale.value) == 1.0


def test_data_is_the_variable_itself():
    param, buffer = js.Parameter(jnp.zeros(2)), js.Buffer(jnp.zeros(3))
    assert param.data is param and buffer.data is buffer
    param.data = jnp.ones(2)
    assert param.value.tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="expected an array, got a Parameter"):
        buffer.data = param
