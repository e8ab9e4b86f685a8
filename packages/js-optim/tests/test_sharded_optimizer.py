"""Optimizers over parameters placed by js.shard: every moment on its parameter's sharding.

Runs in a child process with two simulated CPU devices (set before jax starts).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SHARDED = """
import jax, numpy as np, optax
from jax.sharding import AxisType, PartitionSpec as P
from optim_models import MLP, batch, mse
import js
from js.optim import Adam

mesh = jax.make_mesh((2,), ("data",), axis_types=(AxisType.Auto,))
rules = [("hidden.weight", P(None, "data")), ("out.weight", P("data", None))]
model, reference = js.shard(MLP(), mesh, rules), MLP()
opt, ref_opt = Adam(model.parameters(), lr=0.01), Adam(reference.parameters(), lr=0.01)
params = dict(model.named_parameters())
for key, variable in zip(opt._keys, opt._state, strict=True):
    sharding = variable[...].sharding
    if key.startswith(("adam.mu.", "adam.nu.")):  # a moment: its parameter's sharding
        param = params[key.split(".", 2)[2]][...]
        assert sharding == param.sharding, (key, sharding)
        if "weight" in key:
            assert all(s.data.size * 2 == param.size for s in variable[...].addressable_shards)
    else:  # a counter: replicated on the mesh
        assert sharding.spec == P() and len(sharding.device_set) == 2, (key, sharding)
assert opt._step_count[...].sharding.spec == P()
for group in opt._hyper:  # the groups' option arrays: replicated
    assert all(v[...].sharding.spec == P() and len(v[...].sharding.device_set) == 2 for v in group)
opt.param_groups[0]["lr"] = 0.02  # a written option stays replicated
assert all(v[...].sharding.spec == P() for v in opt._hyper[0])
opt.param_groups[0]["lr"] = 0.01
raw = js.optim.Optax(model.parameters(), optax.adam(0.01))  # optax's state placed the same way
for key, variable in zip(raw._keys, raw._state, strict=True):
    if key.startswith(("0.mu.", "0.nu.")):  # optax.adam: a chain, its first state
        param = params[key.split(".", 2)[2]][...]
        assert variable[...].sharding == param.sharding, (key, variable[...].sharding)
    else:
        assert variable[...].sharding.spec == P(), key

step = js.jit(lambda m, o, x, y: o.step(js.value_and_grad(mse)(m, x, y)[1]))
x, y = batch()
for _ in range(3):
    step(model, opt, *js.shard_batch((x, y), mesh))
    step(reference, ref_opt, x, y)
opt.step(js.value_and_grad(mse)(model, *js.shard_batch((x, y), mesh))[1])  # eagerly too
ref_opt.step(js.value_and_grad(mse)(reference, x, y)[1])
for (path, a), b in zip(model.named_parameters(), reference.parameters(), strict=True):
    np.testing.assert_allclose(a[...], b[...], rtol=1e-6, atol=1e-6)
    assert a[...].sharding == params[path][...].sharding, path

late = MLP()  # sharded after its optimizer was built: refused at the next step
late_opt = Adam(late.parameters())
js.shard(late, mesh)
try:
    late_opt.step(js.value_and_grad(mse)(late, *js.shard_batch((x, y), mesh))[1])
except ValueError as error:
    print(error)
again = js.shard(MLP(), mesh)  # replicated on the mesh, then split over it
again_opt = Adam(again.parameters())
js.shard(again, mesh, [("out.weight", P("data", None))])
try:
    again_opt.step(js.value_and_grad(mse)(again, *js.shard_batch((x, y), mesh))[1])
except ValueError as error:
    print(error)
"""


@pytest.mark.process
@pytest.mark.slow
def test_moments_follow_sharded_parameters_and_late_sharding_is_refused():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flags = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    env["XLA_FLAGS"] = flags.strip()
    child = subprocess.run(
        [sys.executable, "-W", "error", "-c", SHARDED],
        cwd=Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    moved, split = child.stdout.strip().splitlines()
    assert moved.startswith(
        "Adam.step: parameters moved to another device after the optimizer was built (its state "
        "stays where they were): 'hidden.weight': built for CpuDevice(id=0), now on "
        "[CpuDevice(id=0), CpuDevice(id=1)];"
    ), moved
    assert "'out.weight': built for P(), now on P('data', None)." in split
    assert split.count("built for") == 1, split
