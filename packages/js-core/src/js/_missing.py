"""Clear errors for js subpackages whose distribution is not installed."""

from __future__ import annotations

import importlib.abc
import sys

# Subpackage of the js namespace -> the distribution that provides it.
DISTRIBUTIONS = {
    "js.nn": "js-nn",
    "js.losses": "js-losses",
    "js.optim": "js-optim",
    "js.training": "js-train",
    "js.models": "js-models",
}


class _InstallHintFinder(importlib.abc.MetaPathFinder):
    """Last finder on ``sys.meta_path``: reached only when no installed portion has the name."""

    def error_for(self, fullname: str) -> ModuleNotFoundError | None:
        distribution = DISTRIBUTIONS.get(fullname)
        if distribution is None:
            return None
        # ``name`` differs from ``fullname`` on purpose: ``from js import optim`` silently drops
        # a ModuleNotFoundError whose name is the submodule's, and we want the hint to reach
        # the user.
        return ModuleNotFoundError(
            f"{fullname} is provided by the {distribution} distribution, which is not installed. "
            f"Fix: pip install {distribution} (or pip install js for every js distribution).",
            name=distribution,
        )

    def find_spec(self, fullname, path=None, target=None):
        error = self.error_for(fullname)
        if error is not None:
            raise error
        return None

    def install(self) -> None:
        if not any(isinstance(finder, _InstallHintFinder) for finder in sys.meta_path):
            sys.meta_path.append(self)


install_hint_finder = _InstallHintFinder()
