"""Import-time interface checks between js distributions.

Each distribution records ``__version__``, the ``INTERFACE`` it offers and, for every sibling it
imports, the inclusive range of that sibling's interfaces it supports (``REQUIRES``). At import a
consumer calls :func:`require`, which compares those ranges with what is installed and raises an
ImportError naming both versions and the fix, the way jax checks jaxlib.

This module is part of every js-core interface: its signature never changes.
"""

from __future__ import annotations

import importlib

# Where each distribution keeps its version record.
VERSION_MODULES = {
    "js-core": "js._version",
    "js-nn": "js.nn._version",
    "js-losses": "js.losses._version",
    "js-optim": "js.optim._version",
    "js-train": "js.training._version",
    "js-models": "js.models._version",
}


def check_interface(
    consumer: str,
    consumer_version: str,
    provider: str,
    provider_version: str,
    provider_interface: int,
    supported: tuple[int, int],
) -> None:
    """Raise ImportError unless ``provider_interface`` lies in the inclusive ``supported`` range."""
    low, high = supported
    if low <= provider_interface <= high:
        return
    wanted = f"{low}" if low == high else f"{low} to {high}"
    if provider_interface > high:
        fix = f"upgrade {consumer} (pip install -U {consumer}) or install an older {provider}"
    else:
        fix = f"upgrade {provider} (pip install -U {provider})"
    raise ImportError(
        f"{consumer} {consumer_version} supports {provider} interface {wanted}, but the installed "
        f"{provider} {provider_version} offers interface {provider_interface}. Fix: {fix}, "
        f"so that both come from compatible releases."
    )


def require(consumer: str, consumer_version: str, requires: dict[str, tuple[int, int]]) -> None:
    """Check, at the consumer's import, every sibling interface it ``requires``."""
    for provider, supported in requires.items():
        record = importlib.import_module(VERSION_MODULES[provider])
        check_interface(
            consumer,
            consumer_version,
            provider,
            record.__version__,
            record.INTERFACE,
            supported,
        )
