"""Recurrent layers: ``RNN``, ``LSTM`` and ``GRU``, with PyTorch's names, layout and gate order.

The layers validate everything eagerly (shapes, state, lengths, options) and then call one
compiled pure function, ``_recurrent_scan.recurrent``, with their weights as arrays.
"""

from __future__ import annotations

import warnings

import jax
import jax.core  # jax.core.Tracer below; pyright knows a submodule only once imported
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from js import Module, Parameter, Rngs

from . import _random
from ._checks import check_bool, check_int, check_probability, dropout_key
from ._factory import float_dtype
from ._linear import uniform_fan_in
from ._lstm_kernel import forward_mode
from ._recurrent_scan import recurrent

# -- modules ---------------------------------------------------------------------------------


def _check_options(name: str, bias, batch_first, dropout, bidirectional) -> float:
    """Refuse PyTorch options of the wrong type or value; the checked ``dropout``."""
    for arg, value in (
        ("bias", bias),
        ("batch_first", batch_first),
        ("bidirectional", bidirectional),
    ):
        check_bool(name, arg, value)
    return check_probability(name, "dropout", dropout)


class _Recurrent(Module):
    """Shared construction, validation and layer loop of ``RNN``, ``LSTM`` and ``GRU``."""

    _gates = 1
    _state_names = ("h",)
    _cell = "tanh"
    weight_ih_l0: Parameter  # set by __init__ with setattr, as every weight_{ih,hh}_l{k}

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int,
        bias: bool,
        batch_first: bool,
        dropout: float,
        bidirectional: bool,
        *,
        unroll: int,
        dtype: DTypeLike | None,
        rngs: Rngs,
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
        self.bias, self.batch_first, self.unroll = bool(bias), bool(batch_first), unroll
        self.bidirectional = bool(bidirectional)
        dtype = float_dtype(name, dtype)
        gates = self._gates * hidden_size
        for k in range(num_layers):
            # Layer k > 0 reads the previous layer's sequence, both directions concatenated.
            cols_ih = input_size if k == 0 else hidden_size * self._directions
            for layer in self._layer_names(k):  # PyTorch's order: l{k}, then l{k}_reverse
                for kind, cols in (("ih", cols_ih), ("hh", hidden_size)):
                    # U(-1/sqrt(H), 1/sqrt(H)) as in PyTorch: the bound comes from H, not the
                    # columns.
                    w = uniform_fan_in(rngs.next("params"), (gates, cols), hidden_size, dtype)
                    setattr(self, f"weight_{kind}_{layer}", Parameter(w))
                if self.bias:
                    self._init_biases(layer, dtype)

    @property
    def _directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _layer_names(self, k: int) -> tuple[str, ...]:
        """The name suffixes of layer ``k``'s directions: ``l{k}`` and ``l{k}_reverse``."""
        return (f"l{k}", f"l{k}_reverse")[: self._directions]

    def _init_biases(self, layer: str, dtype) -> None:
        for kind in ("ih", "hh"):  # one buffer each: js.jit donates every parameter's buffer
            setattr(
                self,
                f"bias_{kind}_{layer}",
                Parameter(_random.zeros((self._gates * self.hidden_size,), dtype)),
            )

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        text += "" if self.bias else ", bias=False"
        text += "" if self.batch_first else ", batch_first=False"
        text += f", dropout={self.dropout}" if self.dropout else ""
        return text + (", bidirectional=True" if self.bidirectional else "")

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
        want = [self.num_layers * self._directions, batch, self.hidden_size]
        dims = "[2 * layers, B, H]" if self.bidirectional else "[layers, B, H]"
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
                    f"{name}: expected state {label} {dims} = {want}, "
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
        name = type(self).__name__
        return dropout_key(
            name,
            rngs,
            why=f": dropout={self.dropout} between layers",
            fix=f"call it as {name.lower()}(x, rngs=rngs)",
        )

    # -- forward ------------------------------------------------------------------------------

    def _layers(self) -> tuple:
        """``(w_ih, w_hh, projection bias, loop bias)`` per layer and direction, in the order
        of the state (``l0``, ``l0_reverse``, ``l1``, ...; see ``recurrent``)."""
        layers = []
        for layer in (name for k in range(self.num_layers) for name in self._layer_names(k)):
            w_ih, w_hh = (getattr(self, f"weight_{kind}_{layer}").value for kind in ("ih", "hh"))
            biases = (None, None)
            if self.bias:
                b_ih, b_hh = (getattr(self, f"bias_{kind}_{layer}").value for kind in ("ih", "hh"))
                biases = self._split_bias(b_ih, b_hh)
            layers.append((w_ih, w_hh, *biases))
        return tuple(layers)

    def _split_bias(self, b_ih, b_hh) -> tuple:
        return b_ih + b_hh, None  # both outside the loop: one add for all timesteps

    def _run(self, x, state, lengths, rngs):
        batch, steps = self._check_input(x)
        dtype = jnp.result_type(x, self.weight_ih_l0.value)
        carry = self._initial_state(state, batch, dtype)  # each [layers * directions, B, H]
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
            bidirectional=self.bidirectional,
        )

    def _cell_kind(self) -> str:
        return self._cell

    def _fused(self) -> bool:
        return False


