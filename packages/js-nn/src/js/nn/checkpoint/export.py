"""A checkpoint step as a safetensors weight file (:func:`export_weights`): the step is read
on the host by :func:`.read.read_checkpoint` and written by ``js.nn.save_weights``.

Its own module because it joins the two halves: ``load_weights`` (``js.nn._weights``) reads
checkpoint directories through :mod:`.load` and :mod:`.read`, so nothing those import may import
``_weights`` back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .._weights import save_weights
from .read import read_checkpoint


def export_weights(
    ckpt_dir: str | os.PathLike,
    path: str | os.PathLike,
    *,
    which: str | int = "best",
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

    The arrays are read and verified by :func:`read_checkpoint` and written by
    ``js.nn.save_weights`` (layout ``'js'``), so the file loads where neither orbax nor
    js-train is installed; no model object is needed. Returns the step exported. Load the
    file with ``js.nn.load_weights(model, path)``. A damaged step raises
    :class:`CheckpointError` and writes nothing.

    Example:
        >>> import os, tempfile, js, js.nn as nn
        >>> from js.nn.checkpoint import save_checkpoint
        >>> folder = tempfile.mkdtemp()
        >>> model = nn.Linear(2, 1, rngs=js.Rngs(params=0))
        >>> save_checkpoint(os.path.join(folder, "ckpt"), {"model": model, "epoch": 0})
        0
        >>> nn.export_weights(os.path.join(folder, "ckpt"), os.path.join(folder, "w.safetensors"))
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
    step, arrays = read_checkpoint(ckpt_dir, name=name, which=which)
    save_weights(arrays, path, metadata={**(metadata or {}), "step": str(step)})
    return step
