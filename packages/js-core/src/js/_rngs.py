"""Named, checkpointable random streams.

Outside compiled code, a stream of JAX's default ``threefry2x32`` keys is advanced on the host:
``js.Rngs(params=0)`` and ``rngs.next(name)`` compute the same key data as ``jax.random.key`` and
``jax.random.fold_in`` with a NumPy copy of the Threefry-2x32 hash, so that building a model
compiles no program per key (each eager JAX op is compiled once per shape on first use). Under
a trace (``js.jit``), or with another key implementation, flax's device path runs unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

import jax
import jax.core  # jax.core.Tracer below; pyright knows a submodule only once imported
import numpy as np
from flax import nnx
from flax.nnx import RngStream

from ._checks import compare_state
from ._flax import init_rng_stream
from ._signature import ConstructorSignature
from ._variables import _Tracked, check_state_dict, placed_like

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _rotate_left(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(k1, k2, x1, x2) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32 (20 rounds) on uint32 NumPy arrays, as ``jax._src.random.threefry2x32``."""
    k1, k2, x1, x2 = (np.asarray(v, np.uint32) for v in (k1, k2, x1, x2))
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    x = [x1 + ks[0], x2 + ks[1]]
    with np.errstate(over="ignore"):
        for block in range(5):
            for r in _ROTATIONS[block % 2]:
                x[0] = x[0] + x[1]
                x[1] = x[0] ^ _rotate_left(x[1], r)
            x[0] = x[0] + ks[(block + 1) % 3]
            x[1] = x[1] + ks[(block + 2) % 3] + np.uint32(block + 1)
    return x[0], x[1]


def _host_key(seed: int) -> jax.Array:
    # jax.random.key(seed) for 0 <= seed < 2**31 has key data [0, seed] in either x64 mode.
    return _wrap_threefry(np.array([0, seed], np.uint32))


def _wrap_threefry(data: np.ndarray) -> jax.Array:
    # wrap_key_data takes host arrays too (no program is compiled); jax annotates only jax.Array
    key_data: jax.Array = data  # pyright: ignore[reportAssignmentType]
    return jax.random.wrap_key_data(key_data, impl="threefry2x32")


def _host_seed(seed: object) -> TypeGuard[int]:
    # jax.config sets its flags as attributes at run time; its stubs do not list them
    prng = jax.config.jax_default_prng_impl  # pyright: ignore[reportAttributeAccessIssue]
    fast = prng == "threefry2x32"
    return fast and type(seed) is int and 0 <= seed < 2**31


class _Stream(RngStream):
    """flax's RngStream, whose key and counter are built on the host for a small int seed."""

    def __init__(self, key, *, tag: str):
        if not _host_seed(key):
            super().__init__(key, tag=tag)
            return
        # RngStream.__init__'s random.key and jnp.zeros would each compile a program.
        init_rng_stream(self, _host_key(key), jax.device_put(np.zeros((), np.uint32)), tag=tag)


def _concrete(*arrays) -> bool:
    return not any(isinstance(a, jax.core.Tracer) for a in arrays)


def _is_threefry(key: jax.Array) -> bool:
    return str(jax.random.key_impl(key)) == "threefry2x32"


