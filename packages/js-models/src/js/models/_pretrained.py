"""Reading and writing model folders (config.json + safetensors). Being built: see the
js-models issue; replaced before this lands."""

from __future__ import annotations

import os
from typing import Any


def from_pretrained(
    path: str | os.PathLike,
    *,
    dtype: Any = None,
    strict: bool = True,
    mesh: Any = None,
    rules: Any = (),
) -> Any:
    """The model of a Hugging Face or timm folder, in eval mode."""
    raise NotImplementedError("js.models.from_pretrained is being built")


def load_pretrained(path, cls, *, dtype, strict, mesh, rules):  # noqa: ANN001, ANN201
    raise NotImplementedError("js.models.from_pretrained is being built")


def save_pretrained(model, path) -> None:  # noqa: ANN001
    raise NotImplementedError("save_pretrained is being built")
