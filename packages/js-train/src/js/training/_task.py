"""Task: what one training or validation step of a model does."""

from __future__ import annotations

import js

from . import steps


class Task:
    """A model, its optimizer and optional ``Rngs``, with the steps ``Trainer`` runs.

    The default task is classification: ``training_step`` runs
    :func:`steps.classification_step` (or :func:`steps.dropout_classification_step` when
    ``rngs`` is given, calling ``model(x, rngs=rngs)``) and ``validation_step`` runs
    :func:`steps.classification_eval_step`. Override them for another objective: each takes a
    batch and returns a dict with on-device ``loss``, ``count`` and optionally ``correct``; the
    step owns the update, the Trainer never differentiates.

    Args:
        model: the ``js.Module`` to train.
        optimizer: its optimizer (``js.optim.Adam(model.parameters(), lr=...)``).
        rngs: a ``js.Rngs`` for stochastic layers (``dropout`` stream), or None.

    Example:
        >>> class Forecast(Task):
        ...     def training_step(self, batch):
        ...         return steps.regression_step(self.model, self.optimizer, batch)
        ...     def validation_step(self, batch):
        ...         return steps.regression_eval_step(self.model, batch)
    """

    def __init__(self, model, optimizer, rngs=None):
        if not isinstance(model, js.Module):
            raise TypeError(f"Task model must be a js.Module, got {type(model).__name__}")
        if not callable(getattr(optimizer, "step", None)):
            raise TypeError(
                f"Task optimizer must have a step(grads) method, got {type(optimizer).__name__}"
            )
        if rngs is not None and not isinstance(rngs, js.Rngs):
            raise TypeError(f"Task rngs must be a js.Rngs or None, got {type(rngs).__name__}")
        self.model = model
        self.optimizer = optimizer
        self.rngs = rngs

    def training_step(self, batch) -> dict:
        """One compiled update on ``batch``; returns its on-device metrics."""
        if self.rngs is None:
            return steps.classification_step(self.model, self.optimizer, batch)
        return steps.dropout_classification_step(self.model, self.optimizer, batch, self.rngs)

    def validation_step(self, batch) -> dict:
        """Metrics of ``batch`` without an update."""
        return steps.classification_eval_step(self.model, batch)

    def set_phase(self, phase: str) -> None:
        """Switch the model to ``'train'`` or ``'eval'`` mode (outside compiled code)."""
        if phase not in ("train", "eval"):
            raise ValueError(f"Task.set_phase: phase must be 'train' or 'eval', got {phase!r}")
        self.model.train(phase == "train")

    def checkpoint_objects(self) -> dict:
        """``{'model':, 'optimizer':[, 'rngs':]}``: what a checkpoint of this task holds."""
        objects = {"model": self.model, "optimizer": self.optimizer}
        if self.rngs is not None:
            objects["rngs"] = self.rngs
        return objects
