"""``inspect.signature`` of a js class: its constructor's parameters, as torch's classes show.

flax's metaclasses (``PytreeMeta`` under ``js.Module`` and ``js.Rngs``, ``VariableMeta`` under
``js.Parameter`` and ``js.Buffer``) define ``__call__``, and ``inspect`` reads a metaclass's
``__call__`` before the class's ``__init__``: without help every such class would show
``(*args, **kwargs)`` to ``help()``, notebook tooltips and tools that build objects from their
signatures. ``inspect`` reads a ``__signature__`` attribute first; :class:`ConstructorSignature`
is that attribute, set once on each base class.
"""

from __future__ import annotations

import inspect
from typing import Any

_SELF = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def constructor_signature(cls: type) -> inspect.Signature:
    """The signature of ``cls.__init__`` without its first parameter (``self``)."""
    signature = inspect.signature(cls.__init__)
    parameters = list(signature.parameters.values())
    if parameters and parameters[0].kind in _SELF:
        parameters = parameters[1:]
    return signature.replace(parameters=parameters)


class ConstructorSignature:
    """A class's ``__signature__``: read on a class, :func:`constructor_signature` of that
    class; read on an instance, ``None``, so that ``inspect.signature(instance)`` stays the
    signature of its ``__call__``.

    It is computed on each read from the class it is read on: a subclass shows its own
    ``__init__``, one without an ``__init__`` its parent's, and nothing is stored on the
    classes (pickling, copying and flax's graph machinery never see it).
    """

    def __get__(self, instance: Any, owner: type) -> inspect.Signature | None:
        return None if instance is not None else constructor_signature(owner)
