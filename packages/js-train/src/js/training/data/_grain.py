"""grain, the optional extra ``js-train[grain]``: importing it with an install hint, and
recognising its objects without importing it.

A leaf of the data package: :mod:`._batches`, :mod:`._rows` and :mod:`._train_data` import it,
and it imports nothing of js.
"""

from __future__ import annotations

from typing import Any

# grain's public classes the Trainer iterates itself, by the name of a class in the MRO
GRAIN_CLASSES = ("MapDataset", "IterDataset", "DataLoader")


def import_grain(needed_by: str = "js.training.data.process_batches") -> Any:
    """grain, or an ImportError that says how to install it."""
    try:
        import grain
    except ImportError as error:
        raise ImportError(
            f"{needed_by} needs grain, js-train's optional extra. Fix: "
            "pip install 'js-train[grain]'"
        ) from error
    return grain


def grain_kind(data: Any) -> str | None:
    """``'MapDataset'``, ``'IterDataset'`` or ``'DataLoader'`` for a grain object, else None
    (without importing grain: by the module of ``data``'s classes)."""
    for cls in type(data).__mro__:
        if cls.__name__ in GRAIN_CLASSES and cls.__module__.split(".")[0] == "grain":
            return cls.__name__
    return None


def absl_parsed() -> None:
    """grain's worker processes read absl flags, which raise UnparsedFlagAccessError in a
    program that never parsed them (any script without ``absl.app``): mark them parsed."""
    try:
        from absl import flags  # grain's own dependency, present wherever grain is
    except ImportError:  # no absl: no grain workers either
        return

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
