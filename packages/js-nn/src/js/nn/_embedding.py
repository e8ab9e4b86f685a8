"""Embedding."""

from __future__ import annotations

import jax
import numpy as np
from jax.typing import DTypeLike

from js import Module, Parameter, Rngs

from . import functional as F
from ._checks import check_int, check_integer
from ._factory import float_dtype, normal


def _check_padding_idx(padding_idx, num_embeddings: int) -> int | None:
    if padding_idx is None:
        return None
    index = check_int("Embedding", "padding_idx", padding_idx, minimum=None)
    if not -num_embeddings <= index < num_embeddings:
        raise ValueError(
            f"Embedding: padding_idx must be in [-{num_embeddings}, {num_embeddings}) "
            f"(num_embeddings={num_embeddings}), got {index}"
        )
    return index % num_embeddings  # PyTorch stores a negative index counted from the end


def _refuse_unsupported(max_norm, scale_grad_by_freq) -> None:
    if max_norm is not None:
        raise NotImplementedError(
            f"Embedding: max_norm={max_norm!r} (renormalising looked-up rows in place) is not "
            "supported. Fix: leave max_norm=None"
        )
    if scale_grad_by_freq:
        raise NotImplementedError(
            "Embedding: scale_grad_by_freq=True is not supported. Fix: leave it False"
        )


class Embedding(Module):
    """A lookup table: ``y[...] = weight[x[...]]``.

    Args:
        num_embeddings: V, the number of rows. embedding_dim: D, each row's size.
        padding_idx: a row (negative counts from the end) initialised to zeros that gets no
            gradient, as in PyTorch; its value is returned as it is (None: no such row).
        max_norm, scale_grad_by_freq: only None and False; others raise
            NotImplementedError. norm_type: ignored (PyTorch uses it only with max_norm).
        sparse: accepted and ignored (gradients are dense arrays; the values are the same).
        rngs: ``js.Rngs`` with a ``params`` stream. dtype: the weight's dtype (float32).

    Shape:
        input integer ``[...]`` with values in ``[0, V)`` (a data precondition: it is not
        checked in compiled code), output ``[..., D]``.

    Weights:
        ``weight`` ``[V, D]`` from N(0, 1), as in PyTorch (row ``padding_idx`` zeros).

    Example:
        >>> import jax.numpy as jnp, js, js.nn
        >>> emb = js.nn.Embedding(10, 4, rngs=js.Rngs(params=0))
        >>> emb(jnp.array([[1, 2, 3]])).shape
        (1, 3, 4)
        >>> emb = js.nn.Embedding(10, 4, padding_idx=0, rngs=js.Rngs(params=0))
        >>> emb(jnp.array([0])).tolist()
        [[0.0, 0.0, 0.0, 0.0]]
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        *,
        rngs: Rngs,
        dtype: DTypeLike | None = None,
    ):
        super().__init__()
        num_embeddings = check_int("Embedding", "num_embeddings", num_embeddings)
        embedding_dim = check_int("Embedding", "embedding_dim", embedding_dim)
        self.padding_idx = _check_padding_idx(padding_idx, num_embeddings)
        _refuse_unsupported(max_norm, scale_grad_by_freq)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        shape, dtype = (num_embeddings, embedding_dim), float_dtype("Embedding", dtype)
        weight = normal(rngs.next("params"), shape, dtype)  # after every check: rngs untouched
        if self.padding_idx is not None:
            weight = weight.at[self.padding_idx].set(0)
        self.weight = Parameter(weight)

    def forward(self, x: jax.typing.ArrayLike) -> jax.Array:
        if not isinstance(x, (jax.Array, np.ndarray)):  # a list, a Python or NumPy int, ...
            x = np.asarray(x)
            if x.dtype.kind not in "iu":
                raise TypeError(
                    f"Embedding: expected integer indices (an array or a nested list of ints), "
                    f"got {x.dtype.name} values. Fix: convert them, e.g. jnp.asarray(x, jnp.int32)"
                )
        check_integer("Embedding", x)
        return F.embedding(x, self.weight.value, self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"
