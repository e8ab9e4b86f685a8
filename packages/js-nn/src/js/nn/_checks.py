"""Input validation shared by the layers.

Every check reads only static information (shapes, ranks, dtypes), so it runs the same way
eagerly and while ``js.jit`` traces, and never inserts a runtime check into compiled code.
The argument checks every js distribution shares (``check_int``, ``check_bool``,
``check_probability``, ``is_int``: NumPy scalars accepted, bools refused as numbers) live in
js-core's ``js._checks`` and are re-exported here for the layers.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp

from js._checks import check_bool as check_bool
from js._checks import check_int as check_int
from js._checks import check_probability as check_probability
from js._checks import is_int as is_int


def shape_of(x) -> tuple[int, ...]:
    return tuple(jnp.shape(x))


def layout(*dims: str) -> str:
    """``layout("B", "C=3", "L")`` -> ``'[B, C=3, L]'``: the expected shape, for messages."""
    return "[" + ", ".join(dims) + "]"


def fail_shape(layer: str, expected: str, x, why: str) -> None:
    raise ValueError(
        f"{layer}: expected input of shape {expected}, got {list(shape_of(x))} ({why})"
    )


def check_rank(layer: str, x, ranks: Sequence[int], expected: str) -> None:
    """Refuse an input whose rank is not one of ``ranks``."""
    ndim = len(shape_of(x))
    if ndim not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        fail_shape(layer, expected, x, f"a {ndim}-D input where {want} is needed")


def check_min_rank(layer: str, x, rank: int, expected: str) -> None:
    ndim = len(shape_of(x))
    if ndim < rank:
        fail_shape(layer, expected, x, f"a {ndim}-D input where at least {rank}-D is needed")


def check_dim(layer: str, x, axis: int, size: int, name: str, expected: str) -> None:
    """Refuse an input whose dimension ``axis`` is not ``size``; ``name`` says what it holds."""
    got = shape_of(x)[axis]
    if got != size:
        fail_shape(layer, expected, x, f"{name} is {got}, expected {size}")


def check_integer(layer: str, x) -> None:
    dtype = jnp.result_type(x)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(
            f"{layer}: expected integer indices, got dtype {dtype}. "
            "Fix: convert them, e.g. x.astype(jnp.int32)"
        )


def ints(layer: str, name: str, value, n: int, minimum: int | None = 0) -> tuple[int, ...]:
    """An int or a sequence of ``n`` ints (PyTorch's ``_ntuple``) as an ``n``-tuple, each
    ``>= minimum``: TypeError for another type or length, ValueError below the bound."""
    if is_int(value):
        value = (value,) * n
    if not (isinstance(value, (tuple, list)) and len(value) == n and all(map(is_int, value))):
        what = "an int" if n == 1 else f"an int or a tuple of {n} ints"
        raise TypeError(f"{layer}: {name} must be {what}, got {value!r}")
    if minimum is not None and any(v < minimum for v in value):
        raise ValueError(f"{layer}: {name} must be >= {minimum}, got {tuple(value)!r}")
    return tuple(int(v) for v in value)


def as_tuple(value, n: int) -> tuple[int, ...]:
    """An int repeated ``n`` times, or a sequence's ints (already checked by the caller)."""
    return (int(value),) * n if is_int(value) else tuple(int(v) for v in value)


def pair(value, name: str, layer: str) -> tuple[int, int]:
    """An int or a pair of ints as ``(h, w)``."""
    if is_int(value):
        return int(value), int(value)
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(map(is_int, value)):
        return int(value[0]), int(value[1])
    raise TypeError(f"{layer}: {name} must be an int or a pair of ints, got {value!r}")


def check_positive(layer: str, **values) -> None:
    for name, value in values.items():
        flat = value if isinstance(value, tuple) else (value,)
        if any(v < 1 for v in flat):
            raise ValueError(f"{layer}: {name} must be positive, got {value!r}")


def check_window(layer: str, x, sizes: Sequence[int], window: Sequence[int], expected: str) -> None:
    """Refuse spatial sizes (after padding) smaller than the (dilated) window."""
    if any(size < k for size, k in zip(sizes, window, strict=True)):
        fail_shape(
            layer,
            expected,
            x,
            f"spatial size {list(sizes)} (after padding) is smaller than the window {list(window)}",
        )


def dropout_key(owner: str, rngs, *, fix: str, why: str = "", hint: str = ""):
    """The next key of ``rngs``' ``dropout`` stream, for a layer that drops out now (the caller
    decides when: in training, with a probability above 0).

    Without ``rngs`` a ValueError: ``"{owner}{why} in training mode needs random keys. Fix:
    {fix} with js.Rngs(dropout=seed), or call model.eval(){hint}"``.
    """
    if rngs is None:
        raise ValueError(
            f"{owner}{why} in training mode needs random keys. Fix: {fix} with "
            f"js.Rngs(dropout=seed), or call model.eval(){hint}"
        )
    return rngs.next("dropout")
