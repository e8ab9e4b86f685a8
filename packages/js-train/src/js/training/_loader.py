"""ArrayLoader: batches over in-memory NumPy arrays with seeded, per-epoch shuffling."""

from __future__ import annotations

import numpy as np

from ._checks import check_int


class ArrayLoader:
    """Iterate over aligned NumPy arrays in batches of tuples.

    Shuffling is reproducible: epoch ``e`` uses the permutation drawn from
    ``np.random.default_rng([seed, e])``, so the order depends only on ``seed`` and the epoch,
    never on how many epochs ran before in this process. Each ``iter()`` starts the next epoch;
    :meth:`set_epoch` chooses it explicitly (``Trainer.fit`` calls it, so a run resumed at epoch
    3 sees exactly the order an uninterrupted run saw at epoch 3).

    Args:
        *arrays: NumPy arrays with the same first dimension ``N`` (the examples).
        batch_size: examples per batch (>= 1).
        shuffle: draw a new permutation every epoch.
        seed: the shuffling seed.
        drop_last: drop the final batch when it is smaller than ``batch_size``.

    Example:
        >>> import numpy as np
        >>> loader = ArrayLoader(np.arange(5), np.arange(5) * 10, batch_size=2)
        >>> [x.tolist() for x, _ in loader]
        [[0, 1], [2, 3], [4]]
        >>> len(ArrayLoader(np.arange(5), batch_size=2, drop_last=True))
        2
    """

    def __init__(self, *arrays, batch_size: int, shuffle: bool = False, seed: int = 0,
                 drop_last: bool = False):
        if not arrays:
            raise ValueError("ArrayLoader needs at least one array, e.g. ArrayLoader(x, y, ...)")
        arrays = tuple(np.asarray(a) for a in arrays)
        sizes = [len(a) if a.ndim else None for a in arrays]
        if None in sizes or len(set(sizes)) != 1:
            shapes = [list(a.shape) for a in arrays]
            raise ValueError(
                f"ArrayLoader arrays must share their first dimension (the examples); got shapes "
                f"{shapes}. Fix: pass arrays with one row per example."
            )
        batch_size = check_int("ArrayLoader batch_size", batch_size, 1)
        seed = check_int("ArrayLoader seed", seed, 0)
        if drop_last and batch_size > sizes[0]:
            raise ValueError(
                f"ArrayLoader with drop_last=True and batch_size={batch_size} > {sizes[0]} "
                "examples yields no batch. Fix: lower batch_size or set drop_last=False."
            )
        self.arrays = arrays
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.arrays[0])
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` produce epoch ``epoch``'s order."""
        self.epoch = int(epoch)

    def order(self, epoch: int) -> np.ndarray:
        """The example indices of ``epoch``, in the order they are served."""
        n = len(self.arrays[0])
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def __iter__(self):
        order = self.order(self.epoch)
        self.epoch += 1
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            index = order[start:start + self.batch_size]
            yield tuple(array[index] for array in self.arrays)
