"""Argument checks shared by the js.training classes."""

from __future__ import annotations

import numbers


def is_int(value) -> bool:
    """Whether ``value`` is an integer (NumPy ones too) and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(what: str, value, minimum: int) -> int:
    """``value`` as a Python int when it is an integer (NumPy ones too) ``>= minimum``.

    A bool is refused (``True`` is an int to Python, but never meant as a count), and so is
    anything that is not an integer: a TypeError names the type; a ValueError the bound.
    """
    if not is_int(value):
        raise TypeError(
            f"{what} must be an int >= {minimum}, got {value!r} (a {type(value).__name__}). "
            f"Fix: pass an integer, e.g. {what.rsplit(' ', 1)[-1]}={max(minimum, 1)}."
        )
    if value < minimum:
        raise ValueError(f"{what} must be an int >= {minimum}, got {value!r}")
    return int(value)
