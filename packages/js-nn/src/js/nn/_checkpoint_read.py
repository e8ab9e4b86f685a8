"""Reading a model out of a js-train checkpoint directory, without depending on js-train.

Two routes, chosen when called (orbax is imported only here, never by ``import js.nn``):

1. js-train installed and able to restore one entry alone (its partial restore, which came with
   ``js.training.checkpoint_info``): ``js.training.load_checkpoint(path, {name: model})``.
   js-train then owns the format, its integrity checks and its errors.
2. Otherwise (an inference install of js-core + js-nn, or a js-train without partial restore):
   a minimal read of the format ``js.training/1``: the step's ``meta`` JSON
   (``{"format", "kinds": {name: kind}, ...}``) and its ``state`` item, an orbax
   ``StandardSave`` of ``{name: state_dict}``; the entry ``name`` must be of kind ``module``.
   The best step is the one with the highest ``_score`` metric, as ModelCheckpoint ranks them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

FORMAT = "js.training/1"


def _training():
    """``js.training`` when installed with partial restore, else None."""
    try:
        import js.training as training
    except ModuleNotFoundError as error:
        # js-core's install-hint finder names the distribution; a plain miss the module. Any
        # other missing module comes from inside an installed js-train: raise it.
        if error.name not in ("js-train", "js.training"):
            raise
        return None
    return training if hasattr(training, "checkpoint_info") else None


def _score(metrics) -> float:
    score = metrics.get("_score") if isinstance(metrics, dict) else None
    return -math.inf if score is None or math.isnan(score) else float(score)


def _pick(manager, path: Path, step: int | None) -> int:
    steps = sorted(manager.all_steps())
    if not steps:
        raise FileNotFoundError(
            f"{path} holds no complete js checkpoint step. Fix: pass the "
            "directory given to ModelCheckpoint or save_checkpoint"
        )
    if step is None:
        best = manager.best_step()
        return manager.latest_step() if best is None else best
    if step not in steps:
        raise KeyError(f"{path} has no step {step}; steps: {steps}. Fix: pass one of them")
    return step


def read_model_state(path: Path, step: int | None, name: str) -> dict[str, np.ndarray]:
    """``{key: array}`` of the module entry ``name`` at ``step`` (best when None), via orbax."""
    import orbax.checkpoint as ocp

    options = ocp.CheckpointManagerOptions(best_fn=_score, best_mode="max", create=False)
    manager = ocp.CheckpointManager(path.absolute(), item_names=("state", "meta"), options=options)
    try:
        chosen = _pick(manager, path, step)
        meta = manager.restore(chosen, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        meta = meta["meta"] or {}
        kinds = meta.get("kinds", {})
        if meta.get("format") != FORMAT or kinds.get(name) != "module":
            modules = sorted(k for k, kind in kinds.items() if kind == "module")
            raise KeyError(
                f"{path}/{chosen} holds no model entry {name!r} (format "
                f"{meta.get('format')!r}, module entries {modules}). Fix: pass name= one of "
                "those, or the directory of a js-train checkpoint"
            )
        state = manager.restore(chosen, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
    finally:
        manager.close()
    return {key: np.asarray(value) for key, value in state["state"][name].items()}


def load_checkpoint_model(model, path: Path, step: int | None, name: str) -> None:
    """Restore ``model`` in place from the entry ``name`` of the checkpoint at ``path``."""
    training = _training()
    if training is not None:
        training.load_checkpoint(path, {name: model}, which="best" if step is None else step)
        return
    model.load_state_dict(read_model_state(path, step, name), strict=True)
