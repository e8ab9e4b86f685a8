"""The PyTorch side of the ResNet port: torchvision's own ``models/resnet.py``, run alone.

``import torchvision`` fails beside the CPU build of torch (its wheel is a CUDA build:
"operator torchvision::nms does not exist"), but the model file is plain Python. We locate the
installed package without importing it, keep the file's top-level imports of torch and the
standard library and its model classes and functions (not the pretrained-weights machinery),
and execute exactly that source.
"""

from __future__ import annotations

import ast
import importlib.util
import types
from pathlib import Path

# What the port needs from the file; everything else in it is weights enums and builders.
NAMES = {"conv3x3", "conv1x1", "BasicBlock", "Bottleneck", "ResNet"}


def resnet_path() -> Path | None:
    """The installed torchvision's ``models/resnet.py``, or None (located, never imported)."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / "resnet.py"
    return path if path.is_file() else None


def _kept(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return getattr(node, "level", 0) == 0  # torch, typing, functools; not torchvision's
    return isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in NAMES


def load_resnet(path: Path) -> types.ModuleType:
    """torchvision's ResNet classes, executed from ``path`` (torchvision's telemetry stubbed)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module = types.ModuleType("torchvision_resnet")
    module.__file__ = str(path)
    module._log_api_usage_once = lambda obj: None  # torchvision.utils' usage logging
    body = ast.Module(body=[node for node in tree.body if _kept(node)], type_ignores=[])
    exec(compile(body, str(path), "exec"), module.__dict__)
    missing = NAMES - set(vars(module))
    if missing:
        raise RuntimeError(f"{path} no longer defines {sorted(missing)}")
    return module


def torch_resnet18(module: types.ModuleType, **kwargs):
    """torchvision's ``resnet18(weights=None, **kwargs)``: ``ResNet(BasicBlock, [2, 2, 2, 2])``."""
    return module.ResNet(module.BasicBlock, [2, 2, 2, 2], **kwargs)
