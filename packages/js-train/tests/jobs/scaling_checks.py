"""The multi-device checks, run as a child process with 8 CPU devices (see test_scaling.py).

Each check trains a copy on one device (no mesh) and a copy on the 8-device mesh, from the same
initial weights and the same global batches, and prints one JSON line of what it measured.
"""

import json
import sys

import jax
import numpy as np
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P
from scaling_models import (
    Block,
    adam,
    block_batches,
    block_step,
    cnn,
    cnn_step,
    comparable,
    digits_batches,
)

import js
from js.training import ArrayLoader, Task, Trainer


def eight_device_mesh():
    return jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))


MESH = None  # set in __main__: importing this file (doctest collection) must not need 8 devices
BLOCK_FSDP = [("ln*", P()), ("*weight", P("data", None)), ("*bias", P("data"))]


def largest_difference(a, b) -> float:
    pairs = zip(a, b, strict=True)
    return float(max(np.max(np.abs(np.asarray(x) - np.asarray(y))) for x, y in pairs))


def train(step, objects, batches, mesh=None) -> list[float]:
    losses = []
    for batch in batches:
        batch = batch if mesh is None else js.shard_batch(batch, mesh)
        losses.append(float(step(*objects, *batch)))
    return losses


def data_parallel() -> dict:
    """20 Adam steps, digits CNN (batch 48) and transformer block (batch 16), 1 vs 8 devices."""
    out = {}
    for name, build, step, batches in (
        ("cnn", lambda: cnn(), cnn_step, digits_batches(20, 48)),
        ("block", lambda: (Block(rngs=js.Rngs(params=0)),), block_step, block_batches(20, 16)),
    ):
        single, sharded = build(), build()
        for obj in sharded:
            js.shard(obj, MESH)
        one = train(step, (single[0], adam(single[0]), *single[1:]), batches)
        eight = train(step, (sharded[0], adam(sharded[0]), *sharded[1:]), batches, MESH)
        out[name] = {
            "loss_diff": largest_difference(one, eight),
            "param_diff": largest_difference(comparable(single[0]), comparable(sharded[0])),
            "first_loss": one[0],
            "last_loss": one[-1],
        }
    return out


def state_bytes(step, objects, batch) -> int:
    """Per-device argument bytes of the compiled step, less the batch's share on one device."""
    compiled = step.lower(*objects, *batch).compile()
    batch_bytes = sum(b.addressable_shards[0].data.nbytes for b in jax.tree.leaves(batch))
    return compiled.memory_analysis().argument_size_in_bytes - batch_bytes


def fully_sharded() -> dict:
    """The block with every weight and bias split over 'data': placement, memory, losses."""
    single, sharded = Block(rngs=js.Rngs(params=0)), Block(rngs=js.Rngs(params=0))
    js.shard(sharded, MESH, BLOCK_FSDP)
    opt1, opt8 = adam(single), adam(sharded)
    split = {path for path, p in sharded.named_parameters() if not path.startswith("ln")}
    for path, p in sharded.named_parameters():
        spec = p.value.sharding.spec
        assert (spec != P()) == (path in split), (path, spec)
        if path in split:
            assert all(s.data.size * 8 == p.value.size for s in p.value.addressable_shards), path
    state = zip(opt8._keys, opt8._state, strict=True)
    moments = [v for k, v in state if k.startswith(("adam.mu", "adam.nu"))]
    split_moments = [v[...] for v in moments if len(v[...].sharding.spec) > 0]
    assert len(split_moments) == 2 * len(split)  # mu and nu of every split parameter
    assert all(s.data.size * 8 == m.size for m in split_moments for s in m.addressable_shards)
    batches = block_batches(20, 16)
    one = train(block_step, (single, opt1), batches)
    eight = train(block_step, (sharded, opt8), batches, MESH)
    sharded_bytes = 3 * sum(
        p.value.nbytes for path, p in sharded.named_parameters() if path in split
    )
    bytes1 = state_bytes(block_step, (single, opt1), [jax.numpy.asarray(b) for b in batches[0]])
    bytes8 = state_bytes(block_step, (sharded, opt8), js.shard_batch(batches[0], MESH))
    replicated = bytes1 - sharded_bytes  # LayerNorms, counters: whole on every device
    assert bytes8 <= replicated + sharded_bytes / 8 * 1.1, (bytes1, bytes8, sharded_bytes)
    return {
        "loss_diff": largest_difference(one, eight),
        "param_diff": largest_difference(comparable(single), comparable(sharded)),
        "state_bytes_1": bytes1,
        "state_bytes_8": bytes8,
        "sharded_bytes_1": sharded_bytes,
        "replicated_bytes": replicated,
    }


def two_axes() -> dict:
    """The block on a ("data", "model") mesh, Megatron-style rules (docs/scaling.md recipe 3)."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    rules = [
        ("fc1.weight", P("model", None)),
        ("fc1.bias", P("model")),
        ("fc2.weight", P(None, "model")),
        ("attn.in_proj_weight", P("model", None)),
    ]
    single, sharded = Block(rngs=js.Rngs(params=0)), Block(rngs=js.Rngs(params=0))
    js.shard(sharded, mesh, rules, batch_axis="data")
    assert sharded.fc2.weight.value.addressable_shards[0].data.shape == (32, 32)
    batches = block_batches(20, 16)
    one = train(block_step, (single, adam(single)), batches)
    eight = train(block_step, (sharded, adam(sharded)), batches, mesh)
    return {
        "loss_diff": largest_difference(one, eight),
        "param_diff": largest_difference(comparable(single), comparable(sharded)),
    }


def trainer_on_mesh() -> dict:
    """Trainer(mesh=) with 2 steps per dispatch and validation equals Trainer() on one device."""
    (x, y), _, _ = digits_batches(1, 256)[0], None, None
    histories = []
    for mesh, k in ((None, 1), (MESH, 2)):
        model, rngs = cnn()
        if mesh is not None:
            js.shard(model, mesh)
            js.shard(rngs, mesh)
        task = Task(model, adam(model), rngs=rngs)
        trainer = Trainer(1, mesh=mesh, steps_per_execution=k, progress=False, verbose=False)
        trainer.fit(task, ArrayLoader(x, y, batch_size=64), ArrayLoader(x, y, batch_size=128))
        histories.append(trainer.history[0])
        if mesh is not None:
            assert trainer.transfers == 2, trainer.transfers  # one read per epoch and split
            assert all(p.value.sharding.mesh == mesh for p in model.parameters())
    keys = ("train/loss", "train/accuracy", "val/loss", "val/accuracy")
    return {"history_diff": max(abs(histories[0][k] - histories[1][k]) for k in keys)}


if __name__ == "__main__":
    assert jax.device_count() == 8
    MESH = eight_device_mesh()
    checks = {
        "dp": data_parallel,
        "fsdp": fully_sharded,
        "tp": two_axes,
        "trainer": trainer_on_mesh,
    }
    for name in sys.argv[1:]:
        print(json.dumps({name: checks[name]()}), flush=True)
