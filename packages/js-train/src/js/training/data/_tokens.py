"""TokenWindows: (x, y) windows over a memory-mapped token file, a grain random-access source.

The file is nanoGPT's ``train.bin``: a flat array of token ids with no header, written by
``np.array(ids, dtype=np.uint16).tofile(path)``. Everything is checked when the source is built
(from the file's size: nothing is read); the memory map itself opens on first use in each
process and is never pickled, so grain's worker processes each map the file themselves.

Random windows, in grain's terms: nanoGPT draws ``batch_size`` random offsets per step with
replacement. Here ``random=True`` makes *every* offset a window (``len = tokens - block_size``)
and the order is drawn by a seeded grain shuffle (``process_batches(shuffle=True)`` or
``grain.MapDataset.source(windows).shuffle(seed)``): the same uniform distribution over offsets,
but each offset once per epoch, a new order each epoch (grain seeds epoch ``e`` with
``seed + e``), and the position in that order is grain's checkpointable iterator state.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from js._checks import check_bool, check_int


class TokenWindows:
    """Windows ``(x, y)`` of a token file: ``x = tokens[s:s+T]``, ``y = tokens[s+1:s+1+T]``.

    A random-access source (``len``/``[i]``) for grain (``grain.MapDataset.source``,
    ``grain.DataLoader``) or :func:`process_batches`. Both arrays are ``int32 [T]`` with
    ``T = block_size``; ``y`` is ``x`` shifted by one token (the next-token targets).

    * ``random=False`` (validation): non-overlapping windows, window ``i`` starts at
      ``i * block_size``; ``len = (tokens - 1) // block_size``.
    * ``random=True`` (training): a window at every offset, window ``i`` starts at ``i``;
      ``len = tokens - block_size``. Draw them through a seeded shuffle (``process_batches``
      shuffles by default): the random windows nanoGPT samples, each offset once per epoch.

    The memory map opens lazily in each process and is dropped when pickled (grain workers
    re-open it); ``repr`` names the file, ``block_size``, ``dtype`` and ``random`` only, so a
    restored grain iterator recognises the same source.

    Args:
        path: the token file, a flat array of ``dtype`` token ids.
        block_size: tokens per window ``T`` (>= 1); the file needs at least ``T + 1`` tokens.
        dtype: the integer dtype the file was written with (nanoGPT: ``np.uint16``).
        random: a window at every offset (to be shuffled) instead of non-overlapping windows.

    Example:
        >>> import tempfile, numpy as np
        >>> path = tempfile.mkdtemp() + "/train.bin"
        >>> np.arange(10, dtype=np.uint16).tofile(path)
        >>> windows = TokenWindows(path, 4)
        >>> len(windows), len(TokenWindows(path, 4, random=True))
        (2, 6)
        >>> x, y = windows[1]
        >>> x.tolist(), y.tolist(), x.dtype
        ([4, 5, 6, 7], [5, 6, 7, 8], dtype('int32'))
    """

    def __init__(
        self,
        path: str | os.PathLike,
        block_size: int,
        dtype: DTypeLike = np.uint16,
        *,
        random: bool = False,
    ) -> None:
        block_size = check_int("TokenWindows", "block_size", block_size, 1)
        random = check_bool("TokenWindows", "random", random)
        try:
            dtype = np.dtype(dtype)
        except TypeError as error:
            raise TypeError(
                f"TokenWindows: dtype {dtype!r} is not a NumPy dtype. Fix: pass the dtype the "
                f"file was written with, e.g. dtype=np.uint16"
            ) from error
        if dtype.kind not in "iu":
            raise TypeError(
                f"TokenWindows: dtype must be an integer dtype (token ids), got {dtype}. Fix: "
                f"pass the dtype the file was written with, e.g. dtype=np.uint16"
            )
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"TokenWindows: no token file at '{path}'. Fix: write one with "
                f"np.array(ids, dtype=np.{dtype}).tofile(path), or pass its path"
            )
        size = path.stat().st_size
        if size % dtype.itemsize:
            raise ValueError(
                f"TokenWindows: '{path}' holds {size} bytes, not a whole number of {dtype} tokens "
                f"({dtype.itemsize} bytes each). Fix: pass the dtype it was written with"
            )
        tokens = size // dtype.itemsize
        if tokens < block_size + 1:
            raise ValueError(
                f"TokenWindows: '{path}' holds {tokens} tokens, too few for one window of "
                f"block_size={block_size} (x and its shifted targets need {block_size + 1}). "
                f"Fix: a smaller block_size or a longer file"
            )
        self.path, self.block_size, self.dtype, self.random = path, block_size, dtype, random
        self.tokens = tokens  # the file's length in tokens
        self._stride = 1 if random else block_size
        self._length = tokens - block_size if random else (tokens - 1) // block_size
        self._map: np.memmap | None = None

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Window ``index``: ``(x, y)``, two ``int32 [block_size]`` arrays."""
        index = int(index)
        if not -self._length <= index < self._length:
            raise IndexError(f"TokenWindows: window {index} out of range for {self._length}")
        if self._map is None:  # first use in this process (a grain worker maps its own)
            self._map = np.memmap(self.path, dtype=self.dtype, mode="r")
        start = (index % self._length) * self._stride
        chunk = np.asarray(self._map[start : start + self.block_size + 1], dtype=np.int32)
        return chunk[:-1], chunk[1:]

    def __repr__(self) -> str:
        return (
            f"TokenWindows('{self.path}', block_size={self.block_size}, "
            f"dtype={self.dtype.name}, random={self.random})"
        )

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_map": None}  # a memory map does not travel between processes
