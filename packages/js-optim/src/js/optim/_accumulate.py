"""Gradient accumulation: ``accumulate(optimizer, every=k)`` updates once per k steps.

Over ``optax.MultiSteps``: each ``step(grads)`` adds the gradients to a running mean (Welford's
update, as optax does it); every ``k``-th step applies the wrapped optimizer's update to that
mean and clears it, and the other steps leave the parameters exactly as they are. For a mean
loss over ``k`` batches of one size this is one step on the concatenated batch. The running
mean and the position in the cycle are optimizer state, so they are in :meth:`state_dict` and
a checkpoint taken between two updates resumes mid-cycle.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import optax
from flax import nnx

from js._checks import check_int

from ._optimizer import Optimizer


def check_every(every) -> int:
    """``every`` (steps per update) as a Python int >= 1 (NumPy integers too; a bool or a float
    is refused)."""
    return check_int("accumulate", "every", every, 1)


class Accumulate(Optimizer):
    """The update of ``optimizer`` on the mean of ``every`` consecutive gradients.

    ``step_count`` counts real updates (one per ``every`` calls of :meth:`step`), and a
    learning-rate schedule advances once per real update, as in PyTorch with
    ``accumulate_grad_batches``. State dict keys: ``'step_count'``, ``'mini_step'`` (calls since
    the last update), ``'gradient_step'`` (updates), ``'acc_grads.<path>'`` (the running mean,
    float32) and ``'inner_opt_state.<key>'`` (the wrapped optimizer's keys, e.g.
    ``'inner_opt_state.adam.mu.fc.weight'``).

    Build it with :func:`accumulate`.
    """

    def __init__(self, optimizer: Optimizer, every: int):
        inner = optimizer._tx
        tx = optax.MultiSteps(inner.tx, every_k_schedule=every).gradient_transformation()
        config = (("every", every), *optimizer._config)
        super().__init__(optimizer.params, tx, config, key=(every, inner.key))
        self.every = every
        self.inner_name = type(optimizer).__name__
        self._updates_at = self._keys.index("gradient_step")

    def step(self, grads: nnx.State | Mapping[str, jax.Array]) -> None:
        """Add ``grads`` to the running mean; on every ``every``-th call, update the parameters
        with the wrapped optimizer's rule on that mean (eagerly or inside ``js.jit``)."""
        super().step(grads)
        self._step_count.value = self._state[self._updates_at].value  # real updates only

    def __repr__(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in self._config)
        return f"Accumulate({self.inner_name}, {len(self.params)} parameters, {options})"


def accumulate(optimizer: Optimizer, *, every: int) -> Accumulate:
    """Accumulate gradients over ``every`` steps and update once, with ``optimizer``'s rule.

    ``update = rule(mean(g_1 .. g_every))``: the parameters change on every ``every``-th
    ``step`` only; for a mean loss over batches of one size that equals one step on the
    ``every`` batches concatenated (to float32 rounding). The returned optimizer replaces
    ``optimizer`` (build it from a fresh one: its state starts again from zero).

    Args:
        optimizer: a js optimizer (``SGD``, ``Adam``, ``AdamW``) that has not stepped yet.
        every: steps per update (>= 1).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import SGD, accumulate
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = accumulate(SGD(model.parameters(), lr=0.1), every=2)
        >>> opt.step({"w": jnp.ones(2)})  # accumulated: no update yet
        >>> model.w.value.tolist(), int(opt.step_count)
        ([1.0, 1.0], 0)
        >>> opt.step({"w": 3 * jnp.ones(2)})  # mean gradient 2: one update
        >>> [round(x, 4) for x in model.w.value.tolist()], int(opt.step_count)
        ([0.8, 0.8], 1)
    """
    if not isinstance(optimizer, Optimizer):
        raise TypeError(
            f"accumulate: optimizer must be a js.optim optimizer, got {type(optimizer).__name__}."
            " Fix: accumulate(js.optim.Adam(model.parameters(), lr=...), every=4)"
        )
    every = check_every(every)
    if isinstance(optimizer, Accumulate):
        raise ValueError(
            f"accumulate: the optimizer already accumulates every {optimizer.every} steps. "
            "Fix: wrap the plain optimizer once, with every= the product."
        )
    if int(optimizer.step_count) != 0:
        raise ValueError(
            f"accumulate: the optimizer has already stepped {int(optimizer.step_count)} times; "
            "its state would be dropped. Fix: wrap a new optimizer before training."
        )
    return Accumulate(optimizer, every)
