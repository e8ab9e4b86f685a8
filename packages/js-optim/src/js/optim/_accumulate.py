"""Gradient accumulation: ``accumulate(optimizer, every=k)`` updates once per k steps.

Each ``step(grads)`` adds the gradients to a running mean (Welford's update, as
``optax.MultiSteps`` does it); every ``k``-th step applies the wrapped optimizer's update to
that mean and clears it, and the other steps leave the parameters exactly as they are. For a
mean loss over ``k`` batches of one size this is one step on the concatenated batch. The
running mean and the position in the cycle are optimizer state, so they are in
:meth:`state_dict` and a checkpoint taken between two updates resumes mid-cycle.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from js._checks import check_int, sharding_of

from ._optimizer import Optimizer, Rule
from ._param_group import OptState, ParamGroup
from ._program import Program, placed_init


def check_every(every) -> int:
    """``every`` (steps per update) as a Python int >= 1 (NumPy integers too; a bool or a float
    is refused)."""
    return check_int("accumulate", "every", every, 1)


class Accumulate(Optimizer):
    """The update of ``optimizer`` on the mean of ``every`` consecutive gradients.

    ``step_count`` counts real updates (one per ``every`` calls of :meth:`step`), and a
    learning-rate schedule advances once per real update, as in PyTorch with
    ``accumulate_grad_batches``. ``param_groups`` are the wrapped optimizer's (write them
    here). State dict keys: ``'step_count'``, ``'mini_step'`` (calls since the last update),
    ``'gradient_step'`` (updates), ``'acc_grads.<path>'`` (the running mean, float32),
    ``'inner_opt_state.<key>'`` (the wrapped optimizer's per-parameter keys, e.g.
    ``'inner_opt_state.adam.mu.fc.weight'``) and ``'param_groups.<i>.<option>'``.

    Build it with :func:`accumulate`.
    """

    # Its own state (Accumulating.build), beside the wrapped optimizer's.
    _acc: Any
    _acc_keys: tuple[str, ...]
    _mini_step: OptState
    _gradient_step: OptState

    def __init__(self, optimizer: Optimizer, every: int):  # noqa: D107 - see the class
        # Not Optimizer.__init__: the groups, parameters and their checks are the inner's (the
        # properties below read them there).
        self.inner = optimizer
        self.every = every
        self.inner_name = type(optimizer).__name__
        self.params = optimizer.params
        self.rule().build()

    # What the base class's step and state dict read of an optimizer, from the wrapped one: its
    # parameters as built, how its gradients are found, its dtype and its step count (the real
    # updates). requires_grad cannot change here (Accumulating.adapt refuses it).

    @property
    def _built(self) -> tuple:
        return self.inner._built

    @property
    def _trainable(self) -> tuple[bool, ...]:
        return self.inner._trainable

    @property
    def _sources(self) -> tuple[str | None, ...]:
        return self.inner._sources

    @property
    def _search(self) -> bool:
        return self.inner._search

    @property
    def _dtype(self) -> np.dtype:
        return self.inner._dtype

    @property
    def _step_count(self) -> OptState:
        return self.inner._step_count

    @property
    def param_groups(self) -> list[ParamGroup]:
        """The wrapped optimizer's ``param_groups``."""
        return self.inner.param_groups

    @property
    def defaults(self) -> dict:
        """The wrapped optimizer's ``defaults``."""
        return self.inner.defaults

    def rule(self) -> Rule:
        """An :class:`Accumulating` rule around the wrapped optimizer's rule."""
        return Accumulating(self, self.inner.rule())

    def __repr__(self) -> str:
        return f"Accumulate({self.inner!r}, every={self.every})"


