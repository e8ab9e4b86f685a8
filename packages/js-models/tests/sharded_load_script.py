"""Run by test_sharded_load.py in a subprocess with 8 simulated CPU devices: a GPT-2 folder
(single file, then a sharded index) loaded onto a 1x8 mesh equals the single-device load, each
device holds 1/8 of each ruled array, and only slices are read for them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import numpy as np
import safetensors.numpy
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import js
import js.models
from js.models import GPT2Config, GPT2LMHeadModel, _weight_files

RULES = [
    ("transformer.wte.weight", P("model", None)),
    ("*.attn.c_attn.weight", P(None, "model")),
    ("*.attn.c_attn.bias", P("model")),
    ("*.mlp.c_fc.weight", P(None, "model")),
    ("*.mlp.c_proj.weight", P("model", None)),
]


def main(root: Path) -> None:
    config = GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=64, n_positions=16)
    model = GPT2LMHeadModel(config, rngs=js.Rngs(params=0))
    rng = np.random.default_rng(0)
    for name, param in model.named_parameters():
        if name.endswith("bias") or ".ln_" in name:
            param.value = param.value + rng.normal(0, 0.2, param.value.shape).astype(np.float32)
    model.save_pretrained(root / "single")
    # the same tensors as a two-shard index folder
    tensors = safetensors.numpy.load_file(str(root / "single" / "model.safetensors"))
    (root / "index").mkdir()
    (root / "index" / "config.json").write_text((root / "single" / "config.json").read_text())
    names = sorted(tensors)
    weight_map = {}
    for part, chunk in enumerate((names[::2], names[1::2])):
        file = f"model-0000{part + 1}-of-00002.safetensors"
        safetensors.numpy.save_file({k: tensors[k] for k in chunk}, str(root / "index" / file))
        weight_map.update(dict.fromkeys(chunk, file))
    index = {"metadata": {}, "weight_map": weight_map}
    (root / "index" / "model.safetensors.index.json").write_text(json.dumps(index))

    ids = np.array([[5, 9, 13, 2, 40, 7], [3, 3, 8, 21, 60, 1]])
    mask = np.array([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]])
    reads: list[tuple[str, tuple]] = []
    original = _weight_files._Weights.read

    def counting(self, key, index=None):
        out = original(self, key, index)
        reads.append((key, out.shape))
        return out

    _weight_files._Weights.read = counting  # type: ignore[method-assign]
    mesh = jax.make_mesh((1, 8), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    for layout in ("single", "index"):
        single = js.models.from_pretrained(root / layout)
        want = np.asarray(single(input_ids=ids, attention_mask=mask))
        reads.clear()
        sharded = js.models.from_pretrained(root / layout, mesh=mesh, rules=RULES)
        got = np.asarray(
            js.jit(lambda m, i, a: m(input_ids=i, attention_mask=a))(sharded, ids, mask)
        )
        diff = float(np.abs(got - want).max() / np.abs(want).max())
        assert diff < 1e-5, diff
        assert sharded.lm_head.weight is sharded.transformer.wte.weight
        for path, param in sharded.named_parameters():
            value = param.value
            shards = value.addressable_shards
            assert len({s.device for s in shards}) == 8, path
            ruled = any(__import__("fnmatch").fnmatchcase(path, p) for p, _ in RULES)
            sizes = {s.data.size for s in shards}
            assert sizes == {value.size // 8 if ruled else value.size}, (path, sizes)
        ruled_reads = [s for k, s in reads if "c_fc.weight" in k or "wte" in k]
        assert ruled_reads and all(
            int(np.prod(s)) in (32 * 128 // 8, 64 * 32 // 8) for s in ruled_reads
        ), ruled_reads
        print(f"{layout}: same outputs ({diff:.1e}), 1/8 per device")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
