"""The functional core of ``RNN``, ``LSTM`` and ``GRU`` (``_recurrent.py``): cells and scans.

The time loop is one ``jax.lax.scan`` per layer, so compile time does not grow with the sequence
length. The input projection of a layer (``x @ W_ih^T + b``) does not depend on the carry, so it
is computed for every timestep at once, outside the loop, as one ``[T*B, I] x [I, gates*H]``
matmul; the loop body only does the recurrent ``[B, H] x [H, gates*H]`` matmul and the gates.
Everything runs time-major (``[T, B, ...]``) inside: a batch-first input is transposed once on
the way in and once on the way out (``batch_first=False`` input is used as it is). A
bidirectional layer runs the same scan (or ``lstm_scan``) a second time over its time-reversed
projection and reverses the outputs back; with ``lengths`` each row is reversed within its own
valid steps, so its reverse pass starts at its last valid step, as with PyTorch's packed
sequences.

GRU cannot fold its recurrent bias into the projection as RNN and LSTM do: PyTorch's candidate
gate is ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, with ``b_hn`` inside the reset
product. Each layer therefore carries a fourth entry, the bias added to ``h @ W_hh^T`` inside
the loop (GRU's whole ``b_hh``, which keeps the loop body PyTorch's formula term for term;
None for RNN and LSTM, whose ``b_ih + b_hh`` goes into the projection).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from . import functional as F
from ._lstm_kernel import lstm_scan

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


def _gru_cell(w_hh_t: jax.Array, b_hh) -> Callable:
    """PyTorch's GRU, gate order ``r, z, n``; ``proj`` already holds ``b_ih`` and ``b_hr, b_hz``."""
    hidden = w_hh_t.shape[0]

    def cell(carry, proj):
        (h,) = carry  # [B, H]
        rec = h @ w_hh_t if b_hh is None else h @ w_hh_t + b_hh  # [B, 3H]
        r = jax.nn.sigmoid(proj[:, :hidden] + rec[:, :hidden])
        z = jax.nn.sigmoid(proj[:, hidden : 2 * hidden] + rec[:, hidden : 2 * hidden])
        n = jnp.tanh(proj[:, 2 * hidden :] + r * rec[:, 2 * hidden :])
        return ((1 - z) * n + z * h,)

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


_CELLS = {  # (w_hh_t, b_hh) -> cell; only GRU has a bias inside the loop
    "lstm": lambda w_hh_t, b_hh: _lstm_cell(w_hh_t),
    "gru": _gru_cell,
    "tanh": lambda w_hh_t, b_hh: _rnn_cell(w_hh_t, jnp.tanh),
    "relu": lambda w_hh_t, b_hh: _rnn_cell(w_hh_t, jax.nn.relu),
}


def _reverse(a: jax.Array, lengths) -> jax.Array:
    """``a`` ``[T, B, F]`` reversed in time row by row: each row's first ``lengths[b]`` steps
    in reverse order, its padding left in place (all ``T`` steps without ``lengths``). It is
    its own inverse, so it also puts a reverse pass's outputs back in order."""
    if lengths is None:
        return jnp.flip(a, 0)
    t = jnp.arange(a.shape[0])[:, None]  # [T, 1]
    index = jnp.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)  # [T, B]
    return jnp.take_along_axis(a, index[..., None], axis=0)


@functools.partial(
    jax.jit,
    static_argnames=("cell", "unroll", "fused", "dropout", "batch_first", "bidirectional"),
)
def recurrent(
    x,
    carry,
    layers,
    lengths=None,
    key=None,
    *,
    cell: str,
    unroll: int = 1,
    fused: bool = True,
    dropout: float = 0.0,
    batch_first: bool = True,
    bidirectional: bool = False,
):
    """Pure stacked recurrence (unvalidated): ``(sequence, final carry)``.

    ``x`` is ``[B, T, I]`` (``[T, B, I]`` if not ``batch_first``; the sequence comes back in
    the same layout); ``carry`` a tuple (``(h,)`` or ``(h, c)``) of ``[layers * directions, B,
    H]`` arrays in the computation dtype; ``layers`` a tuple of ``(w_ih, w_hh, bias, b_hh)``
    per layer and direction in the carry's order (``l0``, ``l0_reverse``, ``l1``, ...),
    ``bias`` added to the projection (``b_ih + b_hh`` for RNN/LSTM) and ``b_hh`` inside the
    loop (GRU), either None; ``lengths`` ``[B]`` int32 or None; ``key`` a random key for the
    ``dropout`` between layers (None: no dropout); ``cell`` one of ``'lstm'``, ``'gru'``,
    ``'tanh'``, ``'relu'``; ``fused`` whether an unmasked LSTM layer uses the hand-written
    backward of ``lstm_scan`` (reverse mode only) or the plain scan. With ``bidirectional``
    each layer also runs the same scan over the time-reversed sequence (each row reversed
    within its ``lengths``, as PyTorch's packed sequences), reverses its outputs back and
    concatenates them after the forward ones: ``[..., 2H]``. Compiled as one program, so that
    eager calls (and their gradients) do not dispatch operation by operation; inside
    ``js.jit`` it is inlined.
    """
    xs = jnp.swapaxes(x, 0, 1) if batch_first else x  # [T, B, I]
    valid = None
    if lengths is not None:
        valid = (jnp.arange(xs.shape[0])[:, None] < lengths[None, :])[..., None]  # [T, B, 1]
    directions = 2 if bidirectional else 1
    finals = []
    for k in range(len(layers) // directions):
        if k and key is not None:  # PyTorch: dropout on every layer's output but the last
            xs = F.dropout(xs, dropout, True, key=jax.random.fold_in(key, k))
        outputs = []
        for d in range(directions):
            w_ih, w_hh, bias, b_hh = layers[k * directions + d]
            proj = _project(xs, w_ih.astype(xs.dtype), bias).astype(xs.dtype)  # [T, B, gates*H]
            if d:  # the reverse direction: the same scan over the time-reversed projection
                proj = _reverse(proj, lengths)
            w_hh_t = w_hh.T.astype(xs.dtype)  # [H, gates*H]
            b_hh = None if b_hh is None else b_hh.astype(xs.dtype)
            layer_carry = tuple(part[k * directions + d] for part in carry)
            if fused and cell == "lstm" and valid is None:  # hand-written backward (lstm_scan)
                ys, final = lstm_scan(proj, w_hh_t, *layer_carry, unroll)
            else:
                cell_fn = _CELLS[cell](w_hh_t, b_hh)
                ys, final = scan_layer(cell_fn, layer_carry, proj, valid, unroll)
            outputs.append(_reverse(ys, lengths) if d else ys)
            finals.append(final)
        xs = outputs[0] if directions == 1 else jnp.concatenate(outputs, -1)  # [T, B, dirs*H]
    state = tuple(jnp.stack(parts) for parts in zip(*finals, strict=True))  # [layers*dirs, B, H]
    return (jnp.swapaxes(xs, 0, 1) if batch_first else xs), state