class Accumulating(Rule):
    """The rule of :class:`Accumulate`, as ``optax.MultiSteps`` wraps a transform: it holds
    the wrapped optimizer's rule, adds each step's gradients to a running mean and, on every
    ``every``-th step, runs the wrapped rule on that mean. Its state: ``mini_step``,
    ``gradient_step``, the running mean (float32), then the wrapped rule's."""

    def __init__(self, optimizer: Accumulate, inner: Rule) -> None:
        super().__init__(optimizer)
        self.accumulate: Accumulate = optimizer
        self.inner = inner
        self.groups = inner.groups  # param_groups are the wrapped optimizer's

    def key(self) -> Hashable:
        return (type(self.accumulate), self.accumulate.every, self.inner.key())

    def build(self) -> None:
        """A zero running mean per trainable parameter (float32, on its sharding) and the two
        counters, replicated beside ``step_count``; the wrapped state is already built."""
        o = self.accumulate
        variables = o.params.variables
        indices = [i for i, t in enumerate(o._trainable) if t]
        arrays = [variables[i].value for i in indices]
        program = Program(o, (type(o), tuple(a.shape for a in arrays)))
        acc = placed_init(program, arrays) if arrays else []
        o._acc_keys = tuple(f"acc_grads.{o.params.paths[i]}" for i in indices)
        o._acc = nnx.data(tuple(OptState(a) for a in acc))
        zeros = [np.zeros((), np.int32), np.zeros((), np.int32)]
        count = o._step_count.value
        if isinstance(sharding := sharding_of(count), NamedSharding):
            mini, done = jax.device_put(zeros, NamedSharding(sharding.mesh, PartitionSpec()))
        else:
            mini, done = jax.device_put(zeros)
        o._mini_step, o._gradient_step = OptState(mini), OptState(done)

    def init(self, arrays: list, key: Any) -> list:
        return [jnp.zeros(a.shape, jnp.float32) for a in arrays]

    def variables(self) -> list[OptState]:
        o = self.accumulate
        return [o._mini_step, o._gradient_step, *o._acc, *self.inner.variables()]

    def items(self) -> list[tuple[str, OptState]]:
        o = self.accumulate
        items = [("mini_step", o._mini_step), ("gradient_step", o._gradient_step)]
        items += [(f"inner_opt_state.{k}", v) for k, v in self.inner.items()]
        return items + list(zip(o._acc_keys, o._acc, strict=True))

    def update(self, params: list, grads: list, values: list) -> tuple[list, list]:
        every = self.accumulate.every
        count = len(self.accumulate._acc)
        mini, done, *rest = values
        acc, inner = rest[:count], rest[count:]
        # Welford's running mean, as optax.MultiSteps: acc + (g - acc) / (n + 1), in float32
        acc = [a + (g - a) / (mini + 1) for a, g in zip(acc, grads, strict=True)]
        emit = mini == every - 1

        def final(params, acc, inner):
            mean = [a.astype(g.dtype) for a, g in zip(acc, grads, strict=True)]
            return self.inner.update(params, mean, inner)

        def keep(params, acc, inner):
            return list(params), list(inner)

        new_params, new_inner = jax.lax.cond(emit, final, keep, list(params), acc, list(inner))
        new_acc = [jnp.where(emit, jnp.zeros_like(a), a).astype(jnp.float32) for a in acc]
        new_done = jnp.where(emit, done + 1, done)
        return new_params, [(mini + 1) % every, new_done, *new_acc, *new_inner]

    def adapt(self, now: tuple[bool, ...], flipped: list[str]) -> None:
        raise ValueError(
            f"Accumulate.step: requires_grad changed since the optimizer was built: "
            f"{', '.join(flipped)}. Fix: build the optimizer and accumulate(...) again after "
            "setting requires_grad."
        )


def accumulate(optimizer: Optimizer, *, every: int) -> Accumulate:
    """Accumulate gradients over ``every`` steps and update once, with ``optimizer``'s rule.

    ``update = rule(mean(g_1 .. g_every))``: the parameters change on every ``every``-th
    ``step`` only; for a mean loss over batches of one size that equals one step on the
    ``every`` batches concatenated (to float32 rounding). The returned optimizer replaces
    ``optimizer`` (build it from a fresh one: its state starts again from zero).

    Args:
        optimizer: a js optimizer (``SGD``, ``Adam``, ``AdamW``, ``Optax``, ...) that has not
            stepped yet.
        every: steps per update (>= 1).

    Returns:
        The accumulating optimizer (its ``param_groups`` are ``optimizer``'s).

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
