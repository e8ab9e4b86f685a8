"""The shell shared by ``RNN``, ``LSTM`` and ``GRU`` (``_recurrent.py``): construction and
validation of everything static (options, shapes, state, lengths) before one call of the
compiled pure function ``_recurrent_scan.recurrent`` with the weights as arrays.
"""

from __future__ import annotations

import numbers
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from js import Module, Parameter

from ._checks import check_float_dtype, check_int
from ._linear import uniform_fan_in
from ._lstm_kernel import forward_mode
from ._recurrent_scan import recurrent

# -- modules ---------------------------------------------------------------------------------


def _check_options(name: str, bias, batch_first, dropout, bidirectional) -> float:
    """Refuse PyTorch options of the wrong type, value or an unsupported combination."""
    for arg, value in (
        ("bias", bias),
        ("batch_first", batch_first),
        ("bidirectional", bidirectional),
    ):
        if not isinstance(value, bool):
            raise TypeError(f"{name}: {arg} must be a bool, got {value!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
        raise TypeError(f"{name}: dropout must be a float in [0, 1], got {dropout!r}")
    if not 0.0 <= dropout <= 1.0:
        raise ValueError(f"{name}: dropout must be in [0, 1], got {dropout!r}")
    if bidirectional:
        raise NotImplementedError(
            f"{name}: bidirectional=True is not implemented. Fix: pass bidirectional=False; "
            f"for a backward direction run a second {name} over the time-reversed input and "
            "concatenate the two sequences on the feature axis"
        )
    return float(dropout)


class _Recurrent(Module):
    """Shared construction, validation and layer loop of ``RNN``, ``LSTM`` and ``GRU``."""

    _gates = 1
    _state_names = ("h",)
    _cell = "tanh"

    def __init__(
        self,
        input_size,
        hidden_size,
        num_layers,
        bias,
        batch_first,
        dropout,
        bidirectional,
        *,
        unroll,
        dtype,
        rngs,
    ):
        super().__init__()
        name = type(self).__name__
        input_size, hidden_size, num_layers, unroll = (
            check_int(name, arg, value)
            for arg, value in (
                ("input_size", input_size),
                ("hidden_size", hidden_size),
                ("num_layers", num_layers),
                ("unroll", unroll),
            )
        )
        self.dropout = _check_options(name, bias, batch_first, dropout, bidirectional)
        if self.dropout and num_layers == 1:  # as PyTorch warns
            warnings.warn(
                f"{name}: dropout acts between stacked layers, so dropout={dropout} with "
                "num_layers=1 has no effect",
                stacklevel=3,
            )
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.unroll = bias, batch_first, unroll
        dtype = check_float_dtype(name, dtype)
        gates = self._gates * hidden_size
        for k in range(num_layers):
            cols_ih = input_size if k == 0 else hidden_size
            for kind, cols in (("ih", cols_ih), ("hh", hidden_size)):
                # U(-1/sqrt(H), 1/sqrt(H)) as in PyTorch: the bound comes from H, not the columns.
                w = uniform_fan_in(rngs.next("params"), (gates, cols), hidden_size, dtype)
                setattr(self, f"weight_{kind}_l{k}", Parameter(w))
            if self.bias:
                self._init_biases(k, dtype)

    def _init_biases(self, k: int, dtype) -> None:
        for kind in ("ih", "hh"):  # one buffer each: js.jit donates every parameter's buffer
            setattr(
                self,
                f"bias_{kind}_l{k}",
                Parameter(jnp.zeros(self._gates * self.hidden_size, dtype)),
            )

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        text += "" if self.bias else ", bias=False"
        text += "" if self.batch_first else ", batch_first=False"
        return text + (f", dropout={self.dropout}" if self.dropout else "")

    # -- validation (static shapes and, when concrete, values: before anything is compiled) --

    def _check_input(self, x) -> tuple[int, int]:
        """``(B, T)`` of an input ``[B, T, I]`` (``[T, B, I]`` if not batch_first)."""
        name, size = type(self).__name__, self.input_size
        shape = list(jnp.shape(x))
        if len(shape) != 3 or shape[2] != size:
            dims = "[B, T, I]" if self.batch_first else "[T, B, I] (batch_first=False)"
            raise ValueError(
                f"{name}: expected input {dims} with I = input_size = {size}, got shape {shape}"
            )
        if not jnp.issubdtype(jnp.result_type(x), jnp.floating):
            raise TypeError(f"{name}: expected a floating-point input, got {jnp.result_type(x)}")
        return (shape[0], shape[1]) if self.batch_first else (shape[1], shape[0])

    def _initial_state(self, state, batch: int, dtype) -> tuple[jax.Array, ...]:
        name, count = type(self).__name__, len(self._state_names)
        want = [self.num_layers, batch, self.hidden_size]
        if state is None:
            return (jnp.zeros(want, dtype),) * count
        parts = (state,) if count == 1 else state
        if count > 1 and (not isinstance(state, (tuple, list)) or len(state) != count):
            raise TypeError(
                f"{name}: state must be a pair (h, c) or None, got {type(state).__name__}"
            )
        for label, part in zip(self._state_names, parts, strict=True):
            if list(jnp.shape(part)) != want:
                raise ValueError(
                    f"{name}: expected state {label} [layers, B, H] = {want}, "
                    f"got shape {list(jnp.shape(part))}"
                )
        # A scan carry keeps its dtype: cast once here so every step computes in ``dtype``.
        return tuple(jnp.asarray(part, dtype) for part in parts)

    def _check_lengths(self, lengths, batch: int, steps: int):
        """``lengths`` as int32 ``[B]`` after checking it (None stays None)."""
        if lengths is None:
            return None
        name, traced = type(self).__name__, isinstance(lengths, jax.core.Tracer)
        if not traced:  # concrete (array, list): values are checked too, before tracing
            lengths = np.asarray(lengths)
        dtype, shape = lengths.dtype, list(lengths.shape)
        if not jnp.issubdtype(dtype, jnp.integer):
            raise TypeError(f"{name}: lengths must be integers, got dtype {dtype}")
        if shape != [batch]:
            raise ValueError(f"{name}: expected lengths of shape [B] = [{batch}], got {shape}")
        if not traced:
            if lengths.size and (lengths.min() < 0 or lengths.max() > steps):
                raise ValueError(
                    f"{name}: lengths must lie in [0, T] = [0, {steps}], "
                    f"got values from {lengths.min()} to {lengths.max()}"
                )
            lengths = lengths.astype(np.int32)
        return jnp.asarray(lengths, jnp.int32)

    def _dropout_key(self, rngs):
        """One key per call for the dropout between layers, or None where none applies."""
        if not (self.training and self.dropout and self.num_layers > 1):
            return None
        if rngs is None:
            name = type(self).__name__
            raise ValueError(
                f"{name}: dropout={self.dropout} between layers in training mode needs random "
                f"keys. Fix: call it as {name.lower()}(x, rngs=rngs) with "
                "js.Rngs(dropout=seed), or call model.eval()"
            )
        return rngs.next("dropout")

    # -- forward ------------------------------------------------------------------------------

    def _layers(self) -> tuple:
        """``(w_ih, w_hh, projection bias, loop bias)`` per layer (see ``recurrent``)."""
        layers = []
        for k in range(self.num_layers):
            w_ih, w_hh = (getattr(self, f"weight_{kind}_l{k}").value for kind in ("ih", "hh"))
            biases = (None, None)
            if self.bias:
                b_ih, b_hh = (getattr(self, f"bias_{kind}_l{k}").value for kind in ("ih", "hh"))
                biases = self._split_bias(b_ih, b_hh)
            layers.append((w_ih, w_hh, *biases))
        return tuple(layers)

    def _split_bias(self, b_ih, b_hh) -> tuple:
        return b_ih + b_hh, None  # both outside the loop: one add for all timesteps

    def _run(self, x, state, lengths, rngs):
        batch, steps = self._check_input(x)
        dtype = jnp.result_type(x, self.weight_ih_l0.value)
        carry = self._initial_state(state, batch, dtype)  # each [layers, B, H]
        lengths = self._check_lengths(lengths, batch, steps)  # [B] int32 or None
        key = self._dropout_key(rngs)
        x, layers = jnp.asarray(x, dtype), self._layers()
        # The fused backward has no forward-mode rule: under jax.jvp/jacfwd/hessian, the scan.
        fused = self._fused() and not forward_mode(x, carry, layers)
        return recurrent(
            x,
            carry,
            layers,
            lengths,
            key,
            cell=self._cell_kind(),
            unroll=self.unroll,
            fused=fused,
            dropout=self.dropout,
            batch_first=self.batch_first,
        )

    def _cell_kind(self) -> str:
        return self._cell

    def _fused(self) -> bool:
        return False
