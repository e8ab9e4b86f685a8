"""js.models' mixtures of experts against transformers 5.23: Mixtral (8 experts, top 2, sliding
window 3), Qwen3-MoE (top 2 of 8 renormalised, q/k norms, sparse every second layer, window 4)
and Qwen2-MoE (a gated shared expert, dense layers from mlp_only_layers, sliding layers), loaded
both ways (transformers' per-expert files, js's stacked ones) and generating greedily; the
decode step's flops scale with top_k; the router's load-balancing loss; the expert paths agree.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors
from flax import nnx

sys.path.insert(0, str(Path(__file__).parent))
from family_support import (  # noqa: E402
    IDS,
    MASK,
    VOCAB,
    greedy_matches,
    js_logits,
    loads_both_ways,
    reference,
    relative_error,
    torch_logits,
)
from llama_support import transformers_without_torchvision  # noqa: E402

import js  # noqa: E402
import js.models  # noqa: E402
from js.models import _moe  # noqa: E402
from js.models.mixtral import MixtralConfig, MixtralForCausalLM  # noqa: E402
from js.models.qwen2_moe import Qwen2MoeConfig  # noqa: E402
from js.models.qwen3_moe import Qwen3MoeConfig  # noqa: E402
from js.nn import functional as F  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

try:  # transformers' MoE classes imported at collection, not inside the first test (~2 s)
    with transformers_without_torchvision() as _transformers:
        for _name in ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
            getattr(_transformers, _name)
except ImportError:
    pass

HERE = Path(__file__).parent
SIZES = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
EXPERTS = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
CASES = {
    "mixtral": (
        "MixtralForCausalLM",
        # eos_token_id None: transformers' generate(min_new_tokens=) never picks the eos token
        # (Mixtral's 2), js's generate(eos_token_id=[]) may
        dict(
            num_hidden_layers=2,
            intermediate_size=32,
            num_local_experts=8,
            sliding_window=3,
            eos_token_id=None,
        ),
    ),
    "qwen3_moe": (  # sparse layers 1 and 3, dense 0 and 2
        "Qwen3MoeForCausalLM",
        dict(
            num_hidden_layers=4,
            intermediate_size=48,
            **EXPERTS,
            norm_topk_prob=True,
            decoder_sparse_step=2,
            attention_bias=True,
            use_sliding_window=True,
            sliding_window=4,
        ),
    ),
    "qwen2_moe": (  # sparse 0 and 3, dense 1 and 2; sliding 0 and 2
        "Qwen2MoeForCausalLM",
        dict(
            num_hidden_layers=4,
            intermediate_size=48,
            **EXPERTS,
            shared_expert_intermediate_size=40,
            mlp_only_layers=[1, 2],
            use_sliding_window=True,
            sliding_window=3,
            max_window_layers=4,
        ),
    ),
}


@pytest.fixture(scope="module")
def references(transformers, tmp_path_factory):
    """``case -> (transformers model, its folder)``, each built once."""
    built = {}

    def get(case):
        if case not in built:
            folder = tmp_path_factory.mktemp(case) / "hf"
            hf_class, keys = CASES[case]
            built[case] = reference(transformers, hf_class, {**SIZES, **keys}, folder), folder
        return built[case]

    return get


@pytest.mark.parametrize("case", list(CASES))
def test_loads_both_ways(transformers, references, case, tmp_path):
    reference_model, folder = references(case)
    with safetensors.safe_open(str(folder / "model.safetensors"), "np") as file:
        assert any(".experts.0." in key for key in file.keys())  # transformers: per expert
    there, back = loads_both_ways(transformers, reference_model, folder, tmp_path)
    print(case, f"js from transformers {there:.1e}, transformers from js {back:.1e}")
    assert there < 1e-4 and back < 1e-4
    with safetensors.safe_open(str(tmp_path / "model.safetensors"), "np") as file:
        keys = list(file.keys())
    assert any(key.endswith(".mlp.experts.gate_up_proj") for key in keys)  # js: stacked
    assert not any(".experts.0." in key or "block_sparse_moe" in key for key in keys)
    stacked = js.models.from_pretrained(tmp_path)  # and js reads its own (transformers 5's) layout
    assert relative_error(js_logits(stacked), torch_logits(reference_model)) < 1e-4


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_matches(references, case):
    reference_model, folder = references(case)
    tokens = greedy_matches(js.models.from_pretrained(folder), reference_model)
    print(case, "greedy tokens equal", tokens.shape)


def test_router_logits_and_aux_loss(references):
    """transformers' aux_loss (load_balancing_loss_func) over the sparse layers' router
    logits, with and without an attention mask; the logits are the plain forward's."""
    reference_model, folder = references("qwen3_moe")
    model = js.models.from_pretrained(folder)
    for mask in (MASK, None):
        inputs = {} if mask is None else {"attention_mask": mask}
        with torch.no_grad():
            expected = reference_model(
                torch.tensor(IDS),
                **{k: torch.tensor(v) for k, v in inputs.items()},
                output_router_logits=True,
            )
        got = model(
            jnp.asarray(IDS),
            **{k: jnp.asarray(v) for k, v in inputs.items()},
            output_router_logits=True,
        )
        assert len(got.router_logits) == len(expected.router_logits) == 2  # layers 1 and 3
        logits_error = max(
            relative_error(a, b.numpy())
            for a, b in zip(got.router_logits, expected.router_logits, strict=True)
        )
        aux_error = relative_error(got.aux_loss, expected.aux_loss.numpy())
        print("mask" if mask is not None else "no mask", float(got.aux_loss), aux_error)
        assert logits_error < 1e-5 and aux_error < 1e-5
        plain = model(jnp.asarray(IDS), **{k: jnp.asarray(v) for k, v in inputs.items()})
        np.testing.assert_array_equal(np.asarray(got.logits), np.asarray(plain))


