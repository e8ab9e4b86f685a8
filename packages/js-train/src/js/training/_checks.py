"""Argument checks of the js.training classes: js-core's ``js._checks``, in the form the
Trainer's files still call.

``check_int("Trainer max_epochs", value, 1)`` is ``js._checks.check_int("Trainer",
"max_epochs", value, 1)``; new code calls ``js._checks`` directly (one vocabulary for every js
distribution: NumPy integers accepted, bools refused, TypeError for a type and ValueError for a
bound).
"""

from __future__ import annotations

from js import _checks
from js._checks import is_int as is_int


def check_int(what: str, value, minimum: int) -> int:
    """``value`` as a Python int ``>= minimum``; ``what`` is ``"<owner> <argument>"``."""
    owner, name = what.rsplit(" ", 1)
    return _checks.check_int(owner, name, value, minimum)
