"""The safetensors reader of a model folder: its weight files (``model.safetensors``, or the
shards that ``model.safetensors.index.json`` names), read one tensor or one slice at a time
with plain file reads, and the dtype each tensor is loaded as.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import safetensors
from safetensors import safe_open

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
_ALIGN = 64  # bytes: the alignment XLA's CPU client needs to adopt a host buffer
_POPULATE_FROM = 1 << 16  # bytes: larger tensors get a mapping of their own
_CHUNK = 16 << 20  # bytes: a sliced read goes through blocks of rows of at most this size
_FLOAT_DTYPES = {"float32": jnp.float32, "float16": jnp.float16, "bfloat16": jnp.bfloat16}
_ST_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": jnp.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}


class _Weights:
    """The tensors of a folder's weight files, read lazily (one tensor or slice at a time)."""

    def __init__(self, folder: Path):
        single, index = folder / WEIGHTS_NAME, folder / WEIGHTS_INDEX_NAME
        if single.is_file():
            files = [single]
            self.where: dict[str, Path] = {}
        elif index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise ValueError(
                    f"from_pretrained: {index} is not a safetensors index (a JSON object with "
                    f"'weight_map'): {error!r}. Fix: write the folder again"
                ) from None
            self.where = {key: folder / name for key, name in weight_map.items()}
            files = sorted(set(self.where.values()))
            absent = [str(f.name) for f in files if not f.is_file()]
            if absent:
                raise FileNotFoundError(
                    f"from_pretrained: {index} lists shards that are not in {folder}: {absent}. "
                    "Fix: copy every shard into the folder"
                )
        else:
            others = sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pth", ".pt"))
            hint = (
                f" It holds {others}: pickled PyTorch files, which js never unpickles (they can "
                "run code); convert them where you trust them (save_pretrained with "
                "safe_serialization, or safetensors.torch.save_file)."
                if others
                else ""
            )
            raise FileNotFoundError(
                f"from_pretrained: {folder} has no {WEIGHTS_NAME} or {WEIGHTS_INDEX_NAME}.{hint} "
                "Fix: pass a folder with safetensors weights"
            )
        self._files: dict[Path, Any] = {}
        self.offsets: dict[str, tuple[int, int]] = {}  # name -> (file offset, bytes)
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, str] = {}
        indexed = dict(self.where)
        for file in files:
            handle = self._open(file)
            for key in handle.keys():
                if indexed and indexed.get(key) != file:
                    continue  # a shard's stray key the index does not name
                info = handle.get_slice(key)
                self.shapes[key] = tuple(info.get_shape())
                self.dtypes[key] = info.get_dtype()
                self.where[key] = file
            self.offsets.update(_data_offsets(file))

    def _open(self, file: Path) -> Any:
        if file not in self._files:
            try:
                self._files[file] = safe_open(str(file), framework="numpy")
            except (safetensors.SafetensorError, OSError) as error:
                raise ValueError(
                    f"from_pretrained: {file} is not a readable safetensors file ({error}). "
                    "Fix: write or download it again"
                ) from None
        return self._files[file]

    def read(self, key: str, index: tuple[slice, ...] | None = None) -> np.ndarray:
        """The tensor ``key`` (or its slice ``index``) as a NumPy array of its own.

        Read with plain file reads, never through a memory map: the pages of a mapped file
        count against the process while it stays mapped, so a sharded load reading its slices
        from a map held the whole file's pages by the end. A slice is read a block of rows at
        a time (at most ``_CHUNK`` bytes beyond the slice itself).
        """
        shape = self.shapes[key]
        dtype = _ST_DTYPES.get(self.dtypes[key])
        if dtype is None or key not in self.offsets:  # a dtype NumPy lacks: safetensors' reader
            handle = self._open(self.where[key])
            return handle.get_tensor(key) if index is None else handle.get_slice(key)[index]
        dtype = np.dtype(dtype).newbyteorder("<")
        bounds = [(0, n) for n in shape]
        if index is not None and shape:
            steps = [s.indices(n) for s, n in zip(index, shape, strict=True)]
            if any(step != 1 for _, _, step in steps):
                return self._open(self.where[key]).get_slice(key)[index]
            bounds = [(start, max(start, stop)) for start, stop, _ in steps]
        out_shape = tuple(stop - start for start, stop in bounds)
        # Read straight into a buffer of its own: one copy from the page cache, and XLA on the
        # CPU adopts a page-aligned buffer instead of copying it again. The buffer's pages are
        # mapped in one call: faulting them in one by one cost 3x the read.
        out = _host_buffer(int(np.prod(out_shape)) * dtype.itemsize).view(dtype).reshape(out_shape)
        if out.size == 0:
            return out
        offset, _ = self.offsets[key]
        if not shape:
            self._read_into(key, offset, out.reshape(-1).view(np.uint8))
            return out
        row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize  # bytes of one row
        (first, last), inner = bounds[0], tuple(slice(a, b) for a, b in bounds[1:])
        if all(b - a == n for (a, b), n in zip(bounds[1:], shape[1:], strict=True)):
            # whole rows: one read of the contiguous block, straight into the result
            self._read_into(key, offset + first * row, out.reshape(-1).view(np.uint8))
            return out
        rows = max(1, _CHUNK // max(row, 1))
        for start in range(first, last, rows):
            stop = min(last, start + rows)
            block = np.empty((stop - start) * row, np.uint8)
            self._read_into(key, offset + start * row, block)
            block_rows = block.view(dtype).reshape((stop - start, *shape[1:]))
            out[start - first : stop - first] = block_rows[(slice(None), *inner)]
        return out

    def _read_into(self, key: str, offset: int, buffer: np.ndarray) -> None:
        """Fill ``buffer`` (bytes) from ``key``'s file at ``offset``."""
        view, done = buffer.data, 0
        with open(self.where[key], "rb", buffering=0) as file:
            file.seek(offset)
            while done < buffer.size:
                got = file.readinto(view[done:])
                if not got:
                    raise ValueError(
                        f"from_pretrained: {self.where[key]} ends inside tensor {key!r} "
                        "(truncated?). Fix: write or download it again"
                    )
                done += got

    def close(self) -> None:
        self._files.clear()  # safe_open handles unmap when collected


def _host_buffer(size: int) -> np.ndarray:
    """``size`` writable, page-aligned bytes, their pages already mapped where Linux can."""
    if size < _POPULATE_FROM:
        raw = np.empty(size + _ALIGN, np.uint8)
        skip = -raw.ctypes.data % _ALIGN
        return raw[skip : skip + size]
    flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0) | getattr(mmap, "MAP_POPULATE", 0)
    return np.frombuffer(mmap.mmap(-1, size, flags=flags), np.uint8)