def test_aux_loss_under_gradient_checkpointing():
    """Each checkpointed block hands its router logits out of js.remat: the same loss, and its
    gradient reaches the routers."""
    config = MixtralConfig(
        vocab_size=VOCAB, **SIZES, intermediate_size=32, num_hidden_layers=2, num_local_experts=16
    )
    model = MixtralForCausalLM(config, rngs=js.Rngs(params=0))
    ids = jnp.asarray(IDS[:1, -2:])  # 2 tokens, top 2 of 16: the gather path (compiles fast)
    aux_loss = lambda m, ids: m(ids, output_router_logits=True).aux_loss  # noqa: E731
    expected = js.jit(aux_loss)(model, ids)
    model.train()
    model.gradient_checkpointing_enable()
    step = js.jit(js.value_and_grad(aux_loss))
    loss, grads = step(model, ids)
    assert "optimization_barrier" in step.lower(model, ids).as_text()  # blocks recomputed
    assert relative_error(loss, expected) < 1e-6
    flat = {".".join(map(str, path)): g for path, g in nnx.to_flat_state(grads)}
    assert float(jnp.abs(flat["model.layers.0.mlp.gate.weight"]).max()) > 0


def test_decode_step_flops_scale_with_top_k():
    """A decode step of 2 sequences through 16 experts, top 2: the compiled block's flops are
    about top_k / num_experts of computing every expert for those tokens."""
    config = MixtralConfig(
        vocab_size=VOCAB, **SIZES, intermediate_size=64, num_hidden_layers=1, num_local_experts=16
    )
    block = _moe.SparseMoeBlock(config, rngs=js.Rngs(params=0))
    hidden = jnp.ones((2, 1, 64))  # [B, 1, hidden]: one new token per sequence

    def all_experts(x, gate_up, down):
        h = jnp.einsum("th,eoh->teo", x.reshape(-1, 64), gate_up)
        gate, up = jnp.split(h, 2, axis=-1)
        return jnp.einsum("tei,ehi->th", F.silu(gate) * up, down)

    sparse = js.jit(lambda b, x: b(x)).lower(block, hidden).compile().cost_analysis()["flops"]
    experts = block.experts
    dense = (
        jax.jit(all_experts)
        .lower(hidden, experts.gate_up_proj.value, experts.down_proj.value)
        .compile()
        .cost_analysis()["flops"]
    )
    ratio, expected = sparse / dense, 2 / 16
    print(f"decode step: sparse block {sparse:.0f} flops, all experts {dense:.0f}: {ratio:.3f}")
    assert 0.8 * expected < ratio < 1.2 * expected


def _path(fn):
    """A path called with ``experts_dispatch``'s arguments, compiled."""

    def run(x, index, weights, gate_up, down, act):
        return fn(x, _moe.Routing(index, weights), _moe.Experts(gate_up, down, act))

    return jax.jit(run, static_argnames="act")


PATHS = {
    "gather": _path(_moe.experts_gather),
    "looped": _path(_moe.experts_looped),
    "grouped": _path(_moe.experts_grouped),
    "blocked": _path(_moe.experts_blocked),
    "blocked by 1": _path(functools.partial(_moe.experts_blocked, block=1)),
    "dispatch": _moe.experts_dispatch,
}


@pytest.mark.parametrize("spread", ["random", "one expert"])
def test_expert_paths_agree(spread):
    """gather, looped, grouped (ragged_dot) and blocked: the same sums as transformers' loop
    over experts."""
    rng = np.random.default_rng(0)
    T, H, inner, E, k = 13, 16, 8, 8, 2
    x = rng.normal(size=(T, H)).astype(np.float32)
    gate_up = rng.normal(size=(E, 2 * inner, H)).astype(np.float32)
    down = rng.normal(size=(E, H, inner)).astype(np.float32)
    index = np.stack([rng.choice(E, k, replace=False) for _ in range(T)])
    if spread == "one expert":
        index[:, 0] = 5
        index[:, 1] = np.where(index[:, 1] == 5, 6, index[:, 1])
    weights = rng.random((T, k)).astype(np.float32)
    expected = np.zeros((T, H), np.float32)
    for e in range(E):  # transformers' loop
        for t, j in zip(*np.nonzero(index == e), strict=True):
            gate, up = np.split(gate_up[e] @ x[t], 2)
            expected[t] += weights[t, j] * (down[e] @ (gate / (1 + np.exp(-gate)) * up))
    args = tuple(map(jnp.asarray, (x, index, weights, gate_up, down)))
    for name, fn in PATHS.items():
        assert relative_error(fn(*args, act=F.silu), expected) < 1e-5, name


