"""Learning-rate schedulers on the host, as ``torch.optim.lr_scheduler`` (PyTorch 2.13).

A scheduler writes ``optimizer.param_groups[i]["lr"]`` between steps, in Python doubles with
PyTorch's own arithmetic: the chainable ``get_lr`` recursion (each rate computed from the
group's current one) where PyTorch uses it, its closed forms where it does (``step(epoch)``,
a resumed ``CosineAnnealingLR``), so the sequence of rates equals PyTorch's exactly. A js
optimizer reads a written ``lr`` at its next step without compiling again (the rate is an
array of its state, not a constant of the program).

This is the other way to vary the rate. A *traced* schedule, ``lr=cosine_schedule(...)`` (a
callable of the step count evaluated inside the compiled step), needs no host work per step
and runs under ``Trainer(steps_per_execution=K)``; a scheduler here is PyTorch's object, with
its state dict, ``ReduceLROnPlateau`` reacting to a metric and ``SequentialLR`` chaining
others. A group whose ``lr`` is a traced schedule is refused: it has no rate to write.

Differences from PyTorch: the optimizer is any object with ``param_groups`` (a list of
dict-like groups with ``"lr"``), not checked to be a ``torch.optim.Optimizer``; PyTorch's
warning about calling ``scheduler.step()`` before ``optimizer.step()`` (which patches the
optimizer's ``step``) is not given. State dicts have PyTorch's keys, so one saved by PyTorch
loads here (lambdas excepted, as there).

Example:
    >>> from js.optim.lr_scheduler import StepLR
    >>> class Opt:  # any object with param_groups: js.optim's optimizers have them
    ...     param_groups = [{"lr": 0.1}]
    >>> scheduler = StepLR(Opt(), step_size=2, gamma=0.5)
    >>> lrs = []
    >>> for epoch in range(5):
    ...     lrs.append(scheduler.get_last_lr()[0])
    ...     scheduler.step()
    >>> lrs
    [0.1, 0.1, 0.05, 0.05, 0.025]
"""

from ._sched_base import EPOCH_DEPRECATION_WARNING as EPOCH_DEPRECATION_WARNING
from ._sched_base import LRScheduler as LRScheduler
from ._sched_cosine import CosineAnnealingLR as CosineAnnealingLR
from ._sched_lambda import LambdaLR as LambdaLR
from ._sched_linear import LinearLR as LinearLR
from ._sched_onecycle import OneCycleLR as OneCycleLR
from ._sched_plateau import ReduceLROnPlateau as ReduceLROnPlateau
from ._sched_sequential import SequentialLR as SequentialLR
from ._sched_step import ExponentialLR as ExponentialLR
from ._sched_step import MultiStepLR as MultiStepLR
from ._sched_step import StepLR as StepLR

__all__ = [
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "OneCycleLR",
    "ReduceLROnPlateau",
    "SequentialLR",
    "StepLR",
]
