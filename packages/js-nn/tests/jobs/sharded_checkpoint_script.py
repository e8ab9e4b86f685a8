"""Child process of test_checkpoint_sharded.py: ``python sharded_checkpoint_script.py MODE DIR
[ARGS]``. The device count comes from XLA_FLAGS (set by the test before jax starts); every
check prints one line the test reads, and any failure exits non-zero."""

from __future__ import annotations

import sys

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import js
from js.nn.checkpoint import load_checkpoint, save_checkpoint
from js.nn.checkpoint.digest import device_digests, host_digest


class Net(js.Module):
    """A large array (an orbax leaf of its own), a small one (packed) and a bias."""

    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.big = js.Parameter(
            np.arange(256 * 128, dtype=np.float32).reshape(256, 128) / 7 * scale
        )
        self.small = js.Parameter(np.arange(16 * 4, dtype=np.float32).reshape(16, 4) * scale)
        self.bias = js.Buffer(np.full(8, 0.5 * scale, np.float32))


def expected() -> dict:
    return Net().state_dict()


def mesh(shape: tuple, names: tuple, devices=None):
    devices = np.array(devices if devices is not None else jax.devices()[: int(np.prod(shape))])
    return jax.sharding.Mesh(
        devices.reshape(shape), names, axis_types=(AxisType.Auto,) * len(names)
    )


LAYOUTS = {  # name -> (mesh shape, axis names, spec of big, spec of small)
    "8": ((8,), ("x",), P("x", None), P("x")),
    "4": ((4,), ("x",), P(None, "x"), P("x")),
    "2x4": ((2, 4), ("a", "b"), P("b", "a"), P("a", "b")),
}


def place(net: Net, layout: str) -> None:
    if layout == "1":
        return
    shape, names, big, small = LAYOUTS[layout]
    where = mesh(shape, names)
    net.big.value = jax.device_put(net.big.value, NamedSharding(where, big))
    net.small.value = jax.device_put(net.small.value, NamedSharding(where, small))
    net.bias.value = jax.device_put(net.bias.value, NamedSharding(where, P()))


def check_loaded(net: Net, layout: str) -> None:
    shardings = {key: value.sharding for key, value in net.state_dict(as_numpy=False).items()}
    restored = load_checkpoint(sys.argv[2], {"model": net, "epoch": 0}, which="last")
    assert restored["epoch"] == 7, restored
    for key, value in net.state_dict(as_numpy=False).items():
        assert value.sharding == shardings[key], (key, value.sharding, shardings[key])
        np.testing.assert_array_equal(np.asarray(value), expected()[key], err_msg=key)
    print("restored onto", layout, flush=True)


def refuse_mismatch() -> None:
    """A sharded model that the checkpoint does not fit is refused and nothing moves."""
    net = Net(scale=2.0)
    net.big.value = np.zeros((128, 128), np.float32)
    place(net, "4")
    before = {key: np.asarray(value) for key, value in net.state_dict().items()}
    try:
        load_checkpoint(sys.argv[2], {"model": net, "epoch": 0})
    except ValueError as error:
        assert "'model': 'big': expected [128, 128] float32, checkpoint has [256, 128]" in str(
            error
        ), error
    else:
        raise AssertionError("a checkpoint that does not fit the model was loaded")
    for key, value in net.state_dict().items():
        np.testing.assert_array_equal(value, before[key])
    print("mismatch refused", flush=True)


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "save":  # save from LAYOUT, then check it restores onto each layout given
        net = Net()
        place(net, sys.argv[3])
        live = net.state_dict(as_numpy=False)
        digests = device_digests(list(live.values()))
        assert digests == [host_digest(expected()[key]) for key in live], digests
        print("digests agree", flush=True)
        save_checkpoint(path, {"model": net, "epoch": 7})
        print("saved from", sys.argv[3], flush=True)
    elif mode == "load":
        for layout in sys.argv[3:]:
            if layout == "mismatch":
                refuse_mismatch()
                continue
            net = Net(scale=0.0)
            place(net, layout)
            check_loaded(net, layout)


if __name__ == "__main__":
    main()
