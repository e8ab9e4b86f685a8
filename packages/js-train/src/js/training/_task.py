"""Task: what one training, validation or prediction step of a model does.

A step is a function of the state it updates, ``training_step(model, optimizer, rngs, batch)
-> metrics``: it reaches the model, the optimizer and the Rngs through its arguments, never
through ``self``, so the Trainer runs the same method under a Python loop, ``js.jit`` and
``js.scan_steps`` (K steps per dispatch, where the objects are the scan's carry) without
copying the task. ``self`` holds configuration only (a compute dtype, a latent size).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax.typing import DTypeLike

import js

from . import steps
from ._lr_scheduling import SchedulerState, scheduler_config
from ._precision import check_compute_dtype

# The argument names each overridable step is called with, after self.
SIGNATURES = {
    "training_step": ("model", "optimizer", "rngs", "batch"),
    "validation_step": ("model", "batch"),
    "predict_step": ("model", "batch"),
}


class Task:
    """A model, its optimizer and optional ``Rngs``, with the steps ``Trainer`` runs.

    The default steps classify: ``training_step`` runs :func:`steps.classification_step` (or
    :func:`steps.dropout_classification_step` with ``rngs``, calling ``model(x, rngs=rngs)``),
    ``validation_step`` :func:`steps.classification_eval_step`, and ``predict_step`` returns
    the logits. They refuse a batch whose labels are not integer class ids ``y[B]``, so a
    regression or autoencoder task that forgot to override a step fails instead of training
    the wrong objective; a subclass that overrides ``training_step`` must override
    ``validation_step`` too (the Trainer checks when ``fit`` starts). Each step returns a dict
    with on-device ``loss``, ``count`` and optionally ``correct``; the step owns the update,
    the Trainer never differentiates.

    Args:
        model: the ``js.Module`` to train.
        optimizer: its optimizer (``js.optim.Adam(model.parameters(), lr=...)``).
        rngs: a ``js.Rngs`` for stochastic layers (``dropout`` stream), or None.
        compute_dtype: None (float32) or ``jnp.bfloat16``: the default steps compute in that
            dtype with float32 parameters and optimizer state (see :func:`autocast`).
        lr_scheduler: a scheduler of ``optimizer`` (``js.optim.lr_scheduler``), or
            Lightning's dict ``{"scheduler": s, "interval": "epoch" | "step", "frequency": 1,
            "monitor": "val/loss", "strict": True}``: the Trainer steps it every ``frequency``
            epochs (the default interval) or optimizer steps, feeds a ``ReduceLROnPlateau`` the
            ``monitor``ed metric, saves it in checkpoints and logs its rates (``lr``).
        clip_grad_norm: clip the gradients of the default steps to this global L2 norm
            (``js.optim.clip_grad_norm``, torch's ``clip_grad_norm_``); None: no clipping.
        clip_grad_value: clamp each gradient element to ``[-v, v]``
            (``js.optim.clip_grad_value``); not together with ``clip_grad_norm``.

    Example:
        >>> class Forecast(Task):
        ...     def training_step(self, model, optimizer, rngs, batch):
        ...         return steps.regression_step(model, optimizer, batch)
        ...     def validation_step(self, model, batch):
        ...         return steps.regression_eval_step(model, batch)
    """

    def __init__(
        self,
        model: js.Module,
        optimizer: Any,
        rngs: js.Rngs | None = None,
        *,
        compute_dtype: DTypeLike | None = None,
        lr_scheduler: Any = None,
        clip_grad_norm: float | None = None,
        clip_grad_value: float | None = None,
    ) -> None:
        if not isinstance(model, js.Module):
            raise TypeError(f"Task model must be a js.Module, got {type(model).__name__}")
        if not callable(getattr(optimizer, "step", None)):
            raise TypeError(
                f"Task optimizer must have a step(grads) method, got {type(optimizer).__name__}"
            )
        if rngs is not None and not isinstance(rngs, js.Rngs):
            raise TypeError(f"Task rngs must be a js.Rngs or None, got {type(rngs).__name__}")
        config = scheduler_config(lr_scheduler, optimizer)
        steps.check_clipping("Task", clip_grad_norm, clip_grad_value)
        self.model = model
        self.optimizer = optimizer
        self.rngs = rngs
        self.compute_dtype = check_compute_dtype("Task", compute_dtype)
        self.lr_scheduler = None if config is None else config.scheduler
        self.lr_scheduler_config = config
        self.clip_grad_norm, self.clip_grad_value = clip_grad_norm, clip_grad_value

    def training_step(
        self, model: js.Module, optimizer: Any, rngs: js.Rngs | None, batch: Any
    ) -> dict:
        """One compiled update of ``model`` on ``batch``; returns its on-device metrics."""
        _check_classification(type(self).__name__, batch)
        options: dict[str, Any] = dict(
            compute_dtype=self.compute_dtype,
            clip_grad_norm=self.clip_grad_norm,
            clip_grad_value=self.clip_grad_value,
        )
        if rngs is None:
            return steps.classification_step(model, optimizer, batch, **options)
        return steps.dropout_classification_step(model, optimizer, batch, rngs, **options)

    def validation_step(self, model: js.Module, batch: Any) -> dict:
        """Metrics of ``batch`` without an update."""
        _check_classification(type(self).__name__, batch)
        return steps.classification_eval_step(model, batch, compute_dtype=self.compute_dtype)

    def predict_step(self, model: js.Module, batch: Any) -> Any:
        """The model's output for the inputs of ``batch`` (``x``, ``(x, ...)`` or ``{'x':}``)."""
        return _predict(model, steps.inputs(batch))

    def set_phase(self, phase: str) -> None:
        """Switch the model to ``'train'`` or ``'eval'`` mode (outside compiled code)."""
        if phase not in ("train", "eval"):
            raise ValueError(f"Task.set_phase: phase must be 'train' or 'eval', got {phase!r}")
        self.model.train(phase == "train")

    def checkpoint_objects(self) -> dict:
        """``{'model':, 'optimizer':[, 'rngs':][, 'lr_scheduler':]}``: what a checkpoint of
        this task holds (the scheduler's counters and rates, see ``lr_scheduler``)."""
        objects = {"model": self.model, "optimizer": self.optimizer}
        if self.rngs is not None:
            objects["rngs"] = self.rngs
        if getattr(self, "lr_scheduler", None) is not None:
            objects["lr_scheduler"] = SchedulerState(self.lr_scheduler)
        return objects


@js.jit
def _predict(model, x):
    return model(x)


def _check_classification(owner: str, batch) -> None:
    """Refuse, before tracing, a batch whose labels are not class ids ``y[B]`` (int)."""
    _, y, _ = steps.unpack(batch)
    dtype, shape = getattr(y, "dtype", None), getattr(y, "shape", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.integer) or shape is None or len(shape) != 1:
        raise TypeError(
            f"{owner} runs the default classification steps, which need integer class labels "
            f"y[B]; got y {list(shape) if shape is not None else type(y).__name__} {dtype}. "
            "Fix: override training_step and validation_step for another objective (e.g. "
            "steps.regression_step), or pass class ids."
        )


def check_task(task) -> None:
    """Fail before training when a task's steps cannot be called as the Trainer calls them:
    a step with the wrong arguments, or a Task subclass overriding only one of the two."""
    for name, wanted in SIGNATURES.items():
        method = getattr(task, name, None)
        if method is None:
            if name == "predict_step":
                continue
            raise TypeError(f"the task {type(task).__name__} has no {name}. Fix: subclass Task.")
        names = tuple(inspect.signature(method).parameters)
        if names and names[0] == "self":
            names = names[1:]
        if len(names) != len(wanted) and not any(
            p.kind is p.VAR_POSITIONAL for p in inspect.signature(method).parameters.values()
        ):
            raise TypeError(
                f"{type(task).__name__}.{name} takes ({', '.join(names)}), but the Trainer calls "
                f"it as {name}({', '.join(wanted)}): a step is a function of the state it "
                f"updates. Fix: def {name}(self, {', '.join(wanted)}) and use those arguments, "
                "not self.model / self.optimizer / self.rngs."
            )
    if isinstance(task, Task):
        mine = {
            name: getattr(type(task), name) is not getattr(Task, name)
            for name in ("training_step", "validation_step")
        }
        if mine["training_step"] != mine["validation_step"]:
            done, missing = sorted(mine, key=lambda n: not mine[n])
            raise NotImplementedError(
                f"{type(task).__name__} overrides {done} but not {missing}, which would "
                f"silently run the default classification {missing}. Fix: define {missing} "
                "too."
            )


# K-step programs, per task object: fit after fit on the same task runs the program compiled
# by the first (a fresh js.jit per fit compiled it again, ~0.7 s for the digits CNN at K = 8).
_SCANNED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def scanned_training_step(task: Task, unroll: int | bool) -> Callable[..., Any]:
    """``js.jit(js.scan_steps(task.training_step))``, kept for ``task`` while its
    configuration (what ``training_step`` may read from ``self``, frozen into the program when
    it is traced) is unchanged: rebinding an attribute of the task builds a new one. The model,
    optimizer and Rngs are arguments of the program, so a new one does not."""
    config = tuple(
        (name, id(value))
        for name, value in sorted(getattr(task, "__dict__", {}).items())
        if name not in ("model", "optimizer", "rngs")
    )
    key = (type(task).training_step, unroll, config)
    build = lambda: js.jit(js.scan_steps(task.training_step, unroll=unroll))  # noqa: E731
    try:
        cached = _SCANNED.get(task)
    except TypeError:  # a task that cannot be weakly referenced: a new program per fit
        return build()
    if cached is None or cached[0] != key:
        cached = _SCANNED[task] = (key, build())
    return cached[1]
