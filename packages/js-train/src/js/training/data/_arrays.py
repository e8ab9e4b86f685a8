"""ArrayLoader: batches over in-memory NumPy arrays with seeded, per-epoch shuffling."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from js._checks import check_int


class ArrayLoader:
    """Iterate over aligned NumPy arrays in batches of tuples.

    Shuffling is reproducible: epoch ``e`` uses the permutation drawn from
    ``np.random.default_rng([seed, e])``, so the order depends only on ``seed`` and the epoch,
    never on how many epochs ran before in this process. Each ``iter()`` starts the next epoch;
    :meth:`set_epoch` chooses it explicitly (``Trainer.fit`` calls it, so a run resumed at epoch
    3 sees exactly the order an uninterrupted run saw at epoch 3). Its position within an epoch
    is state too: :meth:`state_dict` is ``{'epoch':, 'batch':}`` (batches already served),
    and after :meth:`load_state_dict` the next ``iter()`` continues that epoch at that batch,
    so a checkpoint taken mid-epoch resumes on the very next batch.

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

    def __init__(
        self,
        *arrays: ArrayLike,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
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
        examples = len(arrays[0])
        batch_size = check_int("ArrayLoader", "batch_size", batch_size, 1)
        seed = check_int("ArrayLoader", "seed", seed, 0)
        if drop_last and batch_size > examples:
            raise ValueError(
                f"ArrayLoader with drop_last=True and batch_size={batch_size} > {examples} "
                "examples yields no batch. Fix: lower batch_size or set drop_last=False."
            )
        self.arrays = arrays
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0  # the epoch the next iter() serves
        self._resume_at = 0  # its first batch (not 0 only after load_state_dict)
        self._position = (0, 0)  # (epoch, batches of it served) of the latest iteration

    def __len__(self) -> int:
        n = len(self.arrays[0])
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` produce epoch ``epoch``'s order, from its first batch."""
        self.epoch, self._resume_at = int(epoch), 0
        self._position = (self.epoch, 0)

    def state_dict(self) -> dict[str, int]:
        """``{'epoch': e, 'batch': b}``: ``b`` batches of epoch ``e`` have been served (the
        latest iteration's position; ``b == 0`` before it starts)."""
        epoch, batch = self._position
        return {"epoch": epoch, "batch": batch}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Continue from a :meth:`state_dict`: the next ``iter()`` resumes there."""
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if not 0 <= batch <= len(self) or epoch < 0:
            raise ValueError(
                f"ArrayLoader.load_state_dict: batch {batch} of epoch {epoch} is outside this "
                f"loader's {len(self)} batches per epoch. Fix: load a state saved by a loader "
                "with the same data size, batch_size and drop_last."
            )
        self.epoch, self._resume_at, self._position = epoch, batch, (epoch, batch)

    def order(self, epoch: int) -> np.ndarray:
        """The example indices of ``epoch``, in the order they are served."""
        n = len(self.arrays[0])
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def __iter__(self):
        epoch, start = self.epoch, self._resume_at
        self.epoch, self._resume_at = epoch + 1, 0  # each iter() starts the next epoch
        order = self.order(epoch)
        self._position = (epoch, start)
        for batch in range(start, len(self)):
            index = order[batch * self.batch_size : (batch + 1) * self.batch_size]
            self._position = (epoch, batch + 1)  # counted when served
            yield tuple(array[index] for array in self.arrays)
        self._position = (epoch + 1, 0)