class Rngs(_Tracked, nnx.Rngs):
    """Named random streams: ``js.Rngs(params=0, dropout=1)``.

    Each stream is a key and a counter; ``rngs.next(name)`` returns a fresh key and advances the
    counter, so a stream replays exactly from a checkpoint (:meth:`state_dict`). Constructors
    draw from ``params``; training-time dropout draws from ``dropout``. Passed to ``js.jit``, the
    counters advance in place like any other state.

    Example:
        >>> import js
        >>> rngs = js.Rngs(params=0, dropout=1)
        >>> key = rngs.next("dropout")
        >>> int(rngs.dropout.count[...])
        1
    """

    # inspect.signature(cls) shows cls.__init__'s parameters, not flax's metaclass __call__.
    __signature__ = ConstructorSignature()

    def __init__(self, default: int | jax.Array | None = None, **rngs: int | jax.Array) -> None:
        super().__init__()
        # As nnx.Rngs.__init__, with js's stream type (see _Stream).
        if isinstance(default, Mapping):
            rngs = {**default, **rngs}
        elif default is not None:
            rngs["default"] = default
        for tag, key in rngs.items():
            if isinstance(key, RngStream):
                key = key.key.get_value()
            setattr(self, tag, _Stream(key, tag=tag))

    def streams(self) -> list[str]:
        return [name for name, value in vars(self).items() if isinstance(value, RngStream)]

    def _get_stream(self, name: str, error_type: type[Exception]) -> RngStream:
        # ``rngs.dropout`` / ``rngs["dropout"]``: no silent fallback, and the streams listed.
        if not isinstance(vars(self).get(name), RngStream):
            raise error_type(
                f"Rngs has no stream {name!r}; its streams are {self.streams()}. "
                f"Fix: create it, e.g. js.Rngs({name}=0)"
            )
        return vars(self)[name]

    def _stream(self, name: str) -> RngStream:
        if not isinstance(name, str):
            raise TypeError(f"Rngs stream names are strings, got {type(name).__name__} {name!r}")
        stream = vars(self).get(name)
        if not isinstance(stream, RngStream):
            raise KeyError(
                f"Rngs has no stream {name!r}; its streams are {self.streams()}. "
                f"Fix: create it, e.g. js.Rngs({name}=0)"
            )
        return stream

    def next(self, name: str) -> jax.Array:
        """A new key from stream ``name``; advances that stream's counter."""
        stream = self._stream(name)
        key, count = stream.key.get_raw_value(), stream.count.get_raw_value()
        if not (_concrete(key, count) and key.shape == () and _is_threefry(key)):
            return stream()
        # fold_in(key, count) = threefry2x32(key, [0, count]), computed here without a program.
        k1, k2 = np.asarray(jax.random.key_data(key))
        n = np.asarray(count)
        y1, y2 = threefry2x32(k1, k2, np.uint32(0), n)
        stream.count.set_value(jax.device_put(np.uint32((int(n) + 1) % 2**32)))  # wraps, as jax
        return _wrap_threefry(np.array([y1, y2], np.uint32))

    def state_dict(self, *, as_numpy: bool = True) -> dict[str, np.ndarray]:
        """NumPy copies of each stream's key data and counter.

        Keys are ``'<stream>.key'`` and ``'<stream>.count'``. With ``as_numpy=False``, the
        ``jax.Array``s themselves (key data as ``uint32``, on their devices), not copies.
        """
        state = {}
        for name in self.streams():
            stream = self._stream(name)
            state[f"{name}.key"] = jax.random.key_data(stream.key.get_raw_value())
            state[f"{name}.count"] = stream.count.get_raw_value()
        return {key: np.array(value) for key, value in state.items()} if as_numpy else state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore keys and counters saved by :meth:`state_dict`, all or nothing."""
        arrays = check_state_dict(state_dict, "Rngs")
        current = self.state_dict(as_numpy=False)
        missing, unexpected, mismatched = compare_state(current, arrays)
        missing, unexpected = sorted(missing), sorted(unexpected)
        if missing or unexpected or mismatched:
            raise ValueError(
                "Rngs.load_state_dict failed; nothing was loaded. "
                f"missing: {missing}; unexpected: {unexpected}; mismatched: {mismatched}. "
                "Fix: load a state saved from Rngs with the same streams."
            )
        keys = list(current)
        placed = placed_like([arrays[key] for key in keys], list(current.values()))
        values = dict(zip(keys, placed, strict=True))
        for name in self.streams():
            stream = self._stream(name)
            impl = jax.random.key_impl(stream.key.get_raw_value())
            stream.key.set_value(jax.random.wrap_key_data(values[f"{name}.key"], impl=impl))
            stream.count.set_value(values[f"{name}.count"])
