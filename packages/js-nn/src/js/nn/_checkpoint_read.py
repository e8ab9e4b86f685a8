"""``load_weights`` on a js-train checkpoint directory: one check, then one of two readers.

The step (``which``), the ``meta`` record and the entry are checked first by
:mod:`js.nn.checkpoint_format`, so the errors are the same either way. Then:

1. js-train installed: ``js.training.load_checkpoint(path, {name: model}, which=step)``, its
   partial restore, which reads the arrays straight onto the model's current devices and
   sharding (digests checked on devices): the route for sharded and multi-process models.
2. Otherwise (an inference install of js-core + js-nn): :func:`js.nn.read_checkpoint` reads the
   entry as verified NumPy arrays and ``model.load_state_dict`` places them.
"""

from __future__ import annotations

from .checkpoint_format import locate, read_checkpoint


def _training():
    """``js.training`` when installed, else None."""
    try:
        import js.training as training
    except ModuleNotFoundError as error:
        # js-core's install-hint finder names the distribution; a plain miss the module. Any
        # other missing module comes from inside an installed js-train: raise it.
        if error.name not in ("js-train", "js.training"):
            raise
        return None
    return training


def load_checkpoint_model(model, path, which, name: str) -> None:
    """Restore ``model`` in place from the module entry ``name`` of the checkpoint ``path``."""
    (path, step, _), meta, _ = locate(path, name, which, "load_weights")
    if meta["kinds"][name] != "module":
        raise KeyError(
            f"load_weights: {path}, step {step}: the entry {name!r} is a "
            f"{meta['kinds'][name]}, not a model. Fix: pass name= a module entry "
            f"({sorted(k for k, kind in meta['kinds'].items() if kind == 'module')})"
        )
    training = _training()
    if training is not None:
        training.load_checkpoint(path, {name: model}, which=step)
        return
    model.load_state_dict(read_checkpoint(path, name, step)[1], strict=True)
