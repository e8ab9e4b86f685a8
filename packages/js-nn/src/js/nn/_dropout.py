"""Dropout."""

from __future__ import annotations

from js import Module

from . import functional as F


class Dropout(Module):
    """Zero each element with probability ``p`` in training, scaling the rest by ``1/(1-p)``.

    Call it as ``drop(x, rngs=rngs)`` with a ``js.Rngs`` that has a ``dropout`` stream; it
    draws one key per call. In evaluation it is the identity and ``rngs`` may be left out.
    ``Sequential`` passes no ``rngs``: use Dropout in a custom ``forward``.

    Args:
        p: the probability of zeroing an element, in [0, 1].

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

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = float(p)

    def forward(self, x, *, rngs=None):
        if not self.training or self.p == 0.0:
            return x
        if rngs is None:
            raise ValueError(
                "Dropout in training mode needs random keys. Fix: call it as "
                "drop(x, rngs=rngs) with js.Rngs(dropout=seed), or call model.eval(). "
                "Sequential passes no rngs: for dropout in training, write a Module with a "
                "custom forward(self, x, rngs) that calls drop(x, rngs=rngs)"
            )
        return F.dropout(x, self.p, True, key=rngs.next("dropout"))

    def extra_repr(self) -> str:
        return f"p={self.p}"
