"""export_weights: a checkpoint's model as a safetensors weight file, for js-nn-only installs.

The arrays are read, verified (save id, digests), by ``js.nn.read_checkpoint``, the one host
reader of the checkpoint format, and the file is written by ``js.nn.save_weights`` (layout
``'js'``), so ``js.nn.load_weights`` reads it with neither js-train nor orbax installed. No
model object is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import js.nn as nn


def export_weights(
    ckpt_dir,
    path,
    *,
    which="best",
    name: str = "model",
    metadata: Mapping[str, str] | None = None,
) -> int:
    """Write the entry ``name`` (the model) of a checkpoint as the safetensors file ``path``.

    Args:
        ckpt_dir: a directory written by ``save_checkpoint`` or ``ModelCheckpoint``.
        path: the ``.safetensors`` file to write.
        which: ``'best'``, ``'last'`` or a step number, as in ``load_checkpoint``.
        name: the checkpoint entry holding the model (``'model'`` for a ``Task``).
        metadata: extra ``{str: str}`` for the header; ``'step'`` is added.

    Returns the step exported. Load the file with ``js.nn.load_weights(model, path)``. A
    damaged step raises :class:`CheckpointError` and writes nothing.

    Example:
        >>> import os, tempfile, js, js.nn as nn
        >>> from js.training import export_weights, save_checkpoint
        >>> folder = tempfile.mkdtemp()
        >>> model = nn.Linear(2, 1, rngs=js.Rngs(params=0))
        >>> save_checkpoint(os.path.join(folder, "ckpt"), {"model": model, "epoch": 0})
        0
        >>> export_weights(os.path.join(folder, "ckpt"), os.path.join(folder, "w.safetensors"))
        0
        >>> nn.weights_info(os.path.join(folder, "w.safetensors")).metadata
        {'step': '0'}
    """
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        raise FileNotFoundError(
            f"export_weights: no checkpoint directory at {ckpt_dir}. Fix: pass the "
            "directory given to ModelCheckpoint or save_checkpoint"
        )
    step, arrays = nn.read_checkpoint(ckpt_dir, name=name, which=which)
    nn.save_weights(arrays, path, metadata={**(metadata or {}), "step": str(step)})
    return step