class RNN(_Recurrent):
    r"""Elman recurrent network: ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``.

    ``num_layers`` layers are stacked; layer ``k > 0`` reads the hidden sequence of layer
    ``k - 1`` (after dropout, in training, when ``dropout > 0``). With ``bidirectional`` each
    layer also runs over the reversed sequence and the two are concatenated (``D = 2``, else
    ``D = 1``). The positional order is PyTorch's; ``batch_first`` defaults to True here
    (PyTorch: False), so ported code with time-major input passes ``batch_first=False``.

    Args:
        input_size: ``I``, features per timestep of the input.
        hidden_size: ``H``, features of the hidden state.
        num_layers: stacked layers, ``>= 1``.
        nonlinearity: ``'tanh'`` or ``'relu'``.
        bias: whether to add ``bias_ih_l{k}`` and ``bias_hh_l{k}``.
        batch_first: input and sequence ``[B, T, ...]`` (True) or ``[T, B, ...]`` (False).
            The state is ``[D * layers, B, H]`` either way, as in PyTorch.
        dropout: probability of zeroing each output of every layer but the last, in training
            only (it then needs ``rngs`` in the call).
        bidirectional: also run every layer from the last timestep to the first (with
            ``lengths``, from each example's last valid step), with its own
            ``*_l{k}_reverse`` weights; the sequence is then both directions concatenated on
            the feature axis, forward first, and the state has ``2 * layers`` entries in
            PyTorch's order (``l0``, ``l0_reverse``, ``l1``, ...).
        unroll: timesteps per loop iteration (``jax.lax.scan``'s ``unroll``); larger can be
            faster for small ``H`` and compiles a larger body.
        dtype: parameter dtype (default float32, whatever ``jax_enable_x64`` says).
        rngs: ``js.Rngs`` with a ``params`` stream.

    Shape:
        - input ``x``: ``[B, T, I]`` (``[T, B, I]`` with ``batch_first=False``).
        - ``state``: ``[D * layers, B, H]`` or None.
        - ``lengths``: ``[B]`` or None.
        - output: ``(sequence [B, T, D * H], h [D * layers, B, H])`` (sequence
          ``[T, B, D * H]`` with ``batch_first=False``); the sequence is the last layer's.

    Weights (PyTorch's names and layout, so ``load_state_dict`` takes PyTorch's arrays):
        ``weight_ih_l{k}``: ``[H, I]`` for ``k = 0``, ``[H, D * H]`` above, and
        ``weight_hh_l{k}`` ``[H, H]``, both ``U(-1/sqrt(H), 1/sqrt(H))`` as in PyTorch.
        ``bias_ih_l{k}``, ``bias_hh_l{k}``: ``[H]``, zeros (the spec's zero biases; PyTorch
        draws them uniformly). With ``bidirectional``, each has a ``*_l{k}_reverse`` twin
        for the reverse direction, following it in the state dict as in PyTorch.

    Call ``rnn(x, state=None, lengths=None, *, rngs=None)``. ``state=None`` starts from zeros.
    ``lengths`` (``[B]`` integers in ``[0, T]``) freezes each example's carry after its valid
    steps and zeros its padded outputs; a zero-length example keeps its initial carry. Concrete
    lengths are checked eagerly; traced lengths only for dtype and shape (their values are then
    a data precondition). To stream a long sequence, pass the returned state to the next chunk;
    for truncated backpropagation, pass ``js.stop_gradient(state)`` instead. The state is cast
    to the computation dtype (that of input and weights), which a scan carry keeps throughout.
    ``rngs`` (a ``js.Rngs`` with a ``dropout`` stream, one key drawn per call) is needed only
    in training mode with ``dropout > 0`` and ``num_layers > 1``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> rnn = js.nn.RNN(4, 8, num_layers=2, rngs=js.Rngs(params=0))
        >>> seq, h = rnn(jnp.ones((3, 5, 4)))
        >>> seq.shape, h.shape
        ((3, 5, 8), (2, 3, 8))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        unroll: int = 1,
        dtype: DTypeLike | None = None,
        rngs: Rngs,
    ):
        if nonlinearity not in ("relu", "tanh"):
            raise ValueError(
                f"RNN: nonlinearity must be one of ['relu', 'tanh'], got {nonlinearity!r}"
            )
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            unroll=unroll,
            dtype=dtype,
            rngs=rngs,
        )
        self.nonlinearity = nonlinearity

    def extra_repr(self) -> str:
        extra = "" if self.nonlinearity == "tanh" else f", nonlinearity={self.nonlinearity!r}"
        return super().extra_repr() + extra

    def _cell_kind(self) -> str:
        return self.nonlinearity

    def forward(
        self,
        x: jax.Array,
        state: jax.Array | None = None,
        lengths: jax.typing.ArrayLike | None = None,
        *,
        rngs: Rngs | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        sequence, (h,) = self._run(x, state, lengths, rngs)
        return sequence, h


class LSTM(_Recurrent):
    r"""Long short-term memory, PyTorch's formulation and gate order ``i, f, g, o``::

        i, f, o = sigmoid(.), g = tanh(.)   of   x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh
        c_t = f * c_{t-1} + i * g
        h_t = o * tanh(c_t)

    ``num_layers`` layers are stacked; layer ``k > 0`` reads the hidden sequence of layer
    ``k - 1`` (after dropout, in training, when ``dropout > 0``). With ``bidirectional`` each
    layer also runs over the reversed sequence and the two are concatenated (``D = 2``, else
    ``D = 1``). Projections (``proj_size``) are not implemented. The positional order is
    PyTorch's; ``batch_first`` defaults to True here (PyTorch: False), so ported code with
    time-major input passes ``batch_first=False``.

    Args:
        input_size: ``I``, features per timestep of the input.
        hidden_size: ``H``, features of the hidden and cell states.
        num_layers: stacked layers, ``>= 1``.
        bias: whether to add ``bias_ih_l{k}`` and ``bias_hh_l{k}``.
        batch_first: input and sequence ``[B, T, ...]`` (True) or ``[T, B, ...]`` (False).
            The state is ``[D * layers, B, H]`` either way, as in PyTorch.
        dropout: probability of zeroing each output of every layer but the last, in training
            only (it then needs ``rngs`` in the call).
        bidirectional: also run every layer from the last timestep to the first (with
            ``lengths``, from each example's last valid step), with its own
            ``*_l{k}_reverse`` weights; the sequence is then both directions concatenated on
            the feature axis, forward first, and the state has ``2 * layers`` entries in
            PyTorch's order (``l0``, ``l0_reverse``, ``l1``, ...).
        proj_size: only 0 (other values raise NotImplementedError).
        unroll: timesteps per loop iteration (``jax.lax.scan``'s ``unroll``); larger can be
            faster for small ``H`` and compiles a larger body.
        fused_backward: without ``lengths``, differentiate each layer with a hand-written
            backward pass (about 2x faster forward+backward on the CPU) instead of autodiff
            of the scan; same gradients to float rounding. It has no forward-mode rule:
            under ``jax.jvp``, ``jax.jacfwd`` or ``jax.hessian`` of a call the layer sees
            this and takes the autodiff path by itself, but a JVP taken *outside* a compiled
            function (``jax.jvp(jax.jit(f), ...)``, ``jax.jvp`` of a ``js.jit`` step) is not
            visible while ``f`` is traced and fails with JAX's "can't apply forward-mode
            autodiff (jvp) to a custom_vjp function": build the layer with
            ``fused_backward=False`` for that. Calls with ``lengths`` always use autodiff.
        dtype: parameter dtype (default float32, whatever ``jax_enable_x64`` says).
        rngs: ``js.Rngs`` with a ``params`` stream.

    Shape:
        - input ``x``: ``[B, T, I]`` (``[T, B, I]`` with ``batch_first=False``).
        - ``state``: a pair ``(h, c)``, each ``[D * layers, B, H]``, or None.
        - ``lengths``: ``[B]`` or None.
        - output: ``(sequence [B, T, D * H], (h, c))`` (sequence ``[T, B, D * H]`` with
          ``batch_first=False``); the sequence is the last layer's.

    Weights (PyTorch's names and layout, so ``load_state_dict`` takes PyTorch's arrays):
        ``weight_ih_l{k}``: ``[4H, I]`` for ``k = 0``, ``[4H, D * H]`` above, and
        ``weight_hh_l{k}`` ``[4H, H]``, rows in gate order ``i, f, g, o``, all
        ``U(-1/sqrt(H), 1/sqrt(H))`` as in PyTorch. ``bias_ih_l{k}``, ``bias_hh_l{k}``:
        ``[4H]``; the spec's "forget bias is one" is ``bias_ih_l{k}[H:2H] = 1`` with every
        other entry zero, so the forget gate's total bias is one (PyTorch draws all biases
        uniformly). With ``bias=False`` there are none. With ``bidirectional``, each has a
        ``*_l{k}_reverse`` twin for the reverse direction, following it in the state dict as
        in PyTorch.

    Call ``lstm(x, state=None, lengths=None, *, rngs=None)``. ``state=None`` starts from
    zeros. ``lengths`` (``[B]`` integers in ``[0, T]``) freezes each example's carry after its
    valid steps and zeros its padded outputs; a zero-length example keeps its initial carry.
    Concrete lengths are checked eagerly; traced lengths only for dtype and shape (their values
    are then a data precondition). To stream a long sequence, pass the returned state to the
    next chunk; for truncated backpropagation, pass ``js.stop_gradient(state)`` instead. The
    state is cast to the computation dtype (that of input and weights), which a scan carry
    keeps throughout. ``rngs`` (a ``js.Rngs`` with a ``dropout`` stream, one key drawn per
    call) is needed only in training mode with ``dropout > 0`` and ``num_layers > 1``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> lstm = js.nn.LSTM(4, 8, rngs=js.Rngs(params=0))
        >>> seq, (h, c) = lstm(jnp.ones((3, 5, 4)), lengths=jnp.array([5, 2, 0]))
        >>> seq.shape, h.shape, c.shape
        ((3, 5, 8), (1, 3, 8), (1, 3, 8))
        >>> float(abs(seq[1, 2:]).max()), float(abs(h[0, 2]).max())  # padded, zero-length
        (0.0, 0.0)
    """

    _gates = 4
    _state_names = ("h", "c")
    _cell = "lstm"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        *,
        unroll: int = 1,
        fused_backward: bool = True,
        dtype: DTypeLike | None = None,
        rngs: Rngs,
    ):
        fused_backward = check_bool("LSTM", "fused_backward", fused_backward)
        if proj_size != 0:
            raise NotImplementedError(
                f"LSTM: proj_size={proj_size!r} (projected hidden state) is not implemented. "
                "Fix: pass proj_size=0 and, if needed, a Linear on the output sequence (it "
                "does not feed the projection back into the recurrence as PyTorch does)"
            )
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            unroll=unroll,
            dtype=dtype,
            rngs=rngs,
        )
        self.fused_backward = fused_backward

    def _fused(self) -> bool:
        return self.fused_backward

    def extra_repr(self) -> str:
        return super().extra_repr() + ("" if self.fused_backward else ", fused_backward=False")

    def _init_biases(self, layer: str, dtype) -> None:
        hidden = self.hidden_size
        forget = np.zeros(4 * hidden, np.dtype(dtype))  # built on the host: .at[].set compiles
        forget[hidden : 2 * hidden] = 1.0
        forget = jax.device_put(forget)
        setattr(self, f"bias_ih_{layer}", Parameter(forget))
        setattr(self, f"bias_hh_{layer}", Parameter(_random.zeros((4 * hidden,), dtype)))

    def forward(
        self,
        x: jax.Array,
        state: tuple[jax.Array, jax.Array] | None = None,
        lengths: jax.typing.ArrayLike | None = None,
        *,
        rngs: Rngs | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        return self._run(x, state, lengths, rngs)  # (sequence, (h, c))


class GRU(_Recurrent):
    r"""Gated recurrent unit, PyTorch's formulation and gate order ``r, z, n``::

        r = sigmoid(x_t W_ir^T + b_ir + h_{t-1} W_hr^T + b_hr)
        z = sigmoid(x_t W_iz^T + b_iz + h_{t-1} W_hz^T + b_hz)
        n = tanh(x_t W_in^T + b_in + r * (h_{t-1} W_hn^T + b_hn))
        h_t = (1 - z) * n + z * h_{t-1}

    ``b_hn`` sits inside the reset product, as in PyTorch and cuDNN (the original paper applies
    ``r`` before the matmul). ``num_layers`` layers are stacked; layer ``k > 0`` reads the
    hidden sequence of layer ``k - 1`` (after dropout, in training, when ``dropout > 0``).
    With ``bidirectional`` each layer also runs over the reversed sequence and the two are
    concatenated (``D = 2``, else ``D = 1``). The positional order is PyTorch's;
    ``batch_first`` defaults to True here (PyTorch: False), so ported code with time-major
    input passes ``batch_first=False``.

    Args:
        input_size: ``I``, features per timestep of the input.
        hidden_size: ``H``, features of the hidden state.
        num_layers: stacked layers, ``>= 1``.
        bias: whether to add ``bias_ih_l{k}`` and ``bias_hh_l{k}``.
        batch_first: input and sequence ``[B, T, ...]`` (True) or ``[T, B, ...]`` (False).
            The state is ``[D * layers, B, H]`` either way, as in PyTorch.
        dropout: probability of zeroing each output of every layer but the last, in training
            only (it then needs ``rngs`` in the call).
        bidirectional: also run every layer from the last timestep to the first (with
            ``lengths``, from each example's last valid step), with its own
            ``*_l{k}_reverse`` weights; the sequence is then both directions concatenated on
            the feature axis, forward first, and the state has ``2 * layers`` entries in
            PyTorch's order (``l0``, ``l0_reverse``, ``l1``, ...).
        unroll: timesteps per loop iteration (``jax.lax.scan``'s ``unroll``); larger can be
            faster for small ``H`` and compiles a larger body.
        dtype: parameter dtype (default float32, whatever ``jax_enable_x64`` says).
        rngs: ``js.Rngs`` with a ``params`` stream.

    Shape:
        - input ``x``: ``[B, T, I]`` (``[T, B, I]`` with ``batch_first=False``).
        - ``state``: ``[D * layers, B, H]`` or None.
        - ``lengths``: ``[B]`` or None.
        - output: ``(sequence [B, T, D * H], h [D * layers, B, H])`` (sequence
          ``[T, B, D * H]`` with ``batch_first=False``); the sequence is the last layer's.

    Weights (PyTorch's names and layout, so ``load_state_dict`` takes PyTorch's arrays):
        ``weight_ih_l{k}``: ``[3H, I]`` for ``k = 0``, ``[3H, D * H]`` above, and
        ``weight_hh_l{k}`` ``[3H, H]``, rows in gate order ``r, z, n``, all
        ``U(-1/sqrt(H), 1/sqrt(H))`` as in PyTorch. ``bias_ih_l{k}``, ``bias_hh_l{k}``:
        ``[3H]``, zeros (the spec's zero biases; PyTorch draws them uniformly). With
        ``bias=False`` there are none. With ``bidirectional``, each has a ``*_l{k}_reverse``
        twin for the reverse direction, following it in the state dict as in PyTorch.

    Call ``gru(x, state=None, lengths=None, *, rngs=None)``. ``state=None`` starts from zeros.
    ``lengths`` (``[B]`` integers in ``[0, T]``) freezes each example's carry after its valid
    steps and zeros its padded outputs; a zero-length example keeps its initial carry. Concrete
    lengths are checked eagerly; traced lengths only for dtype and shape (their values are then
    a data precondition). To stream a long sequence, pass the returned state to the next chunk;
    for truncated backpropagation, pass ``js.stop_gradient(state)`` instead. The state is cast
    to the computation dtype (that of input and weights), which a scan carry keeps throughout.
    ``rngs`` (a ``js.Rngs`` with a ``dropout`` stream, one key drawn per call) is needed only
    in training mode with ``dropout > 0`` and ``num_layers > 1``.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> gru = js.nn.GRU(4, 8, 2, batch_first=False, rngs=js.Rngs(params=0))
        >>> seq, h = gru(jnp.ones((5, 3, 4)))  # [T, B, I]
        >>> seq.shape, h.shape
        ((5, 3, 8), (2, 3, 8))
        >>> bigru = js.nn.GRU(4, 8, 2, bidirectional=True, rngs=js.Rngs(params=0))
        >>> seq, h = bigru(jnp.ones((3, 5, 4)))  # [B, T, I]; h: l0, l0_reverse, l1, l1_reverse
        >>> seq.shape, h.shape
        ((3, 5, 16), (4, 3, 8))
    """

    _gates = 3
    _cell = "gru"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        unroll: int = 1,
        dtype: DTypeLike | None = None,
        rngs: Rngs,
    ):
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            unroll=unroll,
            dtype=dtype,
            rngs=rngs,
        )

    def _split_bias(self, b_ih, b_hh) -> tuple:
        return b_ih, b_hh  # b_hn is multiplied by r inside the loop: b_hh stays there

    def forward(
        self,
        x: jax.Array,
        state: jax.Array | None = None,
        lengths: jax.typing.ArrayLike | None = None,
        *,
        rngs: Rngs | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        sequence, (h,) = self._run(x, state, lengths, rngs)
        return sequence, h
