"""Learning-rate schedules: thin wrappers over optax's, with PyTorch's scheduler arguments.

A schedule is any callable ``step -> lr`` (``step`` counts optimizer steps from 0); every optax
schedule works as an optimizer's ``lr``. Combine schedules with ``optax.join_schedules``, or
use ``optax.warmup_cosine_decay_schedule`` for warmup followed by cosine decay.
"""

from __future__ import annotations

from typing import TypeAlias

import optax

LearningRate: TypeAlias = float | optax.Schedule
"""An optimizer's ``lr``: a float >= 0, or a schedule ``step -> lr``.

A schedule is called with the optimizer's step count (an int32 array, traced inside
``js.jit``) and returns the rate for that step as a float or a scalar array:
``optax.Schedule``, so every optax schedule and :func:`cosine_schedule`/:func:`linear_warmup`
fit. The model is optax's ``ScalarOrSchedule``, less its ``jax.Array`` (a fixed rate is a
Python number here).
"""


def cosine_schedule(lr: float, total_steps: int, *, eta_min: float = 0.0) -> optax.Schedule:
    """Cosine annealing from ``lr`` to ``eta_min`` over ``total_steps`` steps.

    ``lr(t) = eta_min + (lr - eta_min) * (1 + cos(pi * t / total_steps)) / 2``, as
    ``torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total_steps, eta_min=eta_min)``
    stepped once per optimizer step. After ``total_steps`` it stays at ``eta_min`` (PyTorch's
    rises again). It is ``optax.cosine_decay_schedule(lr, total_steps, alpha=eta_min / lr)``.

    Example:
        >>> from js.optim import cosine_schedule
        >>> schedule = cosine_schedule(0.1, 100, eta_min=0.001)
        >>> round(float(schedule(0)), 6), round(float(schedule(100)), 6)
        (0.1, 0.001)
    """
    if not total_steps > 0:
        raise ValueError(f"cosine_schedule: total_steps must be > 0, got {total_steps!r}")
    if not 0 <= eta_min <= lr:
        raise ValueError(f"cosine_schedule: eta_min must be in [0, lr={lr}], got {eta_min!r}")
    alpha = eta_min / lr if lr else 0.0
    return optax.cosine_decay_schedule(init_value=lr, decay_steps=total_steps, alpha=alpha)


def linear_warmup(lr: float, warmup_steps: int, *, start_factor: float = 0.0) -> optax.Schedule:
    """Linear warmup from ``start_factor * lr`` to ``lr`` over ``warmup_steps``, then ``lr``.

    As ``torch.optim.lr_scheduler.LinearLR(opt, start_factor, end_factor=1.0,
    total_iters=warmup_steps)`` stepped once per optimizer step (PyTorch's ``start_factor``
    must be > 0; here 0 is allowed). It is ``optax.linear_schedule(start_factor * lr, lr,
    warmup_steps)``.

    Example:
        >>> from js.optim import linear_warmup
        >>> schedule = linear_warmup(0.1, 10)
        >>> [round(float(schedule(t)), 4) for t in (0, 5, 10, 20)]
        [0.0, 0.05, 0.1, 0.1]
    """
    if not warmup_steps > 0:
        raise ValueError(f"linear_warmup: warmup_steps must be > 0, got {warmup_steps!r}")
    if not 0 <= start_factor <= 1:
        raise ValueError(f"linear_warmup: start_factor must be in [0, 1], got {start_factor!r}")
    return optax.linear_schedule(start_factor * lr, lr, transition_steps=warmup_steps)
