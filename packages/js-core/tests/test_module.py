import jax.numpy as jnp
import numpy as np
import pytest
from core_models import MLP, Counter, Linear

import js


@pytest.fixture
def mlp():
    return MLP(rngs=js.Rngs(params=0))


def test_subclass_forward_and_call():
    model = Linear(3, 2, rngs=js.Rngs(params=0))
    x = jnp.ones((4, 3))
    out = model(x)
    assert out.shape == (4, 2)
    np.testing.assert_allclose(out, x @ model.weight.value.T + model.bias.value)


def test_children_may_return_tuples_and_dicts():
    class Split(js.Module):
        def forward(self, x):
            return x[:, :1], {"rest": x[:, 1:]}

    class Net(js.Module):
        def __init__(self):
            super().__init__()
            self.split = Split()

        def forward(self, x):
            first, parts = self.split(x)
            return first.sum() + parts["rest"].sum()

    assert float(Net()(jnp.arange(6.0).reshape(2, 3))) == 15.0


def test_forward_missing_is_a_clear_error():
    class Empty(js.Module):
        pass

    with pytest.raises(NotImplementedError, match="Empty must implement forward"):
        Empty()(1)


def test_parameter_and_buffer_value_without_deprecation_warnings():
    p = js.Parameter(np.ones(3, np.float32))
    b = js.Buffer(jnp.zeros(2))
    p.value = p.value * 2
    b.value = b.value + 1
    assert p.value.tolist() == [2.0, 2.0, 2.0]
    assert b.value.tolist() == [1.0, 1.0]
    assert repr(p) == "Parameter(shape=[3], dtype=float32)"


def test_parameter_refuses_a_variable_as_its_array():
    with pytest.raises(TypeError, match="expected an array, got a Parameter"):
        js.Parameter(js.Parameter(jnp.ones(2)))


def test_shared_module_shares_weights_and_traversal_deduplicates():
    rngs = js.Rngs(params=0)

    class Tied(js.Module):
        def __init__(self):
            super().__init__()
            self.encoder = Linear(3, 3, rngs=rngs)
            self.decoder = self.encoder

        def forward(self, x):
            return self.decoder(self.encoder(x))

    model = Tied()
    assert [path for path, _ in model.named_parameters()] == ["encoder.weight", "encoder.bias"]
    assert [path for path, _ in model.named_modules()] == ["", "encoder"]
    model.encoder.weight.value = jnp.zeros((3, 3))
    assert float(jnp.abs(model.decoder.weight.value).sum()) == 0.0
    # Like PyTorch, the state dict names every path of a shared tensor.
    assert sorted(model.state_dict()) == sorted(
        ["encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias"]
    )


def test_canonical_paths_and_buffers(mlp):
    mlp.counter = Counter()
    assert [path for path, _ in mlp.named_parameters()] == [
        f"layers.{i}.{name}" for i in range(3) for name in ("weight", "bias")
    ]
    assert [path for path, _ in mlp.named_buffers()] == ["counter.calls"]
    assert [path for path, _ in mlp.named_modules()] == [
        "",
        "layers",
        "layers.0",
        "layers.1",
        "layers.2",
        "counter",
    ]
    assert [name for name, _ in mlp.named_children()] == ["layers", "counter"]
    assert len(list(mlp.buffers())) == 1 and len(list(mlp.children())) == 2


def test_register_buffer():
    model = js.Module()
    model.register_buffer("steps", jnp.zeros(()))
    assert isinstance(model.steps, js.Buffer)
    assert list(model.state_dict()) == ["steps"]


def test_plain_lists_and_dicts_are_discovered():
    rngs = js.Rngs(params=0)
    model = js.Module()
    model.blocks = [Linear(2, 2, rngs=rngs), Linear(2, 2, rngs=rngs)]
    model.heads = {"a": Linear(2, 1, rngs=rngs)}
    model.sizes = [1, 2]  # no modules: stays a plain attribute
    assert isinstance(model.blocks, js.ModuleList)
    assert isinstance(model.heads, js.ModuleDict)
    assert model.sizes == [1, 2]
    assert [p for p, _ in model.named_parameters()] == [
        "blocks.0.weight",
        "blocks.0.bias",
        "blocks.1.weight",
        "blocks.1.bias",
        "heads.a.weight",
        "heads.a.bias",
    ]


