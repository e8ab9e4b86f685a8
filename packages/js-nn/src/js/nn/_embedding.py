"""Embedding."""

from __future__ import annotations

import jax
import numpy as np

from js import Module, Parameter

from . import _random
from . import functional as F
from ._checks import check_int, check_integer


class Embedding(Module):
    """A lookup table: ``y[...] = weight[x[...]]``.

    Args:
        num_embeddings: V, the number of rows. embedding_dim: D, each row's size.
        rngs: ``js.Rngs`` with a ``params`` stream.

    Shape:
        input integer ``[...]`` with values in ``[0, V)`` (a data precondition: it is not
        checked in compiled code), output ``[..., D]``.

    Weights:
        ``weight`` ``[V, D]`` from N(0, 1), as in PyTorch.

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> emb = js.nn.Embedding(10, 4, rngs=js.Rngs(params=0))
        >>> emb(jnp.array([[1, 2, 3]])).shape
        (1, 3, 4)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, *, rngs):
        super().__init__()
        num_embeddings = check_int("Embedding", "num_embeddings", num_embeddings)
        embedding_dim = check_int("Embedding", "embedding_dim", embedding_dim)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        key = rngs.next("params")
        self.weight = Parameter(_random.normal(key, (num_embeddings, embedding_dim)))

    def forward(self, x):
        if not isinstance(x, (jax.Array, np.ndarray)):  # a list, a Python or NumPy int, ...
            x = np.asarray(x)
            if x.dtype.kind not in "iu":
                raise TypeError(
                    f"Embedding: expected integer indices (an array or a nested list of ints), "
                    f"got {x.dtype.name} values. Fix: convert them, e.g. jnp.asarray(x, jnp.int32)"
                )
        check_integer("Embedding", x)
        return F.embedding(x, self.weight.value)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"
