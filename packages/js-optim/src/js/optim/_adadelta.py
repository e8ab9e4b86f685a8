"""``Adadelta``, as ``torch.optim.Adadelta``."""

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
)
from ._optimizer import Optimizer
from ._schedules import LearningRate


class Adadelta(Optimizer):
    """Adadelta, as ``torch.optim.Adadelta``.

    Update rule (``v``, ``u`` start at zero)::

        g = g + weight_decay * p
        v = rho * v + (1 - rho) * g**2
        d = sqrt(u + eps) / sqrt(v + eps) * g
        u = rho * u + (1 - rho) * d**2
        p = p - lr * d

    Same arithmetic as torch's single-tensor path, so results agree to float32 rounding. No
    ``capturable``, ``foreach``. State keys ``'adadelta.square_avg.<path>'``,
    ``'adadelta.acc_delta.<path>'``.

    Args:
        params: ``model.parameters()``, or a list of parameter-group dicts.
        lr: scale of the step >= 0 (1.0 is the paper's rule), or a schedule ``step -> lr``.
        rho: decay of the running averages, in [0, 1].
        eps: added inside both square roots, >= 0.
        weight_decay: L2 penalty >= 0, added to the gradient.
        maximize: ascend the objective instead of descending it (static).

    Example:
        >>> import jax.numpy as jnp, js
        >>> from js.optim import Adadelta
        >>> class Scale(js.Module):
        ...     def __init__(self):
        ...         self.w = js.Parameter(jnp.ones(2))
        >>> model = Scale()
        >>> opt = Adadelta(model.parameters())
        >>> opt.step({"w": jnp.array([1.0, -1.0])})
        >>> [round(x, 4) for x in model.w.value.tolist()]
        [0.9968, 1.0032]
    """

    name = "adadelta"
    static = ("maximize",)

    def __init__(
        self,
        params: Any,
        lr: LearningRate = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def check(self, group: Mapping[str, Any]) -> None:
        """Refuse a group's bad options (names the option, the value and the range)."""
        check_number("", "rho", group["rho"], 0, 1)
        check_number("", "eps", group["eps"], 0)
        check_number("", "weight_decay", group["weight_decay"], 0)
        check_bool("", "maximize", group["maximize"])

    def scalars(self, group: Mapping[str, Any]) -> dict[str, float]:
        """The update's float scalars, in double on the host."""
        rho = float(group["rho"])
        return dict(
            rho=rho,
            one_minus_rho=1 - rho,
            eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]),
        )

    def init(self, param: jax.Array, group: Mapping[str, Any]) -> State:
        """``square_avg`` (of gradients) and ``acc_delta`` (of updates)."""
        return {"square_avg": jnp.zeros_like(param), "acc_delta": jnp.zeros_like(param)}

    def update(
        self,
        param: jax.Array,
        grad: jax.Array,
        state: State,
        h: Scalars,
        step: jax.Array,
        group: Mapping[str, Any],
    ) -> tuple[jax.Array, State]:
        """One step of one parameter (torch's ``_single_tensor_adadelta``)."""
        grad = -grad if group["maximize"] else grad
        g = l2(grad, param, h)
        square_avg = state["square_avg"] * h["rho"] + h["one_minus_rho"] * g * g
        std = jnp.sqrt(square_avg + h["eps"])
        delta = jnp.sqrt(state["acc_delta"] + h["eps"]) / std * g
        acc_delta = state["acc_delta"] * h["rho"] + h["one_minus_rho"] * delta * delta
        new = {"square_avg": square_avg, "acc_delta": acc_delta}
        return param + -h["lr"] * delta, new
