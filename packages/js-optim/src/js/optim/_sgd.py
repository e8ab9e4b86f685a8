"""``SGD``: stochastic gradient descent with momentum, as ``torch.optim.SGD``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from js._checks import check_bool, check_number

from ._optimizer import Optimizer
from ._schedules import LearningRate


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening and Nesterov, as
    ``torch.optim.SGD``.

    Update rule (``g`` the gradient, ``p`` the parameter, ``b`` the momentum buffer, ``t`` the
    step from 1)::

        g = -g if maximize else g
        g = g + weight_decay * p                    # L2 penalty added to the gradient
        b = g if t == 1 else momentum * b + (1 - dampening) * g   # when momentum != 0
        g = g + momentum * b if nesterov else b
        p = p - lr * g

    Differences from PyTorch: no ``.grad`` buffers (``step(grads)``); ``lr`` may be a schedule.
    A group built with ``momentum=0`` keeps no buffer, so its momentum cannot be written to a
    nonzero value later (build it with a momentum). State dict keys: ``'step_count'``,
    ``'momentum.trace.<path>'`` (with momentum), ``'param_groups.<i>.<option>'`` for ``lr``,
    ``momentum``, ``dampening``, ``weight_decay``.

    Args:
        params: ``model.parameters()`` or a list of parameter groups (see ``Optimizer``).
        lr: learning rate >= 0, or a schedule ``step -> lr``, JAX-traceable (``step`` is a
            traced int32: use ``jnp.where`` or optax schedules, not a Python ``if``).
        momentum: momentum factor >= 0 (0 disables it).
        dampening: dampening of the momentum, >= 0.
        weight_decay: L2 penalty >= 0, added to the gradient.
        nesterov: use Nesterov momentum (requires ``momentum > 0`` and ``dampening == 0``).
        maximize: ascend the objective instead of descending it.

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import SGD
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
        >>> opt.step({"w": jnp.ones(2)})
        >>> [round(x, 4) for x in model.w.value.tolist()], int(opt.step_count)
        ([0.9, 0.9], 1)
    """

    name = "momentum"
    static = ("nesterov", "maximize")

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        if isinstance(dampening, bool) or isinstance(weight_decay, bool):
            # js-optim 0.1's order was (params, lr, momentum, nesterov, weight_decay)
            raise TypeError(
                "SGD: got a bool where torch's order puts dampening or weight_decay; since "
                "js-optim 0.2 SGD's arguments are (params, lr, momentum, dampening, "
                "weight_decay, nesterov), as torch.optim.SGD's. Fix: pass them by keyword, "
                "SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)."
            )
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def check(self, group: Mapping[str, Any]) -> None:
        """momentum, dampening, weight_decay >= 0; nesterov needs momentum and no dampening."""
        for name in ("momentum", "dampening", "weight_decay"):
            check_number("", name, group[name], 0)
        check_bool("", "nesterov", group["nesterov"])
        check_bool("", "maximize", group["maximize"])
        if group["nesterov"] and (group["momentum"] == 0 or group["dampening"] != 0):
            raise ValueError(
                "nesterov=True requires momentum > 0 and dampening = 0, got "
                f"momentum={group['momentum']!r}, dampening={group['dampening']!r}"
            )

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """momentum, 1 - dampening and weight_decay, in double."""
        return {
            "momentum": float(group["momentum"]),
            "one_minus_dampening": 1.0 - float(group["dampening"]),
            "weight_decay": float(group["weight_decay"]),
        }

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> dict[str, jax.Array]:
        """A zero momentum buffer ``trace`` when the group's momentum is not 0."""
        return {"trace": jnp.zeros_like(param)} if group["momentum"] != 0 else {}

    def flags(self, group: Mapping[str, Any]) -> dict[str, Any]:
        """Terms left out of the program while their option is 0, as torch skips them."""
        return {"decay": group["weight_decay"] != 0, "dampened": group["dampening"] != 0}

    def update(self, param, grad, state, h, step, group):
        """torch's SGD step for one parameter."""
        g = -grad if group["maximize"] else grad
        if group["decay"]:
            g = g + h["weight_decay"] * param
        if "trace" in state:
            momentum = h["momentum"]
            dampened = h["one_minus_dampening"] * g if group["dampened"] else g
            buffer = jnp.where(step == 1, g, dampened + momentum * state["trace"])
            state = {"trace": buffer}
            g = g + momentum * buffer if group["nesterov"] else buffer
        return param - h["lr"] * g, state
