"""``inspect.signature`` of a js class is its constructor, not flax's metaclass ``__call__``."""

import copy
import inspect
import pickle

import jax.numpy as jnp
from core_models import Linear

import js


class Scaled(js.Module):
    def __init__(self, features: int, scale: float = 2.0, *, rngs: js.Rngs | None = None):
        super().__init__()
        self.scale = js.Parameter(jnp.full(features, scale))

    def forward(self, x):
        return x * self.scale.value


class Inherited(Scaled):  # no __init__ of its own: the parent's constructor
    pass


class Narrowed(Scaled):
    def __init__(self, features: int):
        super().__init__(features, 3.0)


def _parameters(cls) -> list[str]:
    return list(inspect.signature(cls).parameters)


def test_a_subclass_shows_its_constructor():
    signature = inspect.signature(Scaled)
    assert [(p.name, p.annotation, p.default) for p in signature.parameters.values()] == [
        ("features", int, inspect.Parameter.empty),
        ("scale", float, 2.0),
        ("rngs", js.Rngs | None, None),
    ]
    assert signature.parameters["rngs"].kind == inspect.Parameter.KEYWORD_ONLY
    assert signature.bind(4).arguments == {"features": 4}  # what config systems do with it


def test_a_subclass_without_init_shows_its_parents_and_one_with_init_its_own():
    assert inspect.signature(Inherited) == inspect.signature(Scaled)
    assert _parameters(Narrowed) == ["features"]
    assert _parameters(Scaled) == ["features", "scale", "rngs"]  # the parent is unchanged


def test_the_bases_and_containers_show_their_constructors():
    assert _parameters(js.Module) == []
    assert _parameters(js.ModuleList) == ["modules"]
    assert _parameters(js.ModuleDict) == ["modules"]
    assert _parameters(js.Parameter) == ["value", "requires_grad", "metadata"]
    assert _parameters(js.Buffer) == ["value", "persistent", "metadata"]
    assert _parameters(js.Rngs) == ["default", "rngs"]


def test_an_instance_keeps_the_signature_of_its_call():
    model = Scaled(3)
    assert inspect.signature(model) == inspect.signature(type(model).__call__.__get__(model))
    assert inspect.signature(js.Rngs(params=0)) == inspect.signature(js.Rngs.__call__).replace(
        parameters=list(inspect.signature(js.Rngs.__call__).parameters.values())[1:]
    )


def test_objects_copy_pickle_and_flatten_as_before():
    model = Linear(3, 2, rngs=js.Rngs(params=0))
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert jnp.array_equal(twin.weight.value, model.weight.value)
    assert "__signature__" not in vars(model) and "__signature__" not in vars(Scaled)
    assert js.jit(lambda m, x: m(x))(Scaled(2), jnp.ones(2)).tolist() == [2.0, 2.0]
