"""Dropout, and its channel-wise forms Dropout1d and Dropout2d."""

from __future__ import annotations

import jax

from js import Module, Rngs

from . import functional as F
from ._checks import check_bool, check_probability, check_rank, dropout_key, layout


class _DropoutBase(Module):
    """The shared constructor and the ``rngs`` rule of every dropout layer."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        name = type(self).__name__
        self.p = check_probability(name, "p", p)
        self.inplace = check_bool(name, "inplace", inplace)  # ignored: arrays are immutable

    def _key(self, rngs):
        return dropout_key(
            type(self).__name__,
            rngs,
            fix="call it as drop(x, rngs=rngs)",
            hint=". Sequential passes no rngs: for dropout in training, write a Module with a "
            "custom forward(self, x, rngs) that calls drop(x, rngs=rngs)",
        )

    def extra_repr(self) -> str:
        return f"p={self.p}" + (", inplace=True" * self.inplace)


class Dropout(_DropoutBase):
    """Zero each element with probability ``p`` in training, scaling the rest by ``1/(1-p)``.

    Call it as ``drop(x, rngs=rngs)`` with a ``js.Rngs`` that has a ``dropout`` stream; it
    draws one key per call. In evaluation it is the identity and ``rngs`` may be left out.
    ``Sequential`` passes no ``rngs``: use Dropout in a custom ``forward``.

    Args:
        p: the probability of zeroing an element, in [0, 1].
        inplace: accepted for PyTorch code and ignored (JAX arrays are immutable).

    Shape:
        input any shape, output the same.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> drop = js.nn.Dropout(0.5)
        >>> drop(jnp.ones(4), rngs=js.Rngs(dropout=0)).shape
        (4,)
        >>> drop.eval()(jnp.ones(2)).tolist()
        [1.0, 1.0]
    """

    def forward(self, x: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        if not self.training or self.p == 0.0:
            return x
        return F.dropout(x, self.p, True, key=self._key(rngs))


class Dropout1d(_DropoutBase):
    """Zero whole channels (each ``[L]`` row) with probability ``p`` in training, scaling the
    kept ones by ``1/(1-p)``; the identity in evaluation.

    Called as ``drop(x, rngs=rngs)`` like ``Dropout`` (a ``dropout`` stream, one key a call).

    Args:
        p: the probability of zeroing a channel, in [0, 1]. inplace: accepted and ignored.

    Shape:
        input ``[B, C, L]`` or ``[C, L]``, output the same.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> y = js.nn.Dropout1d(0.5)(jnp.ones((2, 8, 5)), rngs=js.Rngs(dropout=0))
        >>> bool(((y == 0).all(-1) | (y == 2).all(-1)).all())  # each channel: all or none
        True
    """

    def forward(self, x: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        check_rank("Dropout1d", x, (2, 3), f"{layout('B', 'C', 'L')} or {layout('C', 'L')}")
        if not self.training or self.p == 0.0:
            return x
        return F.dropout1d(x, self.p, True, key=self._key(rngs))


class Dropout2d(_DropoutBase):
    """Zero whole channels (each ``[H, W]`` map) with probability ``p`` in training, scaling
    the kept ones by ``1/(1-p)``; the identity in evaluation.

    Called as ``drop(x, rngs=rngs)`` like ``Dropout``. A 3-D input is refused (PyTorch reads
    it, with a warning, as ``[B, C, L]``: use ``Dropout1d`` for that).

    Args:
        p: the probability of zeroing a channel, in [0, 1]. inplace: accepted and ignored.

    Shape:
        input ``[B, C, H, W]``, output the same.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> y = js.nn.Dropout2d(0.5)(jnp.ones((2, 8, 3, 3)), rngs=js.Rngs(dropout=0))
        >>> bool(((y == 0).all((2, 3)) | (y == 2).all((2, 3))).all())
        True
    """

    def forward(self, x: jax.Array, *, rngs: Rngs | None = None) -> jax.Array:
        check_rank("Dropout2d", x, (4,), layout("B", "C", "H", "W"))
        if not self.training or self.p == 0.0:
            return x
        return F.dropout2d(x, self.p, True, key=self._key(rngs))
