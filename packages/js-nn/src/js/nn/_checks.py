"""Input validation shared by the layers.

Every check reads only static information (shapes, ranks, dtypes), so it runs the same way
eagerly and while ``js.jit`` traces, and never inserts a runtime check into compiled code.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import jax.numpy as jnp


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
    """``value`` as an int, after refusing bools, non-integers and values below ``minimum``."""
    if not is_int(value) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"{layer}: {name} must be an integer{bound}, got {value!r}")
    return int(value)


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


def check_float_dtype(layer: str, dtype) -> jnp.dtype:
    """A layer's parameter dtype: float32 for None (whatever ``jax_enable_x64`` says), else
    ``dtype`` after refusing non-floating ones (PyTorch's ``dtype`` factory argument)."""
    if dtype is None:
        return jnp.dtype(jnp.float32)
    try:
        dtype = jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"{layer}: dtype must be a floating dtype, got {dtype!r}") from None
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(
            f"{layer}: dtype must be a floating dtype, got {dtype}. Fix: pass jnp.float32, "
            "jnp.bfloat16 or jnp.float64 (with jax_enable_x64)"
        )
    return dtype
