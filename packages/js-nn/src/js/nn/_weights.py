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

import errno
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import jax.numpy as jnp
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
# safetensors dtypes its NumPy API cannot read (it asks NumPy for float8 types NumPy lacks):
# read from the file's bytes as the ml_dtypes types JAX uses.
_RAW_DTYPES = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
# How much of the target's name the temporary file beside it keeps (see _write).
_TEMP_NAME = 200


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
    target = _target(path)
    header = _header_metadata(layout, metadata)
    if isinstance(model, js.Module):
        arrays = torch_state_dict(model) if layout == "torch" else model.state_dict()
    elif isinstance(model, Mapping) and layout == "js":
        arrays = {str(key): _state_array(key, value) for key, value in model.items()}
    else:
        raise TypeError(
            f"save_weights expects a js.Module (or, with layout='js', a state dict),"
            f" got {type(model).__name__}. Fix: pass the model itself"
        )
    tensors = {prefix + key: np.asarray(array, order="C") for key, array in arrays.items()}
    _write(tensors, header, target)


def _target(path) -> Path:
    """The file ``save_weights`` writes, checked before anything is: a path whose parent is a
    directory and that is not one itself."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"save_weights: path must be a file path (str or os.PathLike), got "
            f"{type(path).__name__}. Fix: save_weights(model, 'model.safetensors')"
        )
    target = Path(path)
    try:
        is_dir = target.is_dir()
    except OSError as error:  # e.g. a name too long for the file system
        raise _write_error(target, error) from None
    if is_dir:
        raise IsADirectoryError(
            f"save_weights: {target} is a directory. Fix: name a file inside it, e.g. "
            f"{target / 'model.safetensors'}"
        )
    parent = target.absolute().parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise FileNotFoundError(
            f"save_weights: cannot write {target}: its directory {parent} {what}. Fix: create "
            "the directory first (Path(...).mkdir(parents=True)) or choose another path"
        )
    return target


def _state_array(key, value) -> np.ndarray:
    """One value of a state dict as a NumPy array, or a TypeError naming its key."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:  # e.g. a ragged list
        array, why = None, f" ({error})"
    else:
        why = ""
    if array is None or array.dtype.kind not in "biufcV" or array.dtype == object:
        raise TypeError(
            f"save_weights: state dict entry {key!r} is a {type(value).__name__}, not an array "
            f"of numbers{why}. Fix: pass only arrays (parameters and buffers), e.g. "
            "model.state_dict()"
        )
    return array


def _write(tensors: dict, header: dict, target: Path) -> None:
    """Write beside ``target`` under a name no other writer uses, then rename: a crash never
    leaves a half-written file at ``target``, and two writers never share a temporary file.

    A failure names ``target`` and the cause, never the hidden temporary file the user did not
    ask for; the temporary file is removed."""
    name = None
    try:
        # the target's name, cut so that ".<name>.<8 random>.partial" fits the usual 255 bytes
        prefix = f".{target.name[:_TEMP_NAME]}."
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=".partial", dir=target.parent)
        os.close(fd)
        try:
            safetensors.numpy.save_file(tensors, name, metadata=header)
        except safetensors.SafetensorError as error:  # e.g. a full disk, a file size limit
            raise OSError(f"save_weights: could not write {target}: {error}") from None
        os.replace(name, target)
    except OSError as error:
        if error.errno is None:  # raised above, naming the target already
            raise
        raise _write_error(target, error) from None
    finally:
        if name is not None:  # after the rename, nothing is left under this name
            Path(name).unlink(missing_ok=True)


def _write_error(target: Path, error: OSError) -> OSError:
    """``error`` (raised on the temporary file or the rename) as the same kind of OSError,
    naming ``target`` instead, with the cause and the fix."""
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = f"choose a directory you can write, or make {target.parent} writable"
    elif error.errno == errno.ENAMETOOLONG:
        fix = "choose a shorter file name"
    elif error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = "free some space, or choose another disk"
    else:
        fix = "choose another path"
    cause = error.strerror or str(error)
    return type(error)(error.errno, f"save_weights: could not write {target}: {cause}. Fix: {fix}")


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
            raw = [key for key in keys if file.get_slice(key).get_dtype() in _RAW_DTYPES]
            arrays = {key: file.get_tensor(key) for key in keys if key not in raw}
    except safetensors.SafetensorError as error:
        raise _open_error(path, error) from None
    return {**arrays, **_read_raw(path, raw)} if raw else arrays


def _read_raw(path: Path, keys: list[str]) -> dict[str, np.ndarray]:
    """Tensors of the dtypes in ``_RAW_DTYPES`` from the file's bytes (safe_open has already
    checked the header: an 8-byte little-endian length, the JSON, then the data)."""
    out = {}
    with open(path, "rb") as file:
        length = int.from_bytes(file.read(8), "little")
        header = json.loads(file.read(length))
        for key in keys:
            entry = header[key]
            start, end = entry["data_offsets"]
            file.seek(8 + length + start)
            dtype = jnp.dtype(_RAW_DTYPES[entry["dtype"]])
            data = np.frombuffer(file.read(end - start), dtype)
            out[key] = data.reshape(entry["shape"])
    return out


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
    if layout == "js" and written is None and plan.error() is not None:
        _refuse_torch_layout(model, path, shapes, prefix, key_mapping)
    return load_planned(model, plan, lambda keys: _read_tensors(path, keys), layout)


def _refuse_torch_layout(model, path: Path, shapes: dict, prefix: str, key_mapping) -> None:
    """A file js did not write whose names do not fit the js layout but fit PyTorch's (e.g.
    BatchNorm's ``num_batches_tracked``): say so, rather than list its keys as unexpected."""
    torch_plan = plan_load(
        model, shapes, prefix=prefix, key_mapping=key_mapping, layout="torch", source=str(path)
    )
    if torch_plan.error() is None:
        extra = f" (e.g. {torch_plan.dropped[0]!r})" if torch_plan.dropped else ""
        raise ValueError(
            f"{path} looks like a PyTorch state dict: its names fit {type(model).__name__}'s "
            f"PyTorch layout{extra}, not js's; nothing was loaded. Fix: "
            "load_weights(model, path, layout='torch')"
        )


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