def test_module_list_behaves_like_a_list():
    rngs = js.Rngs(params=0)
    layers = js.ModuleList([Linear(2, 2, rngs=rngs) for _ in range(3)])
    extra = Linear(2, 2, rngs=rngs)
    layers.append(extra)
    assert len(layers) == 4 and layers[-1] is extra and layers[3] is extra
    assert list(layers)[0] is layers[0]
    del layers[0]
    assert len(layers) == 3 and layers[2] is extra
    assert [p for p, _ in layers.named_parameters()][-2:] == ["2.weight", "2.bias"]
    with pytest.raises(NotImplementedError, match="ModuleList has no forward"):
        layers(1)


def test_module_dict_behaves_like_a_dict():
    rngs = js.Rngs(params=0)
    heads = js.ModuleDict({"cls": Linear(2, 3, rngs=rngs)})
    heads["box"] = Linear(2, 4, rngs=rngs)
    assert len(heads) == 2 and "box" in heads
    assert heads.keys() == ["cls", "box"] and list(heads) == ["cls", "box"]
    assert [k for k, _ in heads.items()] == ["cls", "box"]
    assert heads.values()[1] is heads["box"]
    del heads["cls"]
    assert heads.keys() == ["box"]
    with pytest.raises(KeyError, match="ModuleDict has no key 'cls'"):
        heads["cls"]
    with pytest.raises(KeyError, match="clashes with an attribute"):
        heads["keys"] = Linear(1, 1, rngs=rngs)
    with pytest.raises(TypeError, match="ModuleDict keys must be strings, got int"):
        heads[1] = Linear(1, 1, rngs=rngs)
    with pytest.raises(NotImplementedError, match="ModuleDict has no forward"):
        heads(1)


def test_parameters_is_a_live_selection(mlp):
    selection = mlp.parameters()
    assert len(selection) == 6 and selection.paths[0] == "layers.0.weight"
    first = next(iter(selection))
    assert first is mlp.layers[0].weight
    first.value = jnp.zeros_like(first.value)
    assert float(jnp.abs(mlp.layers[0].weight.value).sum()) == 0.0
    assert selection.named()[1] == ("layers.0.bias", mlp.layers[0].bias)


def test_state_dict_is_an_independent_numpy_snapshot(mlp):
    snapshot = mlp.state_dict()
    assert all(isinstance(v, np.ndarray) for v in snapshot.values())
    before = snapshot["layers.0.bias"].copy()
    mlp.layers[0].bias.value = mlp.layers[0].bias.value + 1
    np.testing.assert_array_equal(snapshot["layers.0.bias"], before)
    snapshot["layers.0.weight"][...] = 7
    assert float(mlp.layers[0].weight.value[0, 0]) != 7


def test_load_state_dict_round_trip(mlp):
    other = MLP(rngs=js.Rngs(params=1))
    result = other.load_state_dict(mlp.state_dict())
    assert result == js.IncompatibleKeys([], [])
    for (_, a), (_, b) in zip(mlp.named_parameters(), other.named_parameters(), strict=False):
        np.testing.assert_array_equal(a.value, b.value)


def test_strict_load_reports_every_problem_and_loads_nothing(mlp):
    state = mlp.state_dict()
    bad = dict(state)
    del bad["layers.0.bias"]
    bad["layers.9.weight"] = np.zeros(3, np.float32)
    bad["layers.1.weight"] = np.zeros((3, 3), np.float32)
    bad["layers.2.bias"] = np.zeros(4, np.float64)
    bad["layers.0.weight"] = np.zeros((16, 10), np.float32)  # valid, must not be copied
    before = np.array(mlp.layers[0].weight.value)
    with pytest.raises(ValueError) as info:
        mlp.load_state_dict(bad)
    message = str(info.value)
    assert "nothing was loaded" in message
    assert "missing keys: 'layers.0.bias'" in message
    assert "unexpected keys: 'layers.9.weight'" in message
    assert "'layers.1.weight': expected [16, 16] float32, got [3, 3] float32" in message
    assert "'layers.2.bias': expected [4] float32, got [4] float64" in message
    np.testing.assert_array_equal(mlp.layers[0].weight.value, before)


