"""``RMSprop``, as ``torch.optim.RMSprop``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from js._checks import check_bool, check_number

from ._arithmetic import (
    Scalars,
    State,
    l2,
    lerp,
)
from ._optimizer import Optimizer
from ._schedules import LearningRate


class RMSprop(Optimizer):
    """RMSprop, as ``torch.optim.RMSprop`` (Hinton's running average of squared gradients).

    Update rule (``g`` the gradient, ``p`` the parameter; ``v``, ``a``, ``b`` start at zero)::

        g = g + weight_decay * p
        v = alpha * v + (1 - alpha) * g**2
        a = a + (1 - alpha) * (g - a)                 # centered only
        d = sqrt(v - a**2 if centered else v) + eps
        b = momentum * b + g / d                      # when momentum > 0 at construction
        p = p - lr * (b if momentum > 0 else g / d)

    Same arithmetic as torch's single-tensor path, so results agree to float32 rounding. No
    ``capturable``, ``foreach`` options. State keys ``'rmsprop.square_avg.<path>'``,
    ``'rmsprop.grad_avg.<path>'`` (centered), ``'rmsprop.momentum_buffer.<path>'`` (momentum).

    Args:
        params: ``model.parameters()``, or a list of parameter-group dicts.
        lr: learning rate >= 0, or a schedule ``step -> lr``.
        alpha: smoothing constant in [0, 1].
        eps: added to the denominator, >= 0.
        weight_decay: L2 penalty >= 0, added to the gradient.
        momentum: momentum factor >= 0. A group built with 0 keeps no momentum buffer, so
            giving it momentum later is refused (as in torch, where it would fail).
        centered: normalize by the variance estimate (``v - a**2``) instead of ``v``.
        maximize: ascend the objective instead of descending it (static).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import RMSprop
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = RMSprop(model.parameters(), lr=0.01)
        >>> opt.step({"w": jnp.array([1.0, -1.0])})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.9, 1.1]
    """

    name = "rmsprop"
    static = ("centered", "maximize")

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)
        defaults |= dict(momentum=momentum, centered=centered)
        super().__init__(params, defaults | dict(maximize=maximize))

    def check(self, group: Mapping[str, Any]) -> None:
        """Refuse a group's bad options (names the option, the value and the range)."""
        check_number("", "alpha", group["alpha"], 0, 1)
        check_number("", "eps", group["eps"], 0)
        check_number("", "weight_decay", group["weight_decay"], 0)
        check_number("", "momentum", group["momentum"], 0)
        check_bool("", "centered", group["centered"])
        check_bool("", "maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host."""
        alpha = float(group["alpha"])
        return dict(
            alpha=alpha,
            one_minus_alpha=1 - alpha,
            eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]),
            momentum=float(group["momentum"]),
        )

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> State:
        """``square_avg`` (and ``grad_avg`` when centered, ``momentum_buffer`` with momentum)."""
        state = {"square_avg": jnp.zeros_like(param)}
        if group["centered"]:
            state["grad_avg"] = jnp.zeros_like(param)
        if group["momentum"] > 0:
            state["momentum_buffer"] = jnp.zeros_like(param)
        return state

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: State,
        h: Scalars,
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, State]:
        """One step of one parameter (torch's ``_single_tensor_rmsprop``)."""
        grad = -grad if group["maximize"] else grad
        g = l2(grad, param, h)
        new = {"square_avg": state["square_avg"] * h["alpha"] + h["one_minus_alpha"] * g * g}
        if group["centered"]:
            new["grad_avg"] = lerp(state["grad_avg"], g, h["one_minus_alpha"])
            avg = jnp.sqrt(new["square_avg"] - new["grad_avg"] * new["grad_avg"]) + h["eps"]
        else:
            avg = jnp.sqrt(new["square_avg"]) + h["eps"]
        if "momentum_buffer" in state:
            new["momentum_buffer"] = state["momentum_buffer"] * h["momentum"] + g / avg
            return param + -h["lr"] * new["momentum_buffer"], new
        return param + -h["lr"] * g / avg, new
