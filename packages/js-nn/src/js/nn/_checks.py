"""Input validation shared by the layers.

Every check reads only static information (shapes, ranks, dtypes), so it runs the same way
eagerly and while ``js.jit`` traces, and never inserts a runtime check into compiled code.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np


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


def is_int(value) -> bool:
    """A Python or NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(layer: str, name: str, value, minimum: int | None = 1) -> int:
    """``value`` as a Python int when it is an integer (NumPy ones too) ``>= minimum``.

    js-train's convention (``js.training._checks.check_int``): a bool (an int to Python, but
    never meant as a count) or any non-integer raises TypeError naming its type; an integer
    below ``minimum`` raises ValueError naming the bound.
    """
    bound = "" if minimum is None else f" >= {minimum}"
    if not is_int(value):
        raise TypeError(
            f"{layer}: {name} must be an int{bound}, got {value!r} (a {type(value).__name__}). "
            f"Fix: pass an integer, e.g. {name}={max(minimum or 1, 1)}"
        )
    if minimum is not None and value < minimum:
        raise ValueError(f"{layer}: {name} must be an int{bound}, got {value!r}")
    return int(value)


def check_bool(layer: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(
            f"{layer}: {name} must be True or False, got {value!r} (a {type(value).__name__})"
        )
    return bool(value)


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


def check_probability(layer: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{layer}: {name} must be a float in [0, 1], got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{layer}: {name} must be in [0, 1], got {value}")
    return float(value)


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

