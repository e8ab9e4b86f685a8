"""process_batches: each process reads only its rows of one global, seeded batch order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from js._checks import check_bool, check_int

from ._grain import import_grain
from ._rows import process_rows_class

if TYPE_CHECKING:
    try:
        import grain
    except ImportError:  # the optional extra js-train[grain]
        pass


def process_batches(
    data: Any,
    global_batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    drop_remainder: bool = True,
    process_index: int | None = None,
    process_count: int | None = None,
) -> grain.MapDataset:
    """This process's share of every global batch of ``data``, as a grain ``MapDataset``.

    One global order, whatever the number of processes ``P``: epoch ``e`` visits the rows of
    ``data`` in a seeded permutation (grain's shuffle with seed ``seed + e``; no shuffle: in
    order), global batch ``b`` is rows ``[b*B, (b+1)*B)`` of that order, and process ``p``
    yields rows ``[p*B/P, (p+1)*B/P)`` of it, stacked. Given to ``Trainer(mesh=...)`` (which
    places each process's rows with ``js.shard_batch``), every process together assembles
    exactly the global batch the single-process run trains on; every row is read once per
    epoch by exactly one process, and nothing outside a process's rows is read or transformed:
    pass a ``MapDataset`` whose ``.map`` transforms run lazily on the rows asked for.

    The result has ``len`` = batches per epoch, and iterating it again starts epoch 0 again
    (grain's ``MapDataset``): ``.repeat(epochs)`` (or ``.repeat()``, endless) runs more epochs,
    each in a new order, so train with ``Trainer(max_steps=...)`` or ``Trainer(1)`` on the
    repeated dataset. ``.to_iter_dataset()`` then ``.mp_prefetch(...)`` reads with grain worker
    processes (the same batches in the same order). Its iterator state (grain's
    ``get_state``) has one structure and value in every process, so the primary process's
    checkpointed state restores every process.

    Args:
        data: a grain ``MapDataset`` or a random-access source (``len`` and ``[i]``, e.g.
            :class:`TokenWindows`) whose items are the rows.
        global_batch_size: rows per global batch ``B``, summed over processes; divisible by ``P``.
        shuffle: visit the rows in a new seeded order every epoch.
        seed: the shuffle seed, in ``[0, 2**32)``.
        drop_remainder: drop the last, smaller global batch of each epoch; when kept its rows
            must divide among the processes.
        process_index: this process ``p`` (default ``jax.process_index()``).
        process_count: the processes ``P`` (default ``jax.process_count()``).

    Returns:
        A ``grain.MapDataset`` of batches (items stacked along a new first axis, ``B/P`` rows).

    Example:
        >>> batches = process_batches(list(range(8)), 4, shuffle=False, process_index=1,
        ...                           process_count=2)
        >>> [b.tolist() for b in batches]
        [[2, 3], [6, 7]]
    """
    grain = import_grain()
    import jax

    owner = "process_batches"
    batch = check_int(owner, "global_batch_size", global_batch_size, 1)
    shuffle = check_bool(owner, "shuffle", shuffle)
    drop_remainder = check_bool(owner, "drop_remainder", drop_remainder)
    seed = check_int(owner, "seed", seed, 0)
    count = check_int(
        owner, "process_count", jax.process_count() if process_count is None else process_count, 1
    )
    index = check_int(
        owner, "process_index", jax.process_index() if process_index is None else process_index, 0
    )
    if seed >= 2**32:
        raise ValueError(f"{owner}: seed must be below 2**32 (grain's shuffle), got {seed}")
    if index >= count:
        raise ValueError(
            f"{owner}: process_index={index} is not below process_count={count}. Fix: pass an "
            f"index in [0, {count})"
        )
    if batch % count:
        raise ValueError(
            f"{owner}: global_batch_size={batch} does not split evenly over {count} processes. "
            f"Fix: a global_batch_size divisible by {count}"
        )
    if not isinstance(data, grain.MapDataset):
        if isinstance(data, grain.IterDataset) or not (
            hasattr(data, "__len__") and hasattr(data, "__getitem__")
        ):
            raise TypeError(
                f"{owner}: data must be a grain MapDataset or a random-access source (len and "
                f"[i]), got {type(data).__name__}. Fix: pass the source or MapDataset before "
                f"any to_iter_dataset()"
            )
        data = grain.MapDataset.source(data)
    rows, remainder = len(data), len(data) % batch
    if rows < batch and drop_remainder:
        raise ValueError(
            f"{owner}: {rows} rows make no global batch of {batch}. Fix: a smaller "
            f"global_batch_size, or drop_remainder=False"
        )
    if not drop_remainder and remainder % count:
        raise ValueError(
            f"{owner}: the last global batch holds {remainder} rows ({rows} % {batch}), which do "
            f"not split evenly over {count} processes. Fix: drop_remainder=True"
        )
    if shuffle:
        data = data.shuffle(seed)
    local = process_rows_class()(data, batch, index, count, drop_remainder)
    return local.batch(batch // count, drop_remainder=False)