class _Folder:
    """A stand-in for the loader's ``_Weights``: arrays by name, reads recorded."""

    def __init__(self, arrays):
        self.arrays, self.reads = arrays, []
        self.shapes = {k: v.shape for k, v in arrays.items()}
        self.dtypes = dict.fromkeys(arrays, "F32")

    def read(self, key, index=None):
        self.reads.append(key)
        return self.arrays[key] if index is None else self.arrays[key][index]


def test_expert_stacks_reads_slices():
    rng = np.random.default_rng(0)
    names = {"gate_up_proj": ("w1", "w3"), "down_proj": ("w2",)}
    arrays = {"m.layers.0.moe.gate.weight": rng.normal(size=(4, 6))}
    for e in range(4):
        for name, shape in {"w1": (3, 6), "w3": (3, 6), "w2": (6, 3)}.items():
            arrays[f"m.layers.0.moe.experts.{e}.{name}.weight"] = rng.normal(size=shape)
    folder = _Folder(arrays)
    view = _moe.ExpertStacks(folder, names)
    assert view.shapes == {
        "m.layers.0.moe.gate.weight": (4, 6),
        "m.layers.0.moe.experts.gate_up_proj": (4, 6, 6),
        "m.layers.0.moe.experts.down_proj": (4, 6, 3),
    }
    stacked = np.stack(
        [
            np.concatenate([arrays[f"m.layers.0.moe.experts.{e}.{n}.weight"] for n in ("w1", "w3")])
            for e in range(4)
        ]
    )
    np.testing.assert_array_equal(view.read("m.layers.0.moe.experts.gate_up_proj"), stacked)
    folder.reads.clear()
    index = (slice(2, 4), slice(1, 5), slice(None))  # experts 2-3, rows across gate and up
    np.testing.assert_array_equal(
        view.read("m.layers.0.moe.experts.gate_up_proj", index), stacked[index]
    )
    assert sorted(folder.reads) == [
        f"m.layers.0.moe.experts.{e}.{n}.weight" for e in (2, 3) for n in ("w1", "w3")
    ]
    np.testing.assert_array_equal(
        view.read("m.layers.0.moe.experts.gate_up_proj", (slice(None), slice(0, 6, 2))),
        stacked[:, 0:6:2],
    )
    del arrays["m.layers.0.moe.experts.3.w2.weight"]
    with pytest.raises(
        ValueError, match="per-expert tensors of 'm.layers.0.moe.experts.down_proj' are incomplete"
    ):
        _moe.ExpertStacks(_Folder(arrays), names)


@pytest.mark.parametrize("name", ["MixtralConfig", "Qwen3MoeConfig", "Qwen2MoeConfig"])
def test_config_defaults_match_transformers(transformers, name):
    expected = getattr(transformers, name)().to_diff_dict()
    expected.pop("transformers_version")
    got = {"MixtralConfig": MixtralConfig, "Qwen3MoeConfig": Qwen3MoeConfig}.get(
        name, Qwen2MoeConfig
    )().to_dict()
    if name == "MixtralConfig":  # transformers writes None and computes the same 4096 // 32
        assert expected["head_dim"] is None and got["head_dim"] == 128
        got["head_dim"] = None
    assert got == expected


def test_hub_names_of_configs():
    config = Qwen3MoeConfig(num_experts=16, head_dim=8)  # a hub config.json's keys
    assert config.num_local_experts == 16 and config.to_dict()["num_local_experts"] == 16
    assert config.head_dim == 8 and Qwen3MoeConfig(hidden_size=64).head_dim == 2


@pytest.mark.process
@pytest.mark.slow
def test_experts_shard_over_8_devices(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(HERE), *(str(p) for p in HERE.resolve().parents[1].glob("*/src"))]
        ),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8",
    }
    done = subprocess.run(
        [sys.executable, str(HERE / "moe_sharded_script.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    print(done.stdout)
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["mixtral", "qwen3_moe"], lines


def test_forward_shows_the_skeletons_arguments_and_the_router_option():
    import inspect

    from js.models.mixtral import MixtralForCausalLM

    names = list(inspect.signature(MixtralForCausalLM.forward).parameters)
    assert names[:5] == ["self", "input_ids", "attention_mask", "position_ids", "inputs_embeds"]
    assert names[-2:] == ["logits_to_keep", "output_router_logits"]
