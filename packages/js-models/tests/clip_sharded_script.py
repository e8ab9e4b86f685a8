"""Run by test_sharded_load.py in a subprocess with 4 simulated CPU devices: a CLIP folder
loaded onto a 1x4 mesh (the towers' attention and MLP weights split over "model") gives the
unsharded model's logits_per_image, each device holding 1/4 of each ruled array."""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

import jax
import numpy as np
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import js
import js.models
from js.models.clip import CLIPConfig, CLIPModel

RULES = [
    ("*.self_attn.[qkv]_proj.weight", P("model", None)),
    ("*.self_attn.out_proj.weight", P(None, "model")),
    ("*.mlp.fc1.weight", P("model", None)),
    ("*.mlp.fc2.weight", P(None, "model")),
]


def main(root: Path) -> None:
    tower = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}
    config = CLIPConfig(
        text_config={**tower, "intermediate_size": 64, "vocab_size": 50, "eos_token_id": 3},
        vision_config={**tower, "intermediate_size": 64, "image_size": 16, "patch_size": 8},
        projection_dim=16,
    )
    model = CLIPModel(config, rngs=js.Rngs(params=0))
    rng = np.random.default_rng(0)
    for param in model.parameters():
        if param.value.ndim == 1:
            param.value = param.value + rng.normal(0, 0.2, param.value.shape).astype(np.float32)
    model.save_pretrained(root)

    ids = np.array([[0, 5, 9, 3], [0, 7, 3, 1]])
    mask = (ids != 1).astype(np.int32)
    pixels = rng.normal(size=(3, 3, 16, 16)).astype(np.float32)
    want = np.asarray(js.models.from_pretrained(root)(ids, pixels, mask).logits_per_image)
    mesh = jax.make_mesh((1, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    sharded = js.models.from_pretrained(root, mesh=mesh, rules=RULES)
    run = js.jit(lambda m, i, x, a: m(i, x, a).logits_per_image)
    got = np.asarray(run(sharded, ids, pixels, mask))
    diff = float(np.abs(got - want).max() / np.abs(want).max())
    assert diff < 1e-5, diff
    ruled = 0
    for path, param in sharded.named_parameters():
        shards = param.value.addressable_shards
        assert len({shard.device for shard in shards}) == 4, path
        split = any(fnmatch.fnmatchcase(path, pattern) for pattern, _ in RULES)
        ruled += split
        sizes = {shard.data.size for shard in shards}
        assert sizes == {param.value.size // 4 if split else param.value.size}, (path, sizes)
    assert ruled == 24, ruled  # 2 towers x 2 layers x (q, k, v, out_proj, fc1, fc2)
    print(f"clip: same logits_per_image ({diff:.1e}), {ruled} arrays 1/4 per device")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
