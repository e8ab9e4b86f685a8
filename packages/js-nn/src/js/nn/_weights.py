"""Weight files: a model's parameters and buffers in the safetensors format, and back.

safetensors (what PyTorch and Hugging Face users exchange) is a JSON header followed by raw
little-endian arrays: loading runs no code and maps the file into memory, unlike a pickle. js
writes it with the ``safetensors`` package's NumPy API, so neither torch nor orbax is imported.

Two layouts. ``"js"`` stores ``model.state_dict()`` as it is. ``"torch"`` stores PyTorch's
names and layouts through the per-layer ``from_torch``/``to_torch``/``torch_extras`` hooks of
:mod:`js.nn._torch` (a file ``safetensors.torch.save_file(torch_model.state_dict(), path)``
writes loads into the equivalent js model). The header's metadata records the layout and the js
versions next to the user's ``{str: str}`` entries; :func:`weights_info` reads it alone.

``load_weights`` also reads a checkpoint directory (see :mod:`js.nn.checkpoint`): onto the
model's current devices and shardings, reading the step's metadata once, without js-train.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
import safetensors
import safetensors.numpy
from numpy.typing import ArrayLike
from safetensors import safe_open

import js

from ._keys import check_prefix, plan_load
from ._torch import load_planned, torch_state_dict
from ._version import __version__

FORMAT = "js.nn.weights/1"
LAYOUTS = ("js", "torch")
_RESERVED = ("js.format", "js.layout", "js.version", "js.nn.version")
# First bytes of files that are not safetensors but are often mistaken for one.
_FOREIGN = {b"PK\x03\x04": "a zip archive (torch.save's format)", b"\x80": "a Python pickle"}


class WeightsInfo(NamedTuple):
    """What :func:`weights_info` reads from a weight file's header (no array is read)."""

    layout: str | None  # "js" or "torch"; None for a file js did not write
    js_version: str | None  # the js-core version that wrote it
    metadata: dict[str, str]  # the user's metadata
    tensors: dict[str, tuple[tuple[int, ...], str]]  # {name: (shape, safetensors dtype)}


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(
            f"layout must be one of {LAYOUTS}, got {layout!r}. Fix: layout='js' "
            "for files js writes and reads, 'torch' for PyTorch's names and layouts"
        )


def _header_metadata(layout: str, metadata: Mapping[str, str] | None) -> dict[str, str]:
    given = dict(metadata or {})
    bad = [
        f"{k!r}: {type(v).__name__}"
        for k, v in given.items()
        if not isinstance(k, str) or not isinstance(v, str)
    ]
    if bad:
        raise TypeError(
            f"save_weights metadata must be a dict[str, str], got entries {bad}. "
            "Fix: convert the values with str() (or json.dumps)"
        )
    clash = sorted(set(given) & set(_RESERVED))
    if clash:
        raise ValueError(
            f"save_weights metadata keys {clash} are written by js itself. Fix: choose other names"
        )
    return {
        **given,
        "js.format": FORMAT,
        "js.layout": layout,
        "js.version": js.__version__,
        "js.nn.version": __version__,
    }