def test_non_strict_load_skips_names_but_not_shapes(mlp):
    state = mlp.state_dict()
    del state["layers.2.bias"]
    state["extra"] = np.zeros(1)
    result = mlp.load_state_dict(state, strict=False)
    assert result.missing_keys == ["layers.2.bias"] and result.unexpected_keys == ["extra"]
    state["layers.2.weight"] = np.zeros((1, 1), np.float32)
    with pytest.raises(ValueError, match=r"'layers.2.weight': expected \[4, 16\] float32"):
        mlp.load_state_dict(state, strict=False)


def test_train_and_eval_recurse_and_return_self(mlp):
    assert mlp.eval() is mlp
    assert not any(m.training for m in mlp.modules())
    assert mlp.train() is mlp
    assert all(m.training for m in mlp.modules())


def test_print_shows_the_tree_with_parameter_shapes(mlp):
    text = str(mlp)
    assert text.startswith("MLP(\n  (layers): ModuleList(\n    (0): Linear(")
    assert "(weight): Parameter(shape=[16, 10], dtype=float32)" in text
    assert repr(mlp) == text


def test_load_state_dict_names_a_non_mapping_and_entries_that_are_not_arrays(mlp):
    state = mlp.state_dict()
    before = np.array(mlp.layers[0].weight.value)
    with pytest.raises(
        TypeError,
        match=r"MLP.load_state_dict: state_dict must be a mapping "
        r"\{key: array\}, got list; nothing was loaded. Fix: .*dict\(pairs\)",
    ):
        mlp.load_state_dict(list(state.items()))
    ragged = {**state, "layers.0.weight": [[1.0, 2.0], [3.0]], "layers.0.bias": object()}
    with pytest.raises(
        TypeError,
        match=r"entries that are not arrays; nothing was loaded.\n  "
        r"'layers.0.weight': list \(.*\)\n  'layers.0.bias': object is not an "
        r"array of numbers",
    ):
        mlp.load_state_dict(ragged)
    np.testing.assert_array_equal(mlp.layers[0].weight.value, before)


def test_load_state_dict_keeps_jax_arrays_and_the_current_placement(mlp):
    import jax

    device = jax.devices()[0]
    for _, param in mlp.named_parameters():
        param.value = jax.device_put(param.value, device)
    live = MLP(rngs=js.Rngs(params=1)).state_dict(as_numpy=False)
    assert all(isinstance(value, jax.Array) for value in live.values())
    mlp.load_state_dict(live)
    for key, value in mlp.state_dict(as_numpy=False).items():
        assert value.sharding == jax.sharding.SingleDeviceSharding(device)
        np.testing.assert_array_equal(value, live[key])


