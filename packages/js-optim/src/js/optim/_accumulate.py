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

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from js._checks import check_int, sharding_of

from ._optimizer import Custom, Optimizer
from ._param_group import OptState, ParamGroup
from ._program import Program, placed_init


def check_every(every) -> int:
    """``every`` (steps per update) as a Python int >= 1 (NumPy integers too; a bool or a float
    is refused)."""
    return check_int("accumulate", "every", every, 1)


class Accumulate(Custom, Optimizer):
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

    def __init__(self, optimizer: Optimizer, every: int):  # noqa: D107 - see the class
        # Not Optimizer.__init__: the groups, parameters and their checks are the inner's.
        self.inner = optimizer
        self.every = every
        self.inner_name = type(optimizer).__name__
        self.params = optimizer.params
        self._built = optimizer._built
        self._trainable = optimizer._trainable
        self._sources, self._search = optimizer._sources, optimizer._search  # how grads are found
        self._dtype = optimizer._dtype
        self._step_count = optimizer._step_count  # real updates: the inner optimizer's count
        variables = self.params.variables
        indices = [i for i, t in enumerate(self._trainable) if t]
        arrays = [variables[i].value for i in indices]
        program = Program(self, (type(self), tuple(a.shape for a in arrays)))
        acc = placed_init(program, arrays) if arrays else []
        self._acc_keys = tuple(f"acc_grads.{self.params.paths[i]}" for i in indices)
        self._acc = nnx.data(tuple(OptState(a) for a in acc))
        zeros = [np.zeros((), np.int32), np.zeros((), np.int32)]
        count = optimizer._step_count.value
        if isinstance(sharding := sharding_of(count), NamedSharding):
            mini, done = jax.device_put(zeros, NamedSharding(sharding.mesh, PartitionSpec()))
        else:
            mini, done = jax.device_put(zeros)
        self._mini_step, self._gradient_step = OptState(mini), OptState(done)

    def _init_pure(self, arrays: list, indices) -> list:  # pyright: ignore[reportIncompatibleMethodOverride]
        return [jnp.zeros(a.shape, jnp.float32) for a in arrays]

    @property
    def param_groups(self) -> list[ParamGroup]:
        """The wrapped optimizer's ``param_groups``."""
        return self.inner.param_groups

    @property
    def defaults(self) -> dict:
        """The wrapped optimizer's ``defaults``."""
        return self.inner.defaults

    def _groups_owner(self) -> Optimizer:
        return self.inner

    def _state_items(self) -> list[tuple[str, OptState]]:
        items = [("mini_step", self._mini_step), ("gradient_step", self._gradient_step)]
        items += [(f"inner_opt_state.{k}", v) for k, v in self.inner._state_items()]
        return items + list(zip(self._acc_keys, self._acc, strict=True))

    def _variables(self) -> list[OptState]:
        return [self._mini_step, self._gradient_step, *self._acc, *self.inner._variables()]

    def _program_key(self) -> Hashable:
        return (type(self), self.every, self.inner._program_key())

    def _pure(self, params: list, grads: list, values: list) -> tuple[list, list]:
        mini, done, *rest = values
        acc, inner = rest[: len(self._acc)], rest[len(self._acc) :]
        # Welford's running mean, as optax.MultiSteps: acc + (g - acc) / (n + 1), in float32
        acc = [a + (g - a) / (mini + 1) for a, g in zip(acc, grads, strict=True)]
        emit = mini == self.every - 1

        def final(params, acc, inner):
            mean = [a.astype(g.dtype) for a, g in zip(acc, grads, strict=True)]
            return self.inner._pure(params, mean, inner)

        def keep(params, acc, inner):
            return list(params), list(inner)

        new_params, new_inner = jax.lax.cond(emit, final, keep, list(params), acc, list(inner))
        new_acc = [jnp.where(emit, jnp.zeros_like(a), a).astype(jnp.float32) for a in acc]
        new_done = jnp.where(emit, done + 1, done)
        return new_params, [(mini + 1) % self.every, new_done, *new_acc, *new_inner]

    def _adapt(self, now: tuple[bool, ...], flipped: list[str]) -> None:
        raise ValueError(
            f"Accumulate.step: requires_grad changed since the optimizer was built: "
            f"{', '.join(flipped)}. Fix: build the optimizer and accumulate(...) again after "
            "setting requires_grad."
        )

    def __repr__(self) -> str:
        return f"Accumulate({self.inner!r}, every={self.every})"


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
