"""Recurrent layers: ``RNN`` and ``LSTM``, with PyTorch's parameter names, layout and gate order.

The time loop is one ``jax.lax.scan`` per layer, so compile time does not grow with the sequence
length. The input projection of a layer (``x @ W_ih^T + b``) does not depend on the carry, so it
is computed for every timestep at once, outside the loop, as one ``[T*B, I] x [I, gates*H]``
matmul; the loop body only does the recurrent ``[B, H] x [H, gates*H]`` matmul and the gates.
Everything runs time-major (``[T, B, ...]``) inside: the input is transposed once on the way in
and once on the way out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from js import Module, Parameter

from . import _random
from ._checks import check_int
from ._linear import uniform_fan_in
from ._lstm_kernel import forward_mode, lstm_scan

# -- functional core -------------------------------------------------------------------------


def _rnn_cell(w_hh_t: jax.Array, activation: Callable) -> Callable:
    def cell(carry, proj):
        (h,) = carry  # [B, H]
        return (activation(proj + h @ w_hh_t),)

    return cell


def _lstm_cell(w_hh_t: jax.Array) -> Callable:
    hidden = w_hh_t.shape[0]

    def cell(carry, proj):
        h, c = carry  # [B, H] each
        z = proj + h @ w_hh_t  # [B, 4H], PyTorch's gate order i, f, g, o
        i = jax.nn.sigmoid(z[:, :hidden])
        f = jax.nn.sigmoid(z[:, hidden : 2 * hidden])
        g = jnp.tanh(z[:, 2 * hidden : 3 * hidden])
        o = jax.nn.sigmoid(z[:, 3 * hidden :])
        c = f * c + i * g
        return (o * jnp.tanh(c), c)

    return cell


def scan_layer(cell: Callable, carry: tuple, proj: jax.Array, valid=None, unroll: int = 1):
    """Run ``cell`` over the time axis of ``proj``; ``(outputs [T, B, H], final carry)``.

    ``carry`` is a tuple whose first entry is the hidden state ``h`` ``[B, H]``; ``proj`` is the
    projected input ``[T, B, gates*H]``. Where ``valid`` (``[T, B, 1]`` bool) is False the carry
    is frozen and the output is zero.
    """
    if valid is None:

        def step(carry, p):
            carry = cell(carry, p)
            return carry, carry[0]

        final, ys = jax.lax.scan(step, carry, proj, unroll=unroll)
        return ys, final

    def masked_step(carry, inputs):
        p, m = inputs  # [B, gates*H], [B, 1]
        new = cell(carry, p)
        kept = tuple(jnp.where(m, n, old) for n, old in zip(new, carry, strict=True))
        return kept, jnp.where(m, new[0], 0)

    final, ys = jax.lax.scan(masked_step, carry, (proj, valid), unroll=unroll)
    return ys, final


def _project(xs: jax.Array, w_ih: jax.Array, bias) -> jax.Array:
    """``xs [T, B, I] @ w_ih^T + bias`` for every timestep at once: ``[T, B, gates*H]``."""
    proj = xs @ w_ih.T
    return proj if bias is None else proj + bias


_CELLS = {
    "lstm": _lstm_cell,
    "tanh": lambda w_hh_t: _rnn_cell(w_hh_t, jnp.tanh),
    "relu": lambda w_hh_t: _rnn_cell(w_hh_t, jax.nn.relu),
}


@functools.partial(jax.jit, static_argnames=("cell", "unroll", "fused"))
def recurrent(x, carry, layers, lengths=None, *, cell: str, unroll: int = 1, fused: bool = True):
    """Pure stacked recurrence (unvalidated): ``(sequence [B, T, H], final carry)``.

    ``x`` is ``[B, T, I]``; ``carry`` a tuple (``(h,)`` or ``(h, c)``) of ``[layers, B, H]``
    arrays in the computation dtype; ``layers`` a tuple of ``(w_ih, w_hh, bias)`` per layer,
    ``bias = b_ih + b_hh`` or None; ``lengths`` ``[B]`` int32 or None; ``cell`` one of
    ``'lstm'``, ``'tanh'``, ``'relu'``; ``fused`` whether an unmasked LSTM layer uses the
    hand-written backward of ``lstm_scan`` (reverse mode only) or the plain scan. Compiled as
    one program, so that eager calls (and their gradients) do not dispatch operation by
    operation; inside ``js.jit`` it is inlined.
    """
    steps = x.shape[1]
    valid = None
    if lengths is not None:
        valid = (jnp.arange(steps)[:, None] < lengths[None, :])[..., None]  # [T, B, 1]
    xs = jnp.swapaxes(x, 0, 1)  # [T, B, I]
    finals = []
    for k, (w_ih, w_hh, bias) in enumerate(layers):
        proj = _project(xs, w_ih.astype(xs.dtype), bias).astype(xs.dtype)  # [T, B, gates*H]
        w_hh_t = w_hh.T.astype(xs.dtype)  # [H, gates*H]
        layer_carry = tuple(part[k] for part in carry)
        if fused and cell == "lstm" and valid is None:  # hand-written backward (lstm_scan)
            xs, final = lstm_scan(proj, w_hh_t, *layer_carry, unroll)
        else:
            xs, final = scan_layer(_CELLS[cell](w_hh_t), layer_carry, proj, valid, unroll)
        finals.append(final)
    state = tuple(jnp.stack(parts) for parts in zip(*finals, strict=True))  # [layers, B, H]
    return jnp.swapaxes(xs, 0, 1), state  # [B, T, H]


# -- modules ---------------------------------------------------------------------------------


class _Recurrent(Module):
    """Shared construction, validation and layer loop of ``RNN`` and ``LSTM``."""

    _gates = 1
    _state_names = ("h",)

    def __init__(self, input_size, hidden_size, num_layers=1, *, bias=True, unroll=1, rngs):
        super().__init__()
        name = type(self).__name__
        input_size, hidden_size, num_layers, unroll = (
            check_int(name, arg, value)
            for arg, value in (("input_size", input_size), ("hidden_size", hidden_size),
                               ("num_layers", num_layers), ("unroll", unroll))
        )
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.unroll = bool(bias), unroll
        gates = self._gates * hidden_size
        for k in range(num_layers):
            cols_ih = input_size if k == 0 else hidden_size
            for kind, cols in (("ih", cols_ih), ("hh", hidden_size)):
                # U(-1/sqrt(H), 1/sqrt(H)) as in PyTorch: the bound comes from H, not the columns.
                w = uniform_fan_in(rngs.next("params"), (gates, cols), hidden_size)
                setattr(self, f"weight_{kind}_l{k}", Parameter(w))
            if self.bias:
                self._init_biases(k)

    def _init_biases(self, k: int) -> None:
        zeros = _random.zeros((self._gates * self.hidden_size,))
        setattr(self, f"bias_ih_l{k}", Parameter(zeros))
        setattr(self, f"bias_hh_l{k}", Parameter(zeros))

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        return text + ("" if self.bias else ", bias=False")

    # -- validation (static shapes and, when concrete, values: before anything is compiled) --

    def _check_input(self, x) -> tuple[int, int]:
        name, size = type(self).__name__, self.input_size
        shape = list(jnp.shape(x))
        if len(shape) != 3 or shape[2] != size:
            raise ValueError(
                f"{name}: expected input [B, T, I] with I = input_size = {size}, got shape {shape}"
            )
        if not jnp.issubdtype(jnp.result_type(x), jnp.floating):
            raise TypeError(f"{name}: expected a floating-point input, got {jnp.result_type(x)}")
        return shape[0], shape[1]

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

    # -- forward ------------------------------------------------------------------------------

    def _layers(self) -> tuple:
        """``(w_ih, w_hh, b_ih + b_hh or None)`` per layer."""
        layers = []
        for k in range(self.num_layers):
            w_ih, w_hh = (getattr(self, f"weight_{kind}_l{k}").value for kind in ("ih", "hh"))
            bias = None
            if self.bias:
                bias = getattr(self, f"bias_ih_l{k}").value + getattr(self, f"bias_hh_l{k}").value
            layers.append((w_ih, w_hh, bias))
        return tuple(layers)

    def _run(self, x, state, lengths):
        batch, steps = self._check_input(x)
        dtype = jnp.result_type(x, self.weight_ih_l0.value)
        carry = self._initial_state(state, batch, dtype)  # each [layers, B, H]
        lengths = self._check_lengths(lengths, batch, steps)  # [B] int32 or None
        x, layers = jnp.asarray(x, dtype), self._layers()
        # The fused backward has no forward-mode rule: under jax.jvp/jacfwd/hessian, the scan.
        fused = self._fused() and not forward_mode(x, carry, layers)
        return recurrent(x, carry, layers, lengths, cell=self._cell_kind(), unroll=self.unroll,
                         fused=fused)

    def _fused(self) -> bool:
        return False


_SHARED_CALL = """
    Call ``({sig})``. ``state=None`` starts from zeros. ``lengths`` (``[B]`` integers in
    ``[0, T]``) freezes each example's carry after its valid steps and zeros its padded outputs;
    a zero-length example keeps its initial carry. Concrete lengths are checked eagerly; traced
    lengths only for dtype and shape (their values are then a data precondition). To stream a
    long sequence, pass the returned state to the next chunk; for truncated backpropagation,
    pass ``js.stop_gradient(state)`` instead. The state is cast to the computation dtype
    (that of input and weights), which a scan carry keeps throughout.
