"""js.shard, js.shard_batch and js.jit on a mesh.

Refusals run here on a one-device mesh; the placement itself runs in a child process with 8
simulated CPU devices (the device count must be set before jax starts).
"""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from core_models import MLP, mse
from jax.sharding import AxisType, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

import js


def auto_mesh():
    return jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,))


def unmoved(model) -> bool:
    return all(isinstance(p.value.sharding, SingleDeviceSharding) for p in model.parameters())


def test_an_explicit_axes_mesh_is_refused_with_the_fix():
    mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Explicit,))
    model = MLP(rngs=js.Rngs(params=0))
    with pytest.raises(NotImplementedError, match=r"\['data'\] are not AxisType.Auto.*Fix: jax"):
        js.shard(model, mesh)
    with pytest.raises(NotImplementedError, match=r"axis_types=\(AxisType.Auto,\) \* 1"):
        js.shard_batch(np.zeros((2, 3)), mesh)
    assert unmoved(model)


def test_wrong_types_are_refused():
    model = MLP(rngs=js.Rngs(params=0))
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh, got tuple"):
        js.shard(model, (1,))
    with pytest.raises(TypeError, match="js.shard places a Module or js.Rngs, got dict"):
        js.shard({}, auto_mesh())
    with pytest.raises(TypeError, match=r"each rule is a \(pattern, PartitionSpec\) pair"):
        js.shard(model, auto_mesh(), [("*.weight", ("data", None))])
    assert unmoved(model)


def test_rules_are_checked_before_anything_moves():
    model, mesh = MLP(rngs=js.Rngs(params=0)), auto_mesh()
    with pytest.raises(KeyError, match=r"axes of the mesh \(\['data'\]\): '\*.weight': 'model'"):
        js.shard(model, mesh, [("*.weight", P("model", None))])
    with pytest.raises(ValueError, match="rule 'encoder.\\*' matches no parameter or buffer"):
        js.shard(model, mesh, [("layers.*.weight", P("data")), ("encoder.*", P("data"))])
    with pytest.raises(ValueError, match=r"'layers.0.bias' \[16\]: .* names 2 dimensions, the"):
        js.shard(model, mesh, [("*.bias", P("data", None))])
    with pytest.raises(KeyError, match="js.shard: batch_axis 'batch' is not an axis of the mesh"):
        js.shard(model, mesh, batch_axis="batch")
    # JAX's own DuplicateSpecError came after fc1.weight, fc1.bias and fc2.bias had moved
    with pytest.raises(ValueError, match=r"nothing was moved. A mesh axis .* '\*.weight': "):
        js.shard(model, mesh, [("*.bias", P("data")), ("*.weight", P("data", "data"))])
    with pytest.raises(ValueError, match=r"uses \['data'\] more than once"):
        js.shard(model, mesh, [("*", P(("data", "data")))])
    assert unmoved(model)


def test_unknown_axis_errors_read_cleanly():
    """A KeyError (a missing name) whose str() is the message: no quotes, no escapes."""
    model, mesh = MLP(rngs=js.Rngs(params=0)), auto_mesh()
    with pytest.raises(KeyError) as caught:
        js.shard(model, mesh, [("*.weight", P("model", None))])
    assert str(caught.value).startswith("js.shard: rules name axes that are not axes of the mesh")
    with pytest.raises(KeyError) as caught:
        js.shard_batch(np.zeros((2, 3)), mesh, axis="batch")
    assert str(caught.value) == (
        "js.shard_batch: axis 'batch' is not an axis of the mesh; its axes are ['data']. "
        "Fix: name one of them, or build the mesh with it."
    )


def test_shard_batch_refuses_a_missing_axis_and_scalars():
    with pytest.raises(KeyError, match=r"axis 'batch' is not an axis of the mesh; its axes are"):
        js.shard_batch(np.zeros((2, 3)), auto_mesh(), axis="batch")
    with pytest.raises(ValueError, match=r"\['n'\] \[\]: no leading dimension"):
        js.shard_batch({"x": np.zeros((2, 3)), "n": 3}, auto_mesh())


def test_state_on_a_mesh_and_on_one_device_is_refused():
    model, mesh = js.shard(MLP(rngs=js.Rngs(params=0)), auto_mesh()), auto_mesh()
    assert all(p.value.sharding.mesh == mesh for p in model.parameters())
    rngs = js.Rngs(noise=0)  # not sharded
    step = js.jit(lambda model, rngs, x: model(x + jax.random.normal(rngs.next("noise"))))
    x = js.shard_batch(jnp.ones((4, 10)), mesh)
    with pytest.raises(ValueError, match="some state is on a mesh .* 'noise.key' of stateful"):
        step(model, rngs, x)
    js.shard(rngs, mesh)
    assert step(model, rngs, x).shape == (4, 4)


# Runs in a child process with 8 CPU devices.
EIGHT_DEVICES = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, PartitionSpec as P, SingleDeviceSharding
from core_models import MLP, SGD, mse
import js

mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
model, reference = MLP(rngs=js.Rngs(params=0)), MLP(rngs=js.Rngs(params=0))
try:  # layers.2.weight is [4, 16]: 4 rows do not split over 8 devices
    js.shard(model, mesh, [("layers.*.weight", P("data", None))])
except ValueError as error:
    assert "'layers.2.weight' [4, 16]: dimension 0 (4) is not divisible by 'data' (8" in str(error)