def _aligned(values: np.ndarray, alignment: int = 64) -> np.ndarray:
    """``values`` copied into a buffer whose address is a multiple of ``alignment`` (as torch's)."""
    raw = np.empty(values.nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    out = raw[start : start + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


def test_loaded_arrays_do_not_alias_the_callers_buffers(mlp):
    # XLA:CPU adopts an aligned host buffer without copying; a later write by the caller (torch's
    # optimizer updating the tensors load_torch_state_dict read) must not reach the model.
    state = {key: _aligned(value) for key, value in mlp.state_dict().items()}
    mlp.load_state_dict(state)
    before = mlp.state_dict()
    for value in state.values():
        value[...] = 7
    after = mlp.state_dict()
    for key, value in before.items():
        np.testing.assert_array_equal(after[key], value)
    buffer = _aligned(np.ones(16, np.float32))
    param = js.Parameter(buffer)  # a Parameter built from a buffer copies it too
    buffer[...] = 7
    np.testing.assert_array_equal(param.value, 1.0)


def test_load_state_dict_of_many_arrays_of_one_shape_places_and_copies_each_one():
    # Past a thousand NumPy arrays of one shape, placed_like copies them to their devices in
    # chunks through a jitted copy (the tail, and the odd shapes, through device_put).
    import jax

    class Many(js.Module):
        def __init__(self, n: int):
            super().__init__()
            self.weights = [js.Parameter(jnp.zeros((2, 3))) for _ in range(n)]
            self.bias = js.Parameter(jnp.zeros(3))

    model = Many(1100)
    state = {
        key: _aligned(np.full(value.shape, i, value.dtype))
        for i, (key, value) in enumerate(model.state_dict().items())
    }
    model.load_state_dict(state)
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    live = model.state_dict(as_numpy=False)
    assert list(live) == list(state)
    for key, value in live.items():
        assert isinstance(value, jax.Array) and value.sharding == device, key
        assert value.dtype == np.float32 and value.shape == state[key].shape, key
    for value in state.values():
        value[...] = -1  # the model holds copies, not the caller's buffers
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, np.full(value.shape, list(state).index(key)))


class TiedLM(js.Module):
    """GPT-2's tie: the output layer's weight is the embedding's Parameter, under two paths."""

    def __init__(self, rngs):
        super().__init__()
        self.wte = Linear(3, 5, rngs=rngs)  # weight [5, 3]
        self.head = Linear(3, 5, rngs=rngs)
        self.head.weight = self.wte.weight  # one Parameter, paths wte.weight and head.weight


def _values(model):
    return {key: np.array(value) for key, value in model.state_dict().items()}


def test_a_tied_parameter_is_supplied_by_any_of_its_paths():
    source, model = TiedLM(js.Rngs(params=0)), TiedLM(js.Rngs(params=1))
    assert model.head.weight is model.wte.weight
    state = source.state_dict()
    assert list(state) == ["wte.weight", "wte.bias", "head.weight", "head.bias"]  # as torch
    for dropped in ("head.weight", "wte.weight"):  # a file may keep either name
        given = {k: v for k, v in state.items() if k != dropped}
        assert model.load_state_dict(given) == js.IncompatibleKeys([], [])
        np.testing.assert_array_equal(model.head.weight.value, state["wte.weight"])
        assert model.head.weight is model.wte.weight  # still tied
    assert model.load_state_dict(state) == js.IncompatibleKeys([], [])  # both names, equal values
    del state["wte.weight"], state["head.weight"]
    with pytest.raises(ValueError, match=r"missing keys: 'wte\.weight', 'head\.weight'"):
        model.load_state_dict(state)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert missing == ["wte.weight", "head.weight"] and unexpected == []


def test_a_tied_parameter_given_two_different_values_is_an_error_naming_both():
    model = TiedLM(js.Rngs(params=1))
    before = _values(model)
    state = TiedLM(js.Rngs(params=0)).state_dict()
    state["head.weight"] = state["head.weight"] + 1.0
    for strict in (True, False):
        with pytest.raises(
            ValueError,
            match=r"(?s)nothing was loaded.*tied entries that differ: 'wte\.weight' and "
            r"'head\.weight' \(one tied variable\) hold different values.*Fix: give one value",
        ):
            model.load_state_dict(state, strict=strict)
    for key, value in _values(model).items():
        np.testing.assert_array_equal(value, before[key], err_msg=key)


def test_torch_lists_a_tied_parameter_under_both_names_as_js_does():
    torch = pytest.importorskip("torch")
    t_model = torch.nn.Module()
    t_model.wte, t_model.head = torch.nn.Linear(3, 5), torch.nn.Linear(3, 5)
    t_model.head.weight = t_model.wte.weight
    assert list(t_model.state_dict()) == list(TiedLM(js.Rngs(params=0)).state_dict())


def test_incompatible_keys_is_a_named_pair_with_ignored_keys_beside_it():
    import copy
    import pickle

    keys = js.IncompatibleKeys(["a"], ["b"], ignored_keys=["head.weight"])
    missing, unexpected = keys
    assert (missing, unexpected, len(keys)) == (["a"], ["b"], 2)
    assert keys == js.IncompatibleKeys(["a"], ["b"]) == (["a"], ["b"])
    assert repr(keys) == "IncompatibleKeys(missing_keys=['a'], unexpected_keys=['b'])"
    assert js.IncompatibleKeys([], []).ignored_keys == []
    for twin in (copy.copy(keys), copy.deepcopy(keys), pickle.loads(pickle.dumps(keys))):
        assert twin == keys and twin.ignored_keys == ["head.weight"]


def test_numel_and_dim_as_torch_counts_them():
    # nanoGPT's get_num_params and configure_optimizers: sum(p.numel() ...), p.dim() >= 2
    weight, bias = js.Parameter(jnp.zeros((3, 4))), js.Parameter(jnp.zeros(4))
    assert (weight.numel(), weight.dim(), bias.numel(), bias.dim()) == (12, 2, 4, 1)
    assert js.Buffer(jnp.zeros(())).numel() == 1 and js.Buffer(jnp.zeros(())).dim() == 0
    assert type(weight.numel()) is int and weight.size == 12  # JAX's names stay
