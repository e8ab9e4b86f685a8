"""Named, checkpointable random streams."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from flax.nnx.rnglib import RngStream

from ._variables import _Tracked, compare_state, placed_like, state_arrays


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
        return self._stream(name)()

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

    def load_state_dict(self, state_dict) -> None:
        """Restore keys and counters saved by :meth:`state_dict`, all or nothing."""
        arrays = state_arrays(state_dict, "Rngs")
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
