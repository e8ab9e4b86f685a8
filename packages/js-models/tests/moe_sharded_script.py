"""Run by test_moe.py in a subprocess with 8 simulated CPU devices: Mixtral (8 experts) and
Qwen3-MoE (16 experts) with their experts split over an "expert" mesh axis, by js.shard and by
from_pretrained(mesh=, rules=) from a per-expert folder, give the single-device outputs (prefill
and a decode step), each device holding E / 8 whole experts and reading only theirs."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
from jax.sharding import AxisType
from moe_support import split_experts

import js
import js.models
from js.models import _moe, _weight_files
from js.models.mixtral import MixtralConfig, MixtralForCausalLM
from js.models.qwen3_moe import Qwen3MoeConfig, Qwen3MoeForCausalLM

SIZES = dict(vocab_size=96, hidden_size=32, num_attention_heads=4, num_key_value_heads=2)
CASES = {
    "mixtral": (
        MixtralForCausalLM,
        MixtralConfig(**SIZES, intermediate_size=16, num_hidden_layers=2, num_local_experts=8),
        "block_sparse_moe",
    ),
    "qwen3_moe": (
        Qwen3MoeForCausalLM,
        Qwen3MoeConfig(
            **SIZES,
            num_hidden_layers=2,
            num_experts=16,
            num_experts_per_tok=4,
            moe_intermediate_size=16,
            norm_topk_prob=True,
        ),
        "mlp",
    ),
}


def outputs(model, ids, mask):
    step = js.jit(lambda m, i, a: m(i, attention_mask=a))
    prefill = np.asarray(step(model, ids, mask))
    decode = np.asarray(step(model, ids[:1, :1], mask[:1, :1]))  # one token: the gather path
    return prefill, decode


def main(root: Path) -> None:
    mesh = jax.make_mesh((8,), ("expert",), axis_types=(AxisType.Auto,))
    rules = _moe.expert_rules("expert")
    ids = np.array([[5, 9, 13, 2, 40, 7, 1, 3], [3, 3, 8, 21, 60, 1, 2, 4]])
    mask = np.array([[1, 1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1, 1]])
    reads: list[tuple[str, tuple]] = []
    original = _weight_files._Weights.read

    def counting(self, key, index=None):
        out = original(self, key, index)
        reads.append((key, out.shape))
        return out

    _weight_files._Weights.read = counting  # type: ignore[method-assign]
    for name, (cls, config, layer) in CASES.items():
        model = cls(config, rngs=js.Rngs(params=0))
        want = outputs(model, ids, mask)
        model.save_pretrained(root / name / "stacked")
        split_experts(
            root / name / "stacked", root / name / "split", config.expert_file_names, layer
        )
        placed = js.shard(cls(config, rngs=js.Rngs(params=0)), mesh, rules)
        reads.clear()
        loaded = js.models.from_pretrained(root / name / "split", mesh=mesh, rules=rules)
        E = config.routed_experts()
        for label, sharded in (("js.shard", placed), ("from_pretrained", loaded)):
            got = outputs(sharded, ids, mask)
            for a, b in zip(got, want, strict=True):
                diff = float(np.abs(a - b).max() / np.abs(b).max())
                assert diff < 1e-5, (name, label, diff)
            for path, param in sharded.named_parameters():
                shards = param.value.addressable_shards
                assert len({s.device for s in shards}) == 8, path
                sizes = {s.data.shape[0] for s in shards}
                expected = E // 8 if ".experts." in path else param.value.shape[0]
                assert sizes == {expected}, (name, label, path, sizes)
        expert_reads = [shape for key, shape in reads if ".experts." in key]
        # every per-expert matrix read once, whole, by the device holding it
        assert len(expert_reads) == 3 * E * config.num_hidden_layers, len(expert_reads)
        print(f"{name}: sharded outputs equal, {E // 8} experts per device, own experts read")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
