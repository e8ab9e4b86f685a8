"""timm, importable beside a broken torchvision: shared by the timm tests.

timm 1.0.31 imports torchvision at module level (``timm.layers`` reads
``torchvision.ops.misc.FrozenBatchNorm2d``; ``timm.data`` reads its transforms and datasets),
and the torchvision wheel here is a CUDA build that fails to import beside CPU torch. The
``timm`` fixture puts empty stand-ins for torchvision and the submodules timm touches into
``sys.modules``, imports timm (and ``timm.data``, which ``save_for_hf`` needs), and removes the
stand-ins again, so no other test sees them. timm's ResNet and ConvNeXt use none of it.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

# Every torchvision module timm imports, at module level or inside functions these tests run.
STAND_INS = (
    "torchvision",
    "torchvision.datasets",
    "torchvision.models",
    "torchvision.models.feature_extraction",
    "torchvision.ops",
    "torchvision.ops.misc",
    "torchvision.transforms",
    "torchvision.transforms.functional",
    "torchvision.utils",
)


class _Placeholder:
    """What any name read from a stand-in module is: a class nothing is an instance of."""

    def __init__(self, *args: object, **kwargs: object):
        raise RuntimeError("torchvision is stubbed out in these tests")


class _StandIn(types.ModuleType):
    """An empty module whose every missing attribute is a fresh placeholder class (timm reads
    names such as ``FrozenBatchNorm2d`` for ``isinstance`` checks and ``InterpolationMode``
    members in dictionaries built at import)."""

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _PlaceholderMeta(name, (_Placeholder,), {})
        setattr(self, name, value)
        return value


class _PlaceholderMeta(type):
    """Class attributes of a placeholder (``InterpolationMode.BILINEAR``) are placeholders too."""

    def __getattr__(cls, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return _PlaceholderMeta(f"{cls.__name__}.{name}", (_Placeholder,), {})


def import_timm() -> types.ModuleType:
    """``import timm`` (and ``timm.data``) with torchvision stand-ins that are removed after."""
    saved = {name: sys.modules.get(name) for name in STAND_INS}
    for name in STAND_INS:
        module = _StandIn(name)
        module.__path__ = []  # a package, so its submodules import from sys.modules
        sys.modules[name] = module
    for name in STAND_INS:  # parents hold their submodules as attributes, as after an import
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, sys.modules[name])
    try:
        import timm
        import timm.data  # noqa: F401
        import timm.models._hub  # noqa: F401
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return timm


@pytest.fixture(scope="module", name="timm")
def timm_fixture() -> Iterator[types.ModuleType]:
    """timm, imported once per test module with torchvision stood in for."""
    pytest.importorskip("torch")
    yield import_timm()
