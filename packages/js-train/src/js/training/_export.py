"""export_weights: a checkpoint's model as a safetensors weight file, for js-nn-only installs.

The file is written by ``js.nn.save_weights`` (layout ``'js'``), so ``js.nn.load_weights``
reads it with neither js-train nor orbax installed. The arrays are read with this package's
checkpoint reader; no model object is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import orbax.checkpoint as ocp

import js.nn as nn

from ._checkpoint import FORMAT, _manager, _select


def _model_arrays(path: Path, which, name: str) -> tuple[int, dict[str, np.ndarray]]:
    manager = _manager(path)
    try:
        step = _select(manager, path, which)
        meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        meta = meta["meta"] or {}
        kinds = meta.get("kinds", {})
        if meta.get("format") != FORMAT or kinds.get(name) != "module":
            modules = sorted(key for key, kind in kinds.items() if kind == "module")
            raise KeyError(
                f"export_weights: {path}/{step} holds no model entry {name!r} (module entries: "
                f"{modules}). Fix: pass name= one of those"
            )
        args = ocp.args.Composite(state=ocp.args.StandardRestore())
        state = manager.restore(step, args=args)["state"][name]
    finally:
        manager.close()
    return step, {key: np.asarray(value) for key, value in state.items()}


def export_weights(
    ckpt_dir,
    path,
    *,
    which="best",
    name: str = "model",
    metadata: Mapping[str, str] | None = None,
) -> int:
    """Write the model entry of a checkpoint as the safetensors weight file ``path``.

    Args:
        ckpt_dir: a directory written by ``save_checkpoint`` or ``ModelCheckpoint``.
        path: the ``.safetensors`` file to write.
        which: ``'best'``, ``'last'`` or a step number, as in ``load_checkpoint``.
        name: the checkpoint entry holding the model (``'model'`` for a ``Task``).
        metadata: extra ``{str: str}`` for the header; ``'step'`` is added.

    Returns the step exported. Load the file with ``js.nn.load_weights(model, path)``.

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
    step, arrays = _model_arrays(ckpt_dir, which, name)
    nn.save_weights(arrays, path, metadata={**(metadata or {}), "step": str(step)})
    return step