else:
    raise SystemExit("an indivisible dimension was not refused")
assert isinstance(model.layers[0].weight.value.sharding, SingleDeviceSharding)

rules = [("layers.2.weight", P(None, "data")), ("layers.*.weight", P("data", None))]
js.shard(model, mesh, rules)  # the first matching rule wins
specs = {path: p.value.sharding.spec for path, p in model.named_parameters()}
assert specs["layers.2.weight"] == P(None, "data") and specs["layers.0.weight"] == P("data", None)
assert specs["layers.0.bias"] == P(), specs
for path, p in model.named_parameters():
    shards = p.value.addressable_shards
    assert len(shards) == 8, path
    if "weight" in path:
        assert all(s.data.size * 8 == p.value.size for s in shards), path

try:
    js.shard_batch(np.zeros((12, 10), np.float32), mesh)
except ValueError as error:
    assert "over 8 devices, but batch [12, 10]: 12 rows" in str(error), error
else:
    raise SystemExit("12 rows over 8 devices were not refused")

@js.jit
def step(model, opt, x, y):
    loss, grads = js.value_and_grad(mse)(model, x, y)
    opt.step(grads)
    return loss

rng = np.random.default_rng(0)
x, y = rng.normal(size=(16, 10)).astype(np.float32), rng.normal(size=(16, 4)).astype(np.float32)
gx, gy = js.shard_batch((x, y), mesh)
assert gx.sharding.spec == P("data") and len(gx.addressable_shards) == 8
opt, ref_opt = SGD(model.parameters(), 0.1), SGD(reference.parameters(), 0.1)
ref_step = js.jit(step.__wrapped__)
for _ in range(3):
    before = model.layers[0].weight.value
    loss, ref_loss = step(model, opt, gx, gy), ref_step(reference, ref_opt, x, y)
    assert before.is_deleted()  # donated: updated in place
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
assert {path: p.value.sharding.spec for path, p in model.named_parameters()} == specs
for a, b in zip(model.parameters(), reference.parameters(), strict=True):
    np.testing.assert_allclose(a.value, b.value, rtol=1e-5, atol=1e-6)
binding = next(iter(step._bindings.values()))
compiled = step.lower(model, opt, gx, gy).compile()
state_in, state_out = compiled.input_shardings[0][0], compiled.output_shardings[1]
now = [v[...].sharding for v in binding.variables]
assert all(a.is_equivalent_to(b, 2) for a, b in zip(state_in, now)), state_in
assert all(a.is_equivalent_to(b, 2) for a, b in zip(state_out, now)), state_out

model.load_state_dict(reference.state_dict())  # loaded values keep the mesh placement
assert {path: p.value.sharding.spec for path, p in model.named_parameters()} == specs
assert step(model, opt, gx, gy).shape == ()
from js._variables import placed_like  # many NumPy values take its jitted copy, onto 8 devices
replicated = model.layers[2].bias.value.sharding  # P(): every device holds it
many = placed_like([np.full(4, i, np.float32) for i in range(1100)],
                   [model.layers[2].bias.value] * 1100)
assert all(a.sharding == replicated and len(a.addressable_shards) == 8 for a in many)
assert [float(a[0]) for a in many] == list(range(1100))

rngs = js.shard(js.Rngs(noise=0), mesh)
draw = js.jit(lambda rngs, x: x + jax.random.normal(rngs.next("noise"), x.shape))
assert draw(rngs, gx).sharding.spec == P("data") and int(rngs.noise.count[...]) == 1
assert len(rngs.noise.key[...].sharding.device_set) == 8
print("ok")
"""


def run_with_devices(script: str, devices: int, cwd: Path) -> str:
    """Run ``script`` in a child Python with ``devices`` CPU devices; its stdout."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flags = env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    env["XLA_FLAGS"] = flags.strip()
    child = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    return child.stdout


@pytest.mark.process
@pytest.mark.slow
def test_eight_devices_placement_rules_compiled_shardings_and_donation():
    assert run_with_devices(EIGHT_DEVICES, 8, Path(__file__).parent).strip() == "ok"


def test_one_device_mesh_trains_like_no_mesh():
    mesh = auto_mesh()
    model, reference = MLP(rngs=js.Rngs(params=0)), MLP(rngs=js.Rngs(params=0))
    js.shard(model, mesh)
    grad = js.jit(lambda model, x, y: js.value_and_grad(mse)(model, x, y)[0])
    x, y = jnp.ones((4, 10)), jnp.zeros((4, 4))
    loss = grad(model, *js.shard_batch((x, y), mesh))
    np.testing.assert_allclose(loss, grad(reference, x, y), rtol=1e-6)


def test_grad_and_scan_steps_refuse_a_structure_change_like_jit():
    model = MLP(rngs=js.Rngs(params=0))

    def switch(model, x, y):
        model.eval()
        return mse(model, x, y)

    x, y = jnp.ones((2, 10)), jnp.zeros((2, 4))
    with pytest.raises(RuntimeError, match="js.value_and_grad: .*switch changed the structure"):
        js.value_and_grad(switch)(model, x, y)
    with pytest.raises(RuntimeError, match="js.scan_steps: .*switch changed the structure"):
        js.scan_steps(switch)(model, x[None], y[None])
    assert model.training