def _data_offsets(file: Path) -> dict[str, tuple[int, int]]:
    """``{name: (offset in the file, bytes)}`` from a safetensors header (8 bytes of its
    length, then JSON; safe_open has already validated it)."""
    with open(file, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(length))
    return {
        name: (
            8 + length + entry["data_offsets"][0],
            entry["data_offsets"][1] - entry["data_offsets"][0],
        )
        for name, entry in header.items()
        if name != "__metadata__"
    }


# -- dtypes ------------------------------------------------------------------------------------


def _check_dtype(dtype: Any) -> Any:
    if dtype is None or dtype == "auto":
        return dtype
    if isinstance(dtype, str) and dtype in _FLOAT_DTYPES:
        return jnp.dtype(_FLOAT_DTYPES[dtype])
    try:
        resolved = jnp.dtype(dtype)
    except TypeError:
        resolved = None
    if resolved is None or not jnp.issubdtype(resolved, jnp.floating):
        raise TypeError(
            f"from_pretrained: dtype must be a floating dtype (jnp.float32, jnp.bfloat16, "
            f"jnp.float16) or 'auto' or None, got {dtype!r}"
        )
    return resolved


def _target_dtype(abstract: Any, file_dtype: Any, dtype: Any) -> Any:
    if not jnp.issubdtype(abstract.dtype, jnp.floating):
        return abstract.dtype
    if dtype == "auto":
        return file_dtype if jnp.issubdtype(file_dtype, jnp.floating) else abstract.dtype
    return abstract.dtype if dtype is None else dtype


def _converter(file_dtype: Any, target: Any, abstract: Any) -> Callable[[np.ndarray], np.ndarray]:
    if jnp.issubdtype(abstract.dtype, jnp.floating) != jnp.issubdtype(file_dtype, jnp.floating):
        target = abstract.dtype  # an integer buffer stays exact: cast to the model's own type

    def convert(array: np.ndarray) -> np.ndarray:
        return array if array.dtype == target else array.astype(target)

    return convert


def _slice_reader(
    weights: _Weights, key: str, convert: Callable[[np.ndarray], np.ndarray]
) -> Callable[[Any], np.ndarray]:
    cache: dict[tuple, np.ndarray] = {}  # replicated slices are read once, not once a device

    def read(index: Any) -> np.ndarray:
        marker = tuple((s.start, s.stop, s.step) for s in index)
        if marker not in cache:
            cache[marker] = convert(weights.read(key, tuple(index)))
        return cache[marker]

    return read