"""


class RNN(_Recurrent):
    r"""Elman recurrent network: ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``.

    ``num_layers`` layers are stacked; layer ``k > 0`` reads the hidden sequence of layer
    ``k - 1``. Bidirectionality is not implemented.

    Args:
        input_size: ``I``, features per timestep of the input.
        hidden_size: ``H``, features of the hidden state.
        num_layers: stacked layers, ``>= 1``.
        nonlinearity: ``'tanh'`` or ``'relu'``.
        bias: whether to add ``bias_ih_l{k}`` and ``bias_hh_l{k}``.
        unroll: timesteps per loop iteration (``jax.lax.scan``'s ``unroll``); larger can be
            faster for small ``H`` and compiles a larger body.
        rngs: ``js.Rngs`` with a ``params`` stream.

    Shape:
        - input ``x``: ``[B, T, I]`` (batch first).
        - ``state``: ``[layers, B, H]`` or None.
        - ``lengths``: ``[B]`` or None.
        - output: ``(sequence [B, T, H], h [layers, B, H])``; the sequence is the last layer's.

    Weights (PyTorch's names and layout, so ``load_state_dict`` takes PyTorch's arrays):
        ``weight_ih_l{k}``: ``[H, I]`` for ``k = 0``, ``[H, H]`` above, and ``weight_hh_l{k}``
        ``[H, H]``, both ``U(-1/sqrt(H), 1/sqrt(H))`` as in PyTorch. ``bias_ih_l{k}``,
        ``bias_hh_l{k}``: ``[H]``, zeros (the spec's zero biases; PyTorch draws them uniformly).
    {call}
    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> rnn = js.nn.RNN(4, 8, num_layers=2, rngs=js.Rngs(params=0))
        >>> seq, h = rnn(jnp.ones((3, 5, 4)))
        >>> seq.shape, h.shape
        ((3, 5, 8), (2, 3, 8))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, *, nonlinearity="tanh", bias=True,
                 unroll=1, rngs):
        if nonlinearity not in ("relu", "tanh"):
            raise ValueError(
                f"RNN: nonlinearity must be one of ['relu', 'tanh'], got {nonlinearity!r}"
            )
        super().__init__(input_size, hidden_size, num_layers, bias=bias, unroll=unroll, rngs=rngs)
        self.nonlinearity = nonlinearity

    def extra_repr(self) -> str:
        extra = "" if self.nonlinearity == "tanh" else f", nonlinearity={self.nonlinearity!r}"
        return super().extra_repr() + extra

    def _cell_kind(self) -> str:
        return self.nonlinearity

    def forward(self, x, state=None, lengths=None):
        sequence, (h,) = self._run(x, state, lengths)
        return sequence, h


class LSTM(_Recurrent):
    r"""Long short-term memory, PyTorch's formulation and gate order ``i, f, g, o``::

        i, f, o = sigmoid(.), g = tanh(.)   of   x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh
        c_t = f * c_{t-1} + i * g
        h_t = o * tanh(c_t)

    ``num_layers`` layers are stacked; layer ``k > 0`` reads the hidden sequence of layer
    ``k - 1``. Bidirectionality and projections (``proj_size``) are not implemented.

    Args:
        input_size: ``I``, features per timestep of the input.
        hidden_size: ``H``, features of the hidden and cell states.
        num_layers: stacked layers, ``>= 1``.
        bias: whether to add ``bias_ih_l{k}`` and ``bias_hh_l{k}``.
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
        rngs: ``js.Rngs`` with a ``params`` stream.

    Shape:
        - input ``x``: ``[B, T, I]`` (batch first).
        - ``state``: a pair ``(h, c)``, each ``[layers, B, H]``, or None.
        - ``lengths``: ``[B]`` or None.
        - output: ``(sequence [B, T, H], (h, c))``; the sequence is the last layer's.

    Weights (PyTorch's names and layout, so ``load_state_dict`` takes PyTorch's arrays):
        ``weight_ih_l{k}``: ``[4H, I]`` for ``k = 0``, ``[4H, H]`` above, and ``weight_hh_l{k}``
        ``[4H, H]``, rows in gate order ``i, f, g, o``, all ``U(-1/sqrt(H), 1/sqrt(H))`` as in
        PyTorch. ``bias_ih_l{k}``, ``bias_hh_l{k}``: ``[4H]``; the spec's "forget bias is one"
        is ``bias_ih_l{k}[H:2H] = 1`` with every other entry zero, so the forget gate's total
        bias is one (PyTorch draws all biases uniformly). With ``bias=False`` there are none.
    {call}
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

    def __init__(self, input_size, hidden_size, num_layers=1, *, bias=True, unroll=1,
                 fused_backward=True, rngs):
        if not isinstance(fused_backward, bool):
            raise TypeError(f"LSTM: fused_backward must be a bool, got {fused_backward!r}")
        super().__init__(input_size, hidden_size, num_layers, bias=bias, unroll=unroll, rngs=rngs)
        self.fused_backward = fused_backward

    def _fused(self) -> bool:
        return self.fused_backward

    def extra_repr(self) -> str:
        return super().extra_repr() + ("" if self.fused_backward else ", fused_backward=False")

    def _init_biases(self, k: int) -> None:
        hidden = self.hidden_size
        forget = np.zeros(4 * hidden, np.float32)  # built on the host: .at[].set compiles
        forget[hidden : 2 * hidden] = 1.0
        setattr(self, f"bias_ih_l{k}", Parameter(forget))
        setattr(self, f"bias_hh_l{k}", Parameter(_random.zeros((4 * hidden,))))

    def _cell_kind(self) -> str:
        return "lstm"

    def forward(self, x, state=None, lengths=None):
        return self._run(x, state, lengths)  # (sequence, (h, c))


for _cls, _sig in ((RNN, "rnn(x, state=None, lengths=None)"),
                   (LSTM, "lstm(x, state=None, lengths=None)")):
    _cls.__doc__ = _cls.__doc__.replace("{call}", _SHARED_CALL.replace("{sig}", _sig))
