"""The Trainer's schedule: where a fit is (``Position``) and what falls due after each dispatch.

A fit has two clocks, the epoch (one pass over the training data) and the global step (one
call of ``task.training_step``, one batch). A dispatch runs one step or K
(``steps_per_execution``); after it, :meth:`Schedule.after` says what the steps it ran reach:
a validation, a log, the epoch's end (its data's length reached, or ``max_steps``). The loop in
``Trainer.fit`` only acts on that answer, so the schedule is tested here without training.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec


@dataclasses.dataclass
class Position:
    """Where a fit is: passed to the totals, read by callbacks through the Trainer.

    Attributes:
        epoch: the current epoch, counted from 0.
        step: the global step: training steps (batches) run, across epochs.
        epoch_start_step: the global step the current epoch started at.
        transfers: device-to-host metric reads since the last ``fit``/``validate``/``predict``
            started (each of the Trainer's ``jax.device_get``).
    """

    epoch: int = 0
    step: int = 0
    epoch_start_step: int = 0
    transfers: int = 0

    @property
    def steps_in_epoch(self) -> int:
        return self.step - self.epoch_start_step

    def next_epoch(self) -> None:
        self.epoch, self.epoch_start_step = self.epoch + 1, self.step


class Due(NamedTuple):
    """What the steps of one dispatch reach: ``validate`` (every ``val_every_n_steps``, and at
    the epoch's end when there is validation data), ``log`` (every ``log_every_n_steps``),
    ``epoch_end`` (the data's length or ``max_steps`` reached: the row has the epoch's means)."""

    validate: bool
    log: bool
    epoch_end: bool


def _crossed(every: int | None, before: int, after: int) -> bool:
    """Whether a multiple of ``every`` lies in ``(before, after]`` (a dispatch's steps)."""
    return every is not None and after // every > before // every


class Schedule:
    """A fit's limits and intervals, and the length of an epoch when the data has one.

    Example:
        >>> schedule = Schedule(max_steps=12, log_every_n_steps=4, length=5)
        >>> position = Position(step=3)
        >>> position.step += 1
        >>> schedule.after(position, 1)
        Due(validate=False, log=True, epoch_end=False)
        >>> position.step += 1
        >>> schedule.after(position, 1)  # the data's 5 batches are done
        Due(validate=False, log=False, epoch_end=True)
    """

    def __init__(
        self,
        *,
        max_epochs: int | None = None,
        max_steps: int | None = None,
        val_every_n_steps: int | None = None,
        log_every_n_steps: int | None = None,
        validates: bool = False,
        length: int | None = None,
    ):
        self.max_epochs, self.max_steps, self.length = max_epochs, max_steps, length
        self.val_every, self.log_every = val_every_n_steps, log_every_n_steps
        self.validates = validates

    def finished(self, position: Position) -> bool:
        """Whether the fit is over: ``max_epochs`` epochs ended or ``max_steps`` steps run."""
        epochs = self.max_epochs is not None and position.epoch >= self.max_epochs
        return epochs or self.step_limit(position)

    def step_limit(self, position: Position) -> bool:
        return self.max_steps is not None and position.step >= self.max_steps

    def final(self, position: Position, due: Due) -> bool:
        """Whether the dispatch that brought ``position`` to its step (``due``) ended the fit:
        ``max_steps`` reached, or the last epoch's end (known with a length)."""
        last_epoch = self.max_epochs is not None and position.epoch + 1 >= self.max_epochs
        return self.step_limit(position) or (due.epoch_end and last_epoch)

    def remaining(self, position: Position) -> int | None:
        """Steps left in the epoch by the data's length (None without a length): 0 after a
        resume from a checkpoint taken at an epoch's last step, whose end is all that is left."""
        return None if self.length is None else max(self.length - position.steps_in_epoch, 0)

    def room(self, position: Position) -> int:
        """Steps until the next log, validation or the last step (large when none): a group of
        K steps per dispatch must not pass one of them."""
        room = [self.max_steps - position.step] if self.max_steps else []
        for every in (self.log_every, self.val_every):
            if every is not None:
                room.append(every - position.step % every)
        return min(room, default=1 << 30)

    def after(self, position: Position, steps: int) -> Due:
        """What is due now that a dispatch of ``steps`` steps brought ``position`` to its step."""
        before = position.step - steps
        epoch_end = self.remaining(position) == 0 or self.step_limit(position)
        validate = self.validates and (epoch_end or _crossed(self.val_every, before, position.step))
        return Due(validate, _crossed(self.log_every, before, position.step), epoch_end)

    def ran_out(self, position: Position, stopped: bool) -> bool:
        """Whether the epoch that just ended is complete (the next one starts) rather than cut
        short by ``max_steps`` or a stop (its totals stay, and a resumed fit continues it).
        Data without a length is complete when its iteration ends without either."""
        return self.remaining(position) == 0 or not (stopped or self.step_limit(position))

    def bar_total(self, position: Position) -> int | None:
        """The progress bar's steps for this epoch: to ``max_steps`` without an epoch limit,
        else the epoch's steps left (None without a length)."""
        if self.max_epochs is None and self.max_steps is not None:
            return self.max_steps - position.step
        return self.remaining(position)


def check_loader_position(data, epoch: int) -> None:
    """A mid-epoch resume needs the loader restored to the same epoch as the Trainer."""
    state = data.state_dict() if callable(getattr(data, "state_dict", None)) else None
    if state is not None and int(state.get("epoch", epoch)) != epoch:
        raise ValueError(
            f"fit(resume=True): the Trainer resumes epoch {epoch} mid-way, but train_data is "
            f"at epoch {int(state['epoch'])}, batch {int(state.get('batch', 0))}. Fix: restore "
            "the loader from the same checkpoint: load_checkpoint(path, {..., 'trainer': "
            "trainer, 'loader': loader})."
        )


# -- K steps per dispatch ----------------------------------------------------------------------


def stack(group: list):
    """K batches of one structure and shape stacked on a new leading axis ``[K, B, ...]``, or
    None. Host (NumPy) batches are stacked on the host, so a mesh places them once; device
    batches stay on the device (``np.stack`` would wait for each and copy it back)."""
    leaves = [jax.tree.flatten(b) for b in group]
    first_leaves, treedef = leaves[0]
    for other, other_def in leaves[1:]:
        if other_def != treedef or any(
            np.shape(a) != np.shape(b) for a, b in zip(first_leaves, other, strict=True)
        ):
            return None
    return jax.tree.map(
        lambda *xs: (jnp if any(isinstance(x, jax.Array) for x in xs) else np).stack(xs), *group
    )


def place_stacked(stacked, mesh, axis: str):
    """A stacked group ``[K, B, ...]`` placed once over the mesh: ``B`` split over ``axis``,
    the K axis whole (``PartitionSpec(None, axis)``), as ``js.shard_batch`` splits one batch.
    Each process passes its own rows, as there."""
    size, processes = mesh.shape[axis], jax.process_count()
    problems = [
        f"{jax.tree_util.keystr(path) or 'batch'} {list(np.shape(leaf))}"
        for path, leaf in jax.tree_util.tree_leaves_with_path(stacked)
        if np.ndim(leaf) < 2 or (np.shape(leaf)[1] * processes) % size
    ]
    if problems:
        raise ValueError(
            f"Trainer(mesh=...): axis {axis!r} splits each batch over {size} devices, but the "
            f"stacked batches [K, B, ...] are {'; '.join(problems)}. Fix: use a global batch "
            f"size divisible by {size} (drop or pad the last batch)."
        )
    sharding = NamedSharding(mesh, PartitionSpec(None, axis))
    if processes == 1:
        return jax.device_put(stacked, sharding)
    return jax.tree.map(
        lambda leaf: jax.make_array_from_process_local_data(sharding, np.asarray(leaf)), stacked
    )