def save_weights(
    model: js.Module | Mapping[str, ArrayLike],
    path: str | os.PathLike,
    *,
    layout: str = "js",
    prefix: str = "",
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``model``'s parameters and buffers to the safetensors file ``path``.

    Args:
        model: a ``js.Module``, or a ``{path: array}`` state dict (``layout='js'`` only).
        path: the file to write (replaced if it exists).
        layout: ``'js'`` (``model.state_dict()`` as it is) or ``'torch'`` (PyTorch's names and
            layouts: ``torch_module.load_state_dict(safetensors.torch.load_file(path))``).
        prefix: added in front of every name, e.g. ``'model.'`` as Hugging Face nests modules.
        metadata: ``{str: str}`` kept in the header; read it back with :func:`weights_info`.

    Example:
        >>> import os, tempfile, js, js.nn as nn
        >>> path = os.path.join(tempfile.mkdtemp(), "linear.safetensors")
        >>> nn.save_weights(nn.Linear(2, 1, rngs=js.Rngs(params=0)), path, metadata={"run": "a"})
        >>> nn.weights_info(path).metadata
        {'run': 'a'}
    """
    _check_layout(layout)
    check_prefix(prefix)
    header = _header_metadata(layout, metadata)
    if isinstance(model, js.Module):
        arrays = torch_state_dict(model) if layout == "torch" else model.state_dict()
    elif isinstance(model, Mapping) and layout == "js":
        arrays = {str(key): np.asarray(value) for key, value in model.items()}
    else:
        raise TypeError(
            f"save_weights expects a js.Module (or, with layout='js', a state dict),"
            f" got {type(model).__name__}. Fix: pass the model itself"
        )
    tensors = {prefix + key: np.asarray(array, order="C") for key, array in arrays.items()}
    # Written beside the target and renamed: a crash never leaves a half-written file at path.
    partial = Path(f"{path}.partial")
    safetensors.numpy.save_file(tensors, str(partial), metadata=header)
    os.replace(partial, path)


def _open_error(path: Path, error: Exception) -> ValueError:
    with open(path, "rb") as file:
        head = file.read(4)
    kind = next((what for magic, what in _FOREIGN.items() if head.startswith(magic)), None)
    if kind is not None:
        return ValueError(
            f"{path} is {kind}, not a safetensors file; js never unpickles (it could run code). "
            "Fix: convert it where you trust it, e.g. safetensors.torch.save_file("
            "torch.load(old, weights_only=True), new)"
        )
    return ValueError(
        f"{path} is not a readable safetensors file (damaged or truncated?): "
        f"{error}. Fix: write it again with save_weights or safetensors' save_file"
    )


def _checked_file(path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no weight file at {path}. Fix: pass the path save_weights or "
            "safetensors' save_file wrote"
        )
    return path


def _read(path: Path) -> tuple[dict[str, str], dict]:
    """``(header metadata, {name: (shape, safetensors dtype)})``: the header alone."""
    try:
        with safe_open(str(path), framework="np") as file:
            meta = dict(file.metadata() or {})
            return meta, {
                key: (tuple(file.get_slice(key).get_shape()), file.get_slice(key).get_dtype())
                for key in file.keys()
            }
    except safetensors.SafetensorError as error:
        raise _open_error(path, error) from None


def _read_tensors(path: Path, keys: list[str]) -> dict[str, np.ndarray]:
    """``{name: array}`` for ``keys`` only (a file's ignored tensors are never read)."""
    try:
        with safe_open(str(path), framework="np") as file:
            return {key: file.get_tensor(key) for key in keys}
    except safetensors.SafetensorError as error:
        raise _open_error(path, error) from None


def weights_info(path: str | os.PathLike) -> WeightsInfo:
    """The header of the weight file ``path``: layout, js version, metadata, tensor shapes.

    Example:
        >>> import os, tempfile, js, js.nn as nn
        >>> path = os.path.join(tempfile.mkdtemp(), "bn.safetensors")
        >>> nn.save_weights(nn.BatchNorm1d(3), path)
        >>> info = nn.weights_info(path)
        >>> info.layout, info.tensors["running_var"]
        ('js', ((3,), 'F32'))
    """
    meta, tensors = _read(_checked_file(path))
    user = {key: value for key, value in meta.items() if key not in _RESERVED}
    return WeightsInfo(meta.get("js.layout"), meta.get("js.version"), user, tensors)


def _load_file(
    model: js.Module,
    path,
    layout: str,
    strict: bool,
    prefix: str,
    key_mapping: Mapping[str, str] | None,
) -> js.IncompatibleKeys:
    path = _checked_file(path)
    meta, shapes = _read(path)
    written = meta.get("js.layout")
    if written is not None and written != layout:
        raise ValueError(
            f"{path} was written with layout={written!r}, but layout={layout!r} "
            f"was asked. Fix: load_weights(model, path, layout={written!r})"
        )
    plan = plan_load(
        model,
        shapes,
        prefix=prefix,
        key_mapping=key_mapping,
        strict=strict,
        layout=layout,
        source=str(path),
    )
    return load_planned(model, plan, lambda keys: _read_tensors(path, keys), layout)


def load_weights(
    model: js.Module,
    path: str | os.PathLike,
    *,
    layout: str = "js",
    strict: bool = True,
    prefix: str = "",
    key_mapping: Mapping[str, str] | None = None,
    step: int | None = None,
    name: str = "model",
) -> js.IncompatibleKeys:
    """Load a safetensors file, or a js-train checkpoint directory, into ``model``.

    All or nothing, as ``model.load_state_dict``: every missing, unexpected, mis-shaped and
    mis-typed entry is checked first and reported in one ValueError before anything is copied.
    A file that is not safetensors (truncated, a pickle, ``torch.save``'s zip) is a ValueError;
    nothing in the file is executed.

    Args:
        model: the ``js.Module`` to fill (same architecture as the saved one).
        path: a ``.safetensors`` file, or a checkpoint directory written by
            ``save_checkpoint``/``ModelCheckpoint`` (orbax is imported only then; the arrays
            go onto the model's current shardings, the save id and every digest are
            verified, a damaged step raises ``CheckpointError``).
        layout: ``'js'`` or ``'torch'`` (PyTorch's names and layouts, converted per layer).
            A file js wrote records its layout; asking for the other one is an error.
        strict: with ``False``, missing and unexpected names are skipped and returned
            (shapes and dtypes must still match). Files only.
        prefix: ``''`` or a dotted name ending in ``'.'`` (``'bert.'``): the names under it
            lose it and load strictly; the rest of the file (a classifier head next to the
            backbone) is not read, and is returned as ``ignored_keys``, never an error.
        key_mapping: ``{regex: replacement}`` renames of the file's names, applied before
            ``prefix`` with transformers 5.23's ``from_pretrained(key_mapping=)`` rules: every
            rule in turn, each rewriting its pattern's first match (see ``js.nn._keys``). A bad
            pattern, or two names renamed onto one, is an error naming them.
        step: checkpoint directories only: the step to read (default: the best, else the last).
        name: checkpoint directories only: the entry holding the model (default ``'model'``).

    A Parameter held under several paths (tied weights, e.g. ``lm_head.weight`` is
    ``wte.weight``) is supplied by any one of its names, as Hugging Face files store it once;
    a file giving two of its names different values is an error naming both.

    Returns:
        ``IncompatibleKeys(missing_keys, unexpected_keys)``, empty unless ``strict=False``;
        its ``ignored_keys`` attribute lists the file's names outside ``prefix``.

    Example:
        >>> import os, tempfile, js, js.nn as nn
        >>> path = os.path.join(tempfile.mkdtemp(), "linear.safetensors")
        >>> nn.save_weights(nn.Linear(2, 1, rngs=js.Rngs(params=0)), path)
        >>> nn.load_weights(nn.Linear(2, 1, rngs=js.Rngs(params=1)), path)
        IncompatibleKeys(missing_keys=[], unexpected_keys=[])
    """
    _check_layout(layout)
    check_prefix(prefix)
    if not isinstance(model, js.Module):
        raise TypeError(f"load_weights expects a js.Module to fill, got {type(model).__name__}")
    if Path(path).is_dir():
        from .checkpoint.load import load_model

        if layout != "js" or prefix or not strict or key_mapping is not None:
            raise NotImplementedError(
                f"{path} is a checkpoint directory, which holds js names and layouts and loads "
                "strictly: layout, prefix, key_mapping and strict=False apply to weight files. "
                "Fix: drop them, or export the checkpoint first (js.nn.export_weights)"
            )
        load_model(model, Path(path), "best" if step is None else step, name)
        return js.IncompatibleKeys([], [])
    if step is not None or name != "model":
        raise ValueError(
            f"step= and name= select inside a checkpoint directory, but {path} is "
            "not a directory. Fix: leave them out for a weight file"
        )
    return _load_file(model, path, layout, strict, prefix, key_mapping)
